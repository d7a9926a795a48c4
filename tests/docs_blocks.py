"""The code blocks of the documentation, as tests/test_docs_examples.py runs them.

Which pages: README.md and every ``docs/**/*.md`` (found by glob: a new page is picked
up without being listed anywhere). Which blocks: fenced ``python``/``py`` blocks and
``bash``/``sh``/``shell`` blocks; any other fence (``json``, ``text``, none) is prose.

Opting out, with an HTML comment (invisible on the site and on GitHub):

* ``<!-- docs-test: skip REASON -->`` on the line(s) just before a fence: that block is
  not run (reported as skipped with the reason; a reason is required).
* ``<!-- docs-test: requires MODULE[, MODULE...] -->`` just before a fence: skipped when
  a module cannot be imported (an optional extra that is not installed).
* ``<!-- docs-test: skip-page REASON -->`` anywhere outside a fence: no block of the page
  is run.

Several markers may stand before one fence, one per comment, blank lines allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash",
             "shell": "bash"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<verb>[a-z-]+)\s*(?P<arg>.*?)\s*-->\s*$")
VERBS = {"skip", "requires", "skip-page"}


class MarkerError(ValueError):
    """A ``docs-test`` marker that is not one of the known forms."""


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str  # "python" or "bash"
    code: str
    skip: str | None = None
    requires: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page under docs/ (sorted: stable test ids)."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _marker(line: str, where: str) -> tuple[str, str] | None:
    m = MARKER.match(line)
    if m is None:
        if line.lstrip().startswith("<!--") and "docs-test" in line:
            raise MarkerError(f"{where}: not a docs-test marker: {line.strip()!r}")
        return None
    verb, arg = m["verb"], m["arg"]
    if verb not in VERBS:
        raise MarkerError(f"{where}: unknown docs-test marker {verb!r} (one of {sorted(VERBS)})")
    if not arg:
        raise MarkerError(f"{where}: docs-test {verb} needs a reason or a module name")
    return verb, arg


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of ``page`` with their markers applied.

    Raises:
        MarkerError: a malformed marker (so a typo never silently runs or skips a block).
    """
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").parse(text)
    fenced: set[int] = set()
    for tok in tokens:
        if tok.type == "fence" and tok.map:
            fenced.update(range(tok.map[0], tok.map[1]))
    page_skip = None
    for i, line in enumerate(lines):
        if i in fenced:
            continue
        found = _marker(line, f"{page.name}:{i + 1}")
        if found and found[0] == "skip-page":
            page_skip = found[1]
    out = []
    for tok in tokens:
        if tok.type != "fence" or not tok.map:
            continue
        language = LANGUAGES.get(tok.info.strip().split(" ")[0].lower())
        if language is None:
            continue
        block = Block(page, tok.map[0] + 1, language, tok.content, skip=page_skip)
        j = tok.map[0] - 1
        while j >= 0 and (not lines[j].strip() or MARKER.match(lines[j])):
            found = _marker(lines[j], f"{page.name}:{j + 1}") if lines[j].strip() else None
            if found and found[0] == "skip":
                block.skip = block.skip or found[1]
            elif found and found[0] == "requires":
                block.requires += [m.strip() for m in found[1].split(",") if m.strip()]
            j -= 1
        out.append(block)
    return out


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page)]
