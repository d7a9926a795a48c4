"""Injection sanitiser for imported and tool-supplied text (SPEC section 7; step 3 of the write
path, before pseudonymisation).

**It is a heuristic, not a guarantee.** The phrase rules look for phrasing that tries to
steer a model that later reads the text: instructions to ignore previous instructions,
references to the system prompt, references to a developer message, demands to reveal chain
of thought, and directives that rewrite the reader's answer ("encode your response in
Base64", "add this link to your reply"). It reads through case, extra spacing, letter
spacing, homoglyphs, zero-width characters, leetspeak and a dozen translations of "ignore
the previous instructions" (:mod:`mnemovault.guard.normalise`,
:mod:`mnemovault.guard.patterns`). A paraphrase it has no pattern for, an instruction that
reads like ordinary text ("What is the capital of Brazil?"), or a language it does not know
passes unflagged; retrieved records are fenced (SPEC section 5) whatever this step finds.

**What is sanitised** (:func:`should_sanitise`, :func:`tool_supplied`): an item whose write
came with ``trigger`` ``"import"`` (the CLI ``import`` and ``demo``), ``"tool"`` or ``"mcp"``
(:data:`SANITISED_TRIGGERS`), or whose ``provenance.source`` marks it as tool output
(:func:`tool_source`): read through the shared normalisation
(:func:`mnemovault.guard.normalise.canonical`: width, zero-width characters, homoglyphs) and
case, split into words at anything that is not a letter or a digit and at a change from
lower to upper case, the source has a word in :data:`SOURCE_WORDS` (``tool``, ``tools``,
``tooloutput``, ``mcp``, ``import``, ``imported``…). So ``tool``, ``" Tool "``, ``TOOLS``,
``tool-output``, ``tool_outputs``, ``tool:web_search``, ``web-tool``, ``mcp/github``,
``gmail_import`` and ``webTool`` all count; ``toolbox``, ``notes.jsonl`` and ``chat`` do not.
The MCP server's ``remember`` tool writes with source ``"mcp"``, and this is how a caller of
the batch API marks tool output: ``{"provenance": {"source": "tool:web_search"}}``.
Everything else is the caller's own words and is stored as written: ``remember`` (library,
CLI, HTTP), the batch API without such a source, and chat (``trigger="chat"``: the user's
message and the assistant's answer). SPEC section 2: remember stores text as text.

**Other paths** use the same rule: a procedure or version captured over MCP or marked as tool
output has its name, intent, step labels, edge conditions, tags and provenance strings
sanitised (:func:`sanitise_texts`, called by :mod:`mnemovault.procedures.service`); a
rectification replaces a flagged record's content, or comes from a tool, has its new
content sanitised and the record keeps its label (:func:`sanitise_rectified`).

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

**The detectors** (``MNEMOVAULT_INJECTION_DETECTORS``, :func:`default_sanitiser`): by
default the learned classifier (:class:`mnemovault.guard.learned.LearnedDetector`, family
``learned_injection``, its threshold ``MNEMOVAULT_INJECTION_THRESHOLD``) and then the
phrase rules (:class:`HeuristicDetector`); a text either flags is redacted and labelled the
same way, so the label, ``mnemovault flagged`` and the fenced recall treat both alike.

**Plugging in a classifier**: anything with ``name`` and ``detect(text) -> list[Hit]``
(:class:`Detector`) can join the heuristic: ``Sanitiser([HeuristicDetector(), Classifier()])``.
A whole-text verdict is one hit spanning the text. It fails closed like the capture guard: a
detector that raises, or answers with anything but a list of :class:`Hit` s (integer
offsets with ``0 <= start <= end <= len(text)``, a non-empty family name), makes the write
:class:`~mnemovault.errors.Unavailable` naming the detector, and nothing is stored.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import Unavailable, ValidationError
from mnemovault.guard import patterns
from mnemovault.guard.hit import Hit
from mnemovault.guard.normalise import canonical, fold, fold_with_offsets
from mnemovault.models import INJECTION_FLAGS, MAX_CONTENT_CHARS, MAX_TAG_CHARS, MemoryInput
from mnemovault.validation import MAX_NAME_CHARS, validation_error_from_pydantic

REDACTION = "[REDACTED_POTENTIAL_PROMPT_INJECTION]"
"""What each hit (widened to its sentence) is replaced with."""

FLAG_KEY = INJECTION_FLAGS
"""The provenance key of the warning label: the families found, a list in label order
(records labelled before it was a list hold one comma-separated string: read a label with
:func:`flag_list`)."""

FAMILIES = ("ignore_instructions", "system_prompt", "developer_message", "chain_of_thought",
            "response_directive")
"""The families the heuristic detector knows, in label order."""

SANITISED_TRIGGERS = frozenset({"import", "tool", "mcp"})
"""Write triggers whose items are always sanitised."""

SOURCE_WORDS = frozenset({"tool", "tools", "tooloutput", "tooloutputs", "toolresult",
                          "toolresults", "toolcall", "toolcalls", "mcp", "mcps", "import",
                          "imports", "imported", "importer"})
"""Words of a ``provenance.source`` that mark an item as tool-supplied (:func:`tool_source`)."""

SANITISED_SOURCES = frozenset({"tool", "tool_output", "mcp", "import"})
"""The canonical spellings of such sources (kept for callers; the rule is
:func:`tool_source`)."""

SANITISED_SOURCE_PREFIXES = ("tool:", "mcp:", "import:")
"""The canonical prefixes of such sources (kept for callers; the rule is
:func:`tool_source`)."""

_SOURCE_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

MAX_BEFORE = 300
MAX_AFTER = 600
"""How far a hit is widened to its sentence, at most (characters back, forward)."""

_PROVENANCE_NAMES = {"source": MAX_NAME_CHARS, "agent": MAX_NAME_CHARS,
                     "run_id": MAX_NAME_CHARS, "source_id": MAX_NAME_CHARS}
_MAX_EXTRA_VALUE = 1000


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
        self._keys: dict[int, str] = {}  # id(compiled pattern) -> "family:n" (rule_matches)
        for family, ps in patterns.FAMILIES.items():
            for n, (regex, gates) in enumerate(ps):
                idx = tuple(groups.setdefault(g, len(groups)) for g in gates)
                rx = re.compile(regex)
                self._keys[id(rx)] = f"{family}:{n}"
                self._folded.append((family, rx, idx))
        self._groups = [frozenset(g) for g in groups]
        words = sorted({w for g in groups for w in g})
        self._gate_rx = re.compile("(?=(" + patterns.trie(words) + "))")
        # a gate word found at a position implies each gate word that is a prefix of it
        self._prefixes = {w: tuple(p for p in words if w.startswith(p)) for w in words}
        self._raw = [(family, re.compile(p, re.IGNORECASE))
                     for family, ps in patterns.RAW.items() for p in ps]
        for n, (family, rx) in enumerate(self._raw):
            self._keys[id(rx)] = f"raw:{family}:{n}"

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
        return [Hit(s, e, family) for s, e, family, _ in self.rule_matches(text)]

    def rule_matches(self, text: str) -> list[tuple[int, int, str, str]]:
        """Each match as ``(start, end, family, rule)`` in the original text; ``rule`` names
        the pattern (``family:n``, or ``raw:family:n`` for markup), stable while
        :mod:`mnemovault.guard.patterns` keeps its order (for a detector that uses the
        rules as features; see bench/README.md, "Learned injection detector")."""
        hits: list[tuple[int, int, str, str]] = []
        if "<" in text or "[" in text or "#" in text:
            hits = [(m.start(), m.end(), family, self._keys[id(rx)])
                    for family, rx in self._raw for m in rx.finditer(text)]
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
                    hits.append((offsets[s], offsets[e - 1] + 1, family, self._keys[id(rx)]))
        return hits


def _malformed(answer: object, length: int) -> str | None:
    """What is wrong with a detector's answer for a text of ``length`` characters (None:
    a list of well-formed hits). Never quotes the answer."""
    if not isinstance(answer, list):
        return f"detect returned {type(answer).__name__}, not a list"
    for n, h in enumerate(answer):
        if not isinstance(h, Hit):
            return f"hit {n} is a {type(h).__name__}, not a Hit"
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (h.start, h.end)):
            return f"hit {n} has offsets that are not integers"
        if not 0 <= h.start <= h.end <= length:
            return f"hit {n} has offsets outside the text"
        if not isinstance(h.family, str) or not h.family:
            return f"hit {n} has no family name"
    return None


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
        """Every detector's hits in ``text``, in text order.

        Raises:
            Unavailable: a detector raised or answered with something other than a list of
                well-formed hits (``details``: ``detector``, ``reason`` ``error`` or
                ``malformed``; fail closed: the write stores nothing).
        """
        hits: list[Hit] = []
        for d in self.detectors:
            name = str(getattr(d, "name", type(d).__name__))
            try:
                answer = d.detect(text)
            except Unavailable:
                raise  # the detector said it cannot answer, naming itself (fail closed)
            except Exception as exc:
                raise Unavailable(f"injection sanitiser: detector {name!r} failed "
                                  f"({type(exc).__name__}); nothing was stored (fail closed)",
                                  detector=name, reason="error") from None
            problem = _malformed(answer, len(text))
            if problem:
                raise Unavailable(f"injection sanitiser: detector {name!r} answered with "
                                  f"something other than a list of hits ({problem}); nothing "
                                  "was stored (fail closed)", detector=name, reason="malformed")
            hits.extend(answer)
        return sorted(hits)

    def sanitise(self, text: str) -> Sanitised:
        """``text`` with every hit's sentence replaced by :data:`REDACTION`."""
        hits = self.scan(text)
        if not hits:
            return Sanitised(text, (), ())
        spans: list[list[int]] = []
        for h in hits:
            s, e = _widen(text, h.start, min(len(text), max(h.end, h.start + 1)))
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
            prov[FLAG_KEY] = list(_family_order(families))
        elif content.text == item.content and prov == item.provenance.model_dump(
                exclude_none=True):
            return item
        data = item.model_dump()
        data.update(content=content.text, provenance=prov)
        return MemoryInput.model_validate(data)


@functools.cache
def sanitiser_for(detectors: tuple[str, ...] = ("learned", "heuristic"),
                  threshold: float | None = None) -> Sanitiser:
    """A sanitiser of the named detectors, in order: ``learned``
    (:class:`mnemovault.guard.learned.LearnedDetector` at ``threshold``; None: its default)
    and ``heuristic`` (:class:`HeuristicDetector`). Built once per combination.

    Raises:
        ValueError: an unknown detector name or a threshold outside (0, 1).
    """
    from mnemovault.guard.learned import DEFAULT_THRESHOLD, LearnedDetector

    built: list[Detector] = []
    for name in detectors:
        if name == "learned":
            built.append(LearnedDetector(DEFAULT_THRESHOLD if threshold is None else threshold))
        elif name == "heuristic":
            built.append(HeuristicDetector())
        else:
            raise ValueError(f"unknown injection detector {name!r} (learned, heuristic)")
    return Sanitiser(built)


def default_sanitiser(settings: Any = None) -> Sanitiser:
    """The sanitiser the write path uses: ``MNEMOVAULT_INJECTION_DETECTORS`` (default the
    learned detector, then the phrase rules) at ``MNEMOVAULT_INJECTION_THRESHOLD``, read
    from ``settings`` (a :class:`mnemovault.config.Settings`; None: the environment)."""
    if settings is None:
        from mnemovault.config import get_settings

        settings = get_settings()
    return sanitiser_for(tuple(settings.injection_detectors),
                         float(settings.injection_threshold))


def tool_source(source: str | None) -> bool:
    """Whether a ``provenance.source`` marks its text as tool-supplied: one of its words
    (split at anything not a letter or digit and at a lower-to-upper case change, after the
    shared normalisation, case ignored) is in :data:`SOURCE_WORDS` (module docstring)."""
    if not source:
        return False
    words = _SOURCE_WORD_RE.findall(canonical(source))
    return any(w.casefold() in SOURCE_WORDS for w in words) or (
        "".join(words).casefold() in SOURCE_WORDS)


def tool_supplied(trigger: str, source: str | None) -> bool:
    """Whether a write with ``trigger`` and ``provenance.source`` ``source`` carries
    imported or tool-supplied text (module docstring)."""
    return trigger.strip().casefold() in SANITISED_TRIGGERS or tool_source(source)


def should_sanitise(item: MemoryInput, trigger: str) -> bool:
    """Whether a write's item is imported or tool-supplied (see the module docstring)."""
    return tool_supplied(trigger, item.provenance.source)


def sanitise_texts(texts: Mapping[str, str | None], limits: Mapping[str, int],
                   sanitiser: Sanitiser | None = None
                   ) -> tuple[dict[str, str | None], tuple[str, ...]]:
    """Each of ``texts`` (by field name; None passes) sanitised, and the families found
    (label order). A redacted text longer than its field's limit (``limits``, default
    :data:`_MAX_EXTRA_VALUE`) becomes the marker alone. For fields that are not a memory's
    (a procedure's name, intent, step labels, edge conditions)."""
    s = sanitiser or default_sanitiser()
    out: dict[str, str | None] = {}
    families: list[str] = []
    for key, value in texts.items():
        if value is None:
            out[key] = None
            continue
        r = s.sanitise(value)
        families.extend(r.families)
        out[key] = r.text if len(r.text) <= limits.get(key, _MAX_EXTRA_VALUE) else REDACTION
    return out, _family_order(families)


def flag_list(label: object) -> list[str]:
    """The families of a :data:`FLAG_KEY` value: a list (as written now), a comma-separated
    string (as written before), or nothing (``[]``)."""
    if isinstance(label, str):
        return [f for f in label.split(",") if f]
    if isinstance(label, list | tuple):
        return [str(f) for f in label if f]
    return []


def merge_flags(existing: object, found: Iterable[str]) -> list[str] | None:
    """The label for a record labelled ``existing`` (a :data:`FLAG_KEY` value or None) in
    which ``found`` families were found now: the union, in label order (None: neither)."""
    both = list(_family_order([*flag_list(existing), *found]))
    return both or None


def sanitise_rectified(content: str, provenance: Mapping[str, Any] | None, trigger: str,
                       sanitiser: Sanitiser | None = None) -> tuple[str, list[str] | None]:
    """A rectification's new content for a record with ``provenance`` (module docstring):
    sanitised when the record carries the label or the rectification comes from a tool
    (``trigger`` import, tool or mcp), else as written. Returns the content to store and
    the label the record is to carry afterwards: its own, joined by what was found now
    (None: no label, nothing to change).

    Raises:
        ValidationError: the redacted content is longer than a memory may be.
        Unavailable: a detector failed (fail closed).
    """
    existing = (provenance or {}).get(FLAG_KEY)
    if not existing and not tool_supplied(trigger, None):
        return content, None
    r = (sanitiser or default_sanitiser()).sanitise(content)
    if len(r.text) > MAX_CONTENT_CHARS:
        raise ValidationError(f"content: longer than {MAX_CONTENT_CHARS} characters once "
                              "potential prompt injections are marked", field="content")
    return r.text, merge_flags(existing, r.families)


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
