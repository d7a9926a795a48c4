"""The bottom of :mod:`mnemovault.pii.detect`: what every detector shares.

Owns the data model (:data:`KIND_RE`, :class:`Finding`, the :class:`Detector` protocol),
the small text helpers several detectors use (``_char``, ``_is_word``, the
reference-number context test ``_reference_context``), and the comparison form of a value
with its keyed fingerprint (:func:`normalise`, :func:`token_count`, :func:`fingerprint` and
their word-token helpers), which the known-entity index and the PII vault build on.
Imports nothing from its own package.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import itertools
import re
import unicodedata
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

KIND_RE = re.compile(r"[a-z][a-z_]{0,31}\Z")
"""A finding's kind: lowercase letters and underscores, as in ``{kind:p_<10 hex>}``."""


# ---------------------------------------------------------------------------------------
# The data model
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """One detected value: ``text[start:end] == value``.

    ``start``/``end`` are ``str`` indices (code points) of the text given to the detector,
    half-open. ``kind`` matches ``[a-z][a-z_]{0,31}``; ``confidence`` is in ``[0, 1]``;
    ``detector`` is the producing detector's ``name``.
    """

    start: int
    end: int
    kind: str
    value: str
    confidence: float
    detector: str

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError("Finding: need 0 <= start < end")
        if len(self.value) != self.end - self.start:
            raise ValueError("Finding: len(value) must equal end - start")
        if not KIND_RE.match(self.kind):
            raise ValueError("Finding: kind must match [a-z][a-z_]{0,31}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError("Finding: confidence must be in [0, 1]")

    @property
    def length(self) -> int:
        return self.end - self.start


@runtime_checkable
class Detector(Protocol):
    """What a detector is: a ``name`` and ``detect(text) -> list[Finding]``.

    Findings may overlap each other (``detect_all`` resolves that) but each must satisfy
    ``text[f.start:f.end] == f.value``. Detectors must be safe to call from several threads
    (keep no per-call state on ``self``) and should be linear in ``len(text)``.
    """

    name: str

    def detect(self, text: str) -> list[Finding]: ...


# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------

# A reference number announced as such ("Order #123...", "invoice no. 123") is not a
# phone number or a card, even when it happens to validate as one.
_REFERENCE_CONTEXT = re.compile(
    r"\b(?:order|invoice|inv|ref|reference|tracking|ticket|case|serial|sku|isbn|po|"
    r"transaction|txn|confirmation|booking|receipt|shipment|parcel)"
    r"\s*(?:no\.?|nr\.?|num(?:ber)?\.?|id|#)?\s*[:#.]?\s*\Z",
    re.IGNORECASE,
)


def _reference_context(text: str, start: int) -> bool:
    return bool(_REFERENCE_CONTEXT.search(text, max(0, start - 32), start))


def _char(text: str, i: int) -> str:
    """``text[i]`` or ``""`` out of range."""
    return text[i] if 0 <= i < len(text) else ""


def _is_word(ch: str) -> bool:
    return bool(ch) and (ch.isalnum() or ch == "_")


# ---------------------------------------------------------------------------------------
# The comparison form of a value (used by known entities and the vault)
# ---------------------------------------------------------------------------------------


@functools.cache
def _token_re() -> re.Pattern[str]:
    """Word tokens: runs of letters, digits and combining marks (Unicode categories L, N,
    M), so ``José`` in decomposed form or Devanagari vowel signs stay inside one token.

    ``[^\\W_]`` alone covers letters and digits; the marks class is built once from
    ``unicodedata`` over planes 0-1 (the planes that have combining marks in use).
    """
    ranges: list[tuple[int, int]] = []
    for cp in range(0x300, 0x20000):
        if unicodedata.category(chr(cp))[0] == "M" and not chr(cp).isalnum():
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    marks = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )
    return re.compile(rf"(?:[^\W_]|[{marks}])+")


# Typographic variants folded in the gaps between tokens, so O’Brien == O'Brien.
_GAP_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u02bc": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
    }
)
_WS = re.compile(r"\s+")


def _norm_token(tok: str) -> str:
    if tok.isascii():
        return tok.lower()
    return unicodedata.normalize("NFKC", tok).casefold()


def _norm_gap(gap: str) -> str:
    if gap.isspace():
        return " "
    return _WS.sub(" ", unicodedata.normalize("NFKC", gap).translate(_GAP_FOLD).casefold())


def _spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _token_re().finditer(text)]


def normalise(value: str) -> str:
    """The comparison form of a value: from its first to its last word token, each token
    NFKC-normalised and case-folded, each gap between tokens folded the same way with
    whitespace collapsed to one space (typographic quotes and dashes to ASCII). Leading
    and trailing punctuation, symbols and whitespace are dropped.

    ``"  Dr. JOHN\\n  O’Brien, "`` -> ``"dr. john o'brien"``. ``""`` if the value has no
    letter or digit. The vault derives placeholders and fingerprints from this form.
    """
    spans = _spans(value)
    if not spans:
        return ""
    parts = [_norm_token(value[spans[0][0] : spans[0][1]])]
    for (_, prev_end), (s, e) in itertools.pairwise(spans):
        parts.append(_norm_gap(value[prev_end:s]))
        parts.append(_norm_token(value[s:e]))
    return "".join(parts)


def token_count(value: str) -> int:
    """Number of word tokens in ``value`` (what :meth:`KnownEntityIndex.detect` slides)."""
    return len(_spans(value))


def fingerprint(value: str, secret: bytes) -> bytes:
    """``HMAC-SHA256(secret, utf8(normalise(value)))``: 32 bytes, equal for values that
    normalise alike, unlinkable across secrets. Use a secret derived for this purpose
    only (e.g. HKDF of the tenant key with its own ``info``), not the placeholder key.
    """
    return hmac.digest(secret, normalise(value).encode("utf-8"), hashlib.sha256)
