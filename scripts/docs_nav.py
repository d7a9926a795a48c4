"""MkDocs hook (mkdocs.yml ``hooks:``): every page under docs/ is in the navigation.

A page listed in ``nav`` stays where it is listed. A page listed nowhere (a new one whose
author did not add its line yet) is appended, under the title of its first ``# `` heading,
to the section that ``extra.unlisted_pages_section`` names (created at the end if
missing), so it is reachable and ``validation.nav.omitted_files`` never fires. Pages whose
name starts with ``_`` are left out (fragments, drafts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _listed(items: Any) -> set[str]:
    out: set[str] = set()
    for item in items or []:
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, dict):
            for value in item.values():
                out |= _listed(value) if isinstance(value, list) else {str(value)}
    return out


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip().strip("`")
    return path.stem.replace("-", " ").capitalize()


def unlisted(docs_dir: Path, nav: list[Any]) -> list[str]:
    """The docs pages (relative paths) that ``nav`` does not name, sorted."""
    listed = _listed(nav)
    pages = sorted(p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*.md"))
    return [p for p in pages if p not in listed and not Path(p).name.startswith("_")]


def on_config(config: Any) -> Any:
    nav = config.nav
    if not nav:
        return config  # no nav: MkDocs lists every page itself
    missing = unlisted(Path(config.docs_dir), nav)
    if missing:
        name = config.extra.get("unlisted_pages_section", "More")
        section = next((item[name] for item in nav
                        if isinstance(item, dict) and isinstance(item.get(name), list)), None)
        if section is None:
            section = []
            nav.append({name: section})
        for page in missing:
            section.append({_title(Path(config.docs_dir) / page): page})
    return config
