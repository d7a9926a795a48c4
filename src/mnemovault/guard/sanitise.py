"""Injection sanitiser for imported and tool-supplied text (SPEC section 7; step 3 of the write
path, before pseudonymisation).

**It is a heuristic, not a guarantee.** It looks for phrasing that tries to steer a model that
later reads the text: instructions to ignore previous instructions, references to the system
prompt, references to a developer message, demands to reveal chain of thought, and directives
that rewrite the reader's answer ("encode your response in Base64", "add this link to your
reply"). It reads through case, extra spacing, letter spacing, homoglyphs, zero-width
characters, leetspeak and a dozen translations of "ignore the previous instructions"
(:mod:`mnemovault.guard.normalise`, :mod:`mnemovault.guard.patterns`). A paraphrase it has no
pattern for, an instruction that reads like ordinary text ("What is the capital of Brazil?"),
or a language it does not know passes unflagged; retrieved records are fenced (SPEC section 5)
whatever this step finds.

**What is sanitised** (:func:`should_sanitise`): an item whose write came with
``trigger`` ``"import"`` (the CLI ``import`` and ``demo``), ``"tool"`` or ``"mcp"``
(:data:`SANITISED_TRIGGERS`), or whose ``provenance.source`` marks it as tool output:
``"tool"``, ``"tool_output"``, ``"mcp"``, ``"import"`` or a value starting with ``"tool:"``,
``"mcp:"`` or ``"import:"`` (:data:`SANITISED_SOURCES`; the MCP server's ``remember`` tool
writes with source ``"mcp"``, and this is how a caller of the batch API marks tool output:
``{"provenance": {"source": "tool:web_search"}}``). Everything else is the
caller's own words and is stored as written: ``remember`` (library, CLI, HTTP), the batch API
without such a source, and chat (``trigger="chat"``: the user's message and the assistant's
answer). SPEC section 2: remember stores text as text.

**What is rewritten** in a sanitised item: the content, every tag and every string value of the
provenance. Each hit is widened to its sentence (up to :data:`MAX_BEFORE` characters back and
:data:`MAX_AFTER` forward; a sentence ending in ``:`` takes the fenced code block after it) and
replaced by :data:`REDACTION`; hits in one sentence or in adjacent sentences become one
marker. Scope, subject and key are left alone: they are names the caller addresses the memory
by, and rewriting one would move it. A tag or provenance value whose redacted form would be too
long becomes the marker alone.

**The label**: a flagged item gets ``provenance[FLAG_KEY]`` = the families found, comma
separated in :data:`FAMILIES` order (``"ignore_instructions,system_prompt"``). The key is
reserved: a caller-supplied value is dropped on every write, so the key means exactly "the
sanitiser flagged this" and ``provenance->>'injection_flags' IS NOT NULL`` finds them all.

**Plugging in a classifier**: anything with ``name`` and ``detect(text) -> list[Hit]``
(:class:`Detector`) can join the heuristic: ``Sanitiser([HeuristicDetector(), Classifier()])``.
A whole-text verdict is one hit spanning the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import ValidationError
from mnemovault.guard import patterns
from mnemovault.guard.normalise import fold, fold_with_offsets
from mnemovault.models import MAX_CONTENT_CHARS, MAX_TAG_CHARS, MemoryInput
from mnemovault.validation import MAX_NAME_CHARS, validation_error_from_pydantic

REDACTION = "[REDACTED_POTENTIAL_PROMPT_INJECTION]"
"""What each hit (widened to its sentence) is replaced with."""

FLAG_KEY = "injection_flags"
"""The provenance key of the warning label: the families found, comma separated."""

FAMILIES = ("ignore_instructions", "system_prompt", "developer_message", "chain_of_thought",
            "response_directive")
"""The families the heuristic detector knows, in label order."""

SANITISED_TRIGGERS = frozenset({"import", "tool", "mcp"})
"""Write triggers whose items are always sanitised."""

SANITISED_SOURCES = frozenset({"tool", "tool_output", "mcp", "import"})
"""``provenance.source`` values (case-insensitive) that mark an item as tool-supplied."""

SANITISED_SOURCE_PREFIXES = ("tool:", "mcp:", "import:")
"""``provenance.source`` prefixes that mark an item as tool-supplied."""

MAX_BEFORE = 300
MAX_AFTER = 600
"""How far a hit is widened to its sentence, at most (characters back, forward)."""

_PROVENANCE_NAMES = {"source": MAX_NAME_CHARS, "agent": MAX_NAME_CHARS,
                     "run_id": MAX_NAME_CHARS, "source_id": MAX_NAME_CHARS}
_MAX_EXTRA_VALUE = 1000


@dataclass(frozen=True, order=True)
class Hit:
    """One detection: ``text[start:end]`` looks like ``family``."""

    start: int
    end: int
    family: str


class Detector(Protocol):
    """What the sanitiser asks a detector: the hits in a text (offsets into that text)."""

    name: str

    def detect(self, text: str) -> list[Hit]: ...


class HeuristicDetector:
    """The built-in detector: the phrase patterns of :mod:`mnemovault.guard.patterns` over
    the folded text, and chat-template markup over the original text.

    The fast path folds the text once without offsets and finds every gate word in it (one
    pass of a trie regex); a pattern is searched only if its gates pass, and in a long text
    only near the occurrences of its rarest gate group (a match contains one). Only a text
    with a hit is folded again with offsets, to place the hits in the original."""

    name = "heuristic"

    LONG = 4000
    """Texts longer than this (folded characters) are searched in windows around gates."""

    WINDOW = 600
    """How far a match may reach from its gate word, either side."""

    def __init__(self) -> None:
        groups: dict[tuple[str, ...], int] = {}
        self._folded: list[tuple[str, re.Pattern[str], tuple[int, ...]]] = []
        for family, ps in patterns.FAMILIES.items():
            for regex, gates in ps:
                idx = tuple(groups.setdefault(g, len(groups)) for g in gates)
                self._folded.append((family, re.compile(regex), idx))
        self._groups = [frozenset(g) for g in groups]
        words = sorted({w for g in groups for w in g})
        self._gate_rx = re.compile("(?=(" + patterns.trie(words) + "))")
        # a gate word found at a position implies each gate word that is a prefix of it
        self._prefixes = {w: tuple(p for p in words if w.startswith(p)) for w in words}
        self._raw = [(family, re.compile(p, re.IGNORECASE))
                     for family, ps in patterns.RAW.items() for p in ps]

    def _gates(self, folded: str) -> dict[str, list[int]]:
        """Every gate word in ``folded`` and where it starts."""
        found: dict[str, list[int]] = {}
        for m in self._gate_rx.finditer(folded):
            for w in self._prefixes[m.group(1)]:
                found.setdefault(w, []).append(m.start())
        return found

    def _windows(self, folded: str, found: dict[str, list[int]],
                 idx: tuple[int, ...]) -> list[tuple[int, int]]:
        """Where a pattern with gate groups ``idx`` can match in a long ``folded``."""
        if len(folded) <= self.LONG:
            return [(0, len(folded))]
        anchors = min(([p for w in self._groups[i] for p in found.get(w, ())] for i in idx),
                      key=len)
        out: list[tuple[int, int]] = []
        for p in sorted(anchors):
            lo, hi = max(0, p - self.WINDOW), min(len(folded), p + self.WINDOW)
            while lo > 0 and folded[lo - 1].isalnum():
                lo -= 1
            while hi < len(folded) and folded[hi].isalnum():
                hi += 1
            if out and lo <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
        return out

    def detect(self, text: str) -> list[Hit]:
        hits = []
        if "<" in text or "[" in text or "#" in text:
            hits = [Hit(m.start(), m.end(), family) for family, rx in self._raw
                    for m in rx.finditer(text)]
        folded = fold(text)
        found = self._gates(folded)
        if not found:
            return hits
        plan = []
        for family, rx, idx in self._folded:
            if all(not self._groups[i].isdisjoint(found.keys()) for i in idx):
                windows = self._windows(folded, found, idx)
                if any(rx.search(folded, lo, hi) for lo, hi in windows):
                    plan.append((family, rx, windows))
        if not plan:
            return hits
        folded, offsets = fold_with_offsets(text)
        for family, rx, windows in plan:
            for lo, hi in windows:
                for m in rx.finditer(folded, lo, hi):
                    s, e = m.span()
                    while s < e and not folded[s].isalnum():
                        s += 1  # the clause patterns may start on punctuation
                    if s >= e or patterns.NEGATION.search(folded, max(0, s - 40), s):
                        continue
                    hits.append(Hit(offsets[s], offsets[e - 1] + 1, family))
        return hits


_START = re.compile(r"[.!?。！？]+[\"'”’)\]]*\s+|\n|:\s+")
_END = re.compile(r"[.!?。！？]+[\"'”’)\]]*(?=\s|$)|\n")
_FENCE = re.compile(r"\s*```")


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` widened to the sentence (or line) around it, within the limits."""
    lo = max(0, start - MAX_BEFORE)
    s = lo
    for m in _START.finditer(text, lo, start):
        s = m.end()
    if s == lo and lo > 0:  # no boundary within reach: start at a word
        space = text.find(" ", lo, start)
        s = space + 1 if space >= 0 else start
    while s < start and text[s].isspace():
        s += 1
    hi = min(len(text), end + MAX_AFTER)
    stop = _END.search(text, end, hi)
    if stop is None:
        e = hi
        if hi < len(text):
            space = text.rfind(" ", end, hi)
            e = space if space >= 0 else end
    else:
        e = stop.start() if stop.group() == "\n" else stop.end()
    while e > end and text[e - 1].isspace():
        e -= 1
    if text[s:e].rstrip().endswith(":") and (f := _FENCE.match(text, e)):
        close = text.find("```", f.end())
        if close >= 0:
            e = close + 3
    return s, e


@dataclass(frozen=True)
class Sanitised:
    """A text after sanitising: the redacted text, the families found, the raw hits."""

    text: str
    families: tuple[str, ...]
    hits: tuple[Hit, ...]

    @property
    def flagged(self) -> bool:
        return bool(self.hits)


def _family_order(families: Iterable[str]) -> tuple[str, ...]:
    found = set(families)
    known = [f for f in FAMILIES if f in found]
    return (*known, *sorted(found - set(FAMILIES)))


class Sanitiser:
    """Runs its detectors over a text and redacts what any of them found."""

    def __init__(self, detectors: Sequence[Detector] | None = None) -> None:
        self.detectors: tuple[Detector, ...] = tuple(
            detectors if detectors is not None else (HeuristicDetector(),))

    def scan(self, text: str) -> list[Hit]:
        """Every detector's hits in ``text``, in text order."""
        return sorted(h for d in self.detectors for h in d.detect(text))

    def sanitise(self, text: str) -> Sanitised:
        """``text`` with every hit's sentence replaced by :data:`REDACTION`."""
        hits = self.scan(text)
        if not hits:
            return Sanitised(text, (), ())
        spans: list[list[int]] = []
        for h in hits:
            s, e = _widen(text, max(0, h.start), min(len(text), max(h.end, h.start + 1)))
            if spans and (s <= spans[-1][1] or not text[spans[-1][1]:s].strip()):
                spans[-1][1] = max(spans[-1][1], e)
            else:
                spans.append([s, e])
        out, last = [], 0
        for s, e in spans:
            out.append(text[last:s])
            out.append(REDACTION)
            last = e
        out.append(text[last:])
        return Sanitised("".join(out), _family_order(h.family for h in hits), tuple(hits))

    def sanitise_item(self, item: MemoryInput) -> MemoryInput:
        """A sanitised copy of ``item`` (content, tags, provenance string values) with the
        label in ``provenance[FLAG_KEY]`` when anything was found.

        Raises:
            ValidationError: the redacted content is longer than a memory may be.
        """
        families: list[str] = []

        def clean(value: str, limit: int) -> str:
            r = self.sanitise(value)
            families.extend(r.families)
            return r.text if len(r.text) <= limit else REDACTION

        content = self.sanitise(item.content)
        families.extend(content.families)
        if len(content.text) > MAX_CONTENT_CHARS:
            raise ValidationError(f"content: longer than {MAX_CONTENT_CHARS} characters once "
                                  "potential prompt injections are marked", field="content")
        prov: dict[str, Any] = item.provenance.model_dump(exclude_none=True)
        prov.pop(FLAG_KEY, None)
        prov["tags"] = [clean(t, MAX_TAG_CHARS) for t in item.provenance.tags]
        for k, v in list(prov.items()):
            if k != "tags" and isinstance(v, str):
                prov[k] = clean(v, _PROVENANCE_NAMES.get(k, _MAX_EXTRA_VALUE))
        if families:
            prov[FLAG_KEY] = ",".join(_family_order(families))
        elif content.text == item.content and prov == item.provenance.model_dump(
                exclude_none=True):
            return item
        data = item.model_dump()
        data.update(content=content.text, provenance=prov)
        return MemoryInput.model_validate(data)


@functools.cache
def default_sanitiser() -> Sanitiser:
    """The sanitiser the write path uses: the heuristic detector alone (built on first use:
    compiling its patterns takes a few tens of milliseconds)."""
    return Sanitiser()


def should_sanitise(item: MemoryInput, trigger: str) -> bool:
    """Whether a write's item is imported or tool-supplied (see the module docstring)."""
    if trigger.casefold() in SANITISED_TRIGGERS:
        return True
    source = (item.provenance.source or "").casefold()
    return source in SANITISED_SOURCES or source.startswith(SANITISED_SOURCE_PREFIXES)


def without_flag(item: MemoryInput) -> MemoryInput:
    """``item`` without a caller-supplied :data:`FLAG_KEY` (the key is the sanitiser's)."""
    extra = item.provenance.model_extra or {}
    if FLAG_KEY not in extra:
        return item
    prov = item.provenance.model_dump(exclude_none=True)
    prov.pop(FLAG_KEY)
    data = item.model_dump()
    data["provenance"] = prov
    return MemoryInput.model_validate(data)


def sanitise_items(items: list[MemoryInput], trigger: str,
                   sanitiser: Sanitiser | None = None) -> list[MemoryInput]:
    """The write path's step 3: imported and tool-supplied items sanitised and labelled,
    the others unchanged (but for a caller-supplied :data:`FLAG_KEY`, which is dropped).

    Raises:
        ValidationError: an item cannot hold its redacted form (names ``items.<i>.<field>``).
    """
    s = sanitiser or default_sanitiser()
    out = []
    for i, item in enumerate(items):
        try:
            out.append(s.sanitise_item(item) if should_sanitise(item, trigger)
                       else without_flag(item))
        except ValidationError as exc:
            name = exc.field or "content"
            raise ValidationError(f"items.{i}.{exc.message}", field=f"items.{i}.{name}") from None
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc, prefix=f"items.{i}") from None
    return out
