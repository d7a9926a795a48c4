"""The bottom of :mod:`mnemovault.pii.detect`: what every detector shares.

Owns the data model (:data:`KIND_RE`, :class:`Finding`, the :class:`Detector` protocol),
the small text helpers several detectors use (``_char``, ``_is_word``, the
reference-number context test ``_reference_context``, the malformed-IBAN context test
``_iban_shaped_before``), the folded view of a text that detection runs on (:func:`fold`:
invisible characters dropped, compatibility forms such as full-width digits folded, with a
map back to the original offsets), and the comparison form of a value with its keyed
fingerprint (:func:`normalise`, :func:`token_count`, :func:`fingerprint` and their
word-token helpers, which fold look-alike letters in mixed-script words), which the
known-entity index and the PII vault build on. Imports nothing from its own package.
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

    ``identity`` is the value's identity: the form that is the same however the value is
    written, from which the vault derives its fingerprint and placeholder. The structured
    detectors set it to their kind's canonical form (digits for a card, E.164 for a phone,
    compact upper case for an IBAN, the case-folded address for an email, the compressed
    address for an IP); a known entity's is its :func:`normalise` form. ``""`` means
    ``normalise(value)``, which :func:`~mnemovault.pii.detect.detect_all` fills in.
    """

    start: int
    end: int
    kind: str
    value: str
    confidence: float
    detector: str
    identity: str = ""

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


# Digit groups inside an IBAN-shaped run (country code, check digits, then groups of four)
# belong to that run even when it fails its checksum: they are not a phone or a card.
_GROUP_SEPARATORS = frozenset(" \u00a0-")


def _iban_shaped_before(text: str, start: int) -> bool:
    """Does an IBAN-shaped run that is not a valid IBAN end right before ``start``, so that
    the digits at ``start`` are its tail (``GB56 HXDO |8816 7774 6561 1``)?

    The run: a country code and two check digits not glued to a word, then one or more
    groups of four letters or digits, each after one space, no-break space or dash, then
    one more separator before ``start``. Walked backwards group by group (a few steps at
    most), so it costs next to nothing before an ordinary number."""
    j = start - 1
    if j < 4 or text[j] not in _GROUP_SEPARATORS:
        return False
    walked = 0
    while j >= 4:
        group = text[j - 4 : j]
        if not (group.isascii() and group.isalnum()):
            return False
        before = text[j - 5] if j >= 5 else ""
        if walked and group[:2].isalpha() and group[2:].isdigit() and not _is_word(before):
            from stdnum import iban  # the IBAN detector's dependency, imported when needed

            return not iban.is_valid(text[j - 4 : start - 1], check_country=False)
        if before not in _GROUP_SEPARATORS or not before:
            return False
        j -= 5
        walked += 1
    return False


# ---------------------------------------------------------------------------------------
# The folded view of a text (detection runs on it; offsets map back to the original)
# ---------------------------------------------------------------------------------------

INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
"""Characters dropped from the view: soft hyphen, zero-width space/non-joiner/joiner, word
joiner and zero-width no-break space (BOM). They render as nothing, so a value written
with them inside looks whole to a reader."""

# Categories whose NFKC compatibility forms are folded: letters, decimal digits, spaces,
# punctuation and math symbols (full-width ``４``/``＠``/``．``, mathematical bold digits,
# ideographic and thin spaces...). Superscripts, fractions, circled and modifier forms
# (``²``, ``½``, ``①``, ``ª``) are left alone: they are not a value written differently.
_FOLD_CATEGORIES = frozenset({"Lu", "Ll", "Nd", "Zs", "Pd", "Po", "Ps", "Pe", "Pc", "Sm"})


@functools.cache
def _fold_table() -> dict[int, int | None]:
    """``str.translate`` table of the view: :data:`INVISIBLE` -> dropped; a character whose
    NFKC form is one ASCII letter, digit, space or value punctuation -> that character. The
    no-break space stays (the detectors read it as a separator already). Built once over
    planes 0-1 (about 16 ms)."""
    table: dict[int, int | None] = {ord(c): None for c in INVISIBLE}
    for cp in range(0xA1, 0x20000):
        ch = chr(cp)
        n = unicodedata.normalize("NFKC", ch)
        if n == ch or len(n) != 1 or not n.isascii():
            continue
        if unicodedata.category(ch) not in _FOLD_CATEGORIES:
            continue
        if n.isalnum() or n in " @.-+()/:_%#,;":
            table[cp] = ord(n)
    return table


@functools.cache
def _fold_re() -> re.Pattern[str]:
    """A character :func:`_fold_table` may change: its plane-0 characters exactly (a class
    of ranges, matched through one bitmap), and plane 1 as the two blocks it uses there
    (mathematical alphanumerics and segmented digits), so that ``search`` stays a fast scan;
    a coarse hit that changes nothing costs one ``translate``."""
    ranges: list[tuple[int, int]] = []
    for cp in sorted(c for c in _fold_table() if c < 0x10000):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    bmp = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )
    return re.compile(f"[{bmp}\U0001d400-\U0001d7ff\U0001fbf0-\U0001fbf9]")


def fold(text: str) -> tuple[str, list[int] | None]:
    """The view detection runs on, and the map of its offsets back to ``text``.

    The view is ``text`` without the :data:`INVISIBLE` characters and with compatibility
    forms folded one to one (NFKC, ``１２３`` -> ``123``, ``＠`` -> ``@``). The map is
    ``None`` when the view has the offsets of ``text`` (nothing was dropped); otherwise
    ``offsets[i]`` is the index in ``text`` of the view's character ``i``, so the view span
    ``[s, e)`` is the original span ``[offsets[s], offsets[e - 1] + 1)``: the dropped
    characters inside a value are part of its span. ASCII text, and text with nothing to
    fold, is returned as it is (one ``isascii`` or one regex search).
    """
    if text.isascii() or not _fold_re().search(text):
        return text, None
    view = text.translate(_fold_table())
    if view == text:
        return text, None
    if len(view) == len(text):
        return view, None
    return view, [i for i, ch in enumerate(text) if ch not in INVISIBLE]


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

# Cyrillic and Greek letters that look like Latin ones (Unicode confusables, UTS #39), as
# used to disguise a Latin name (``Mаria`` with a Cyrillic ``а``). Applied, case by case
# before case folding, to a token that also holds a Latin letter (a mixed-script token):
# a word written wholly in Cyrillic or Greek is that script's word and is left alone.
_CONFUSABLES = str.maketrans(
    {
        # Cyrillic
        "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
        "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d",
        "һ": "h", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ү": "y",
        "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
        "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ү": "Y",
        "Ӏ": "I",
        # Greek
        "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
        "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
        "ο": "o", "α": "a", "ν": "v", "ι": "i", "ρ": "p", "υ": "u", "κ": "k",
    }
)
_CONFUSABLE_RE = re.compile("[" + "".join(chr(c) for c in _CONFUSABLES) + "]")
_LATIN_RE = re.compile(r"[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]")


def _norm_token(tok: str) -> str:
    if tok.isascii():
        return tok.lower()
    tok = unicodedata.normalize("NFKC", tok)
    if _CONFUSABLE_RE.search(tok) and _LATIN_RE.search(tok):
        tok = tok.translate(_CONFUSABLES)
    return tok.casefold()


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

    Invisible characters (:data:`INVISIBLE`) are dropped first, and a token mixing Latin
    letters with Cyrillic or Greek look-alikes has those folded to Latin (``Mаria`` with a
    Cyrillic ``а`` -> ``maria``).

    ``"  Dr. JOHN\\n  O’Brien, "`` -> ``"dr. john o'brien"``. ``""`` if the value has no
    letter or digit. The vault derives placeholders and fingerprints from this form (for
    values without a structured identity, see :attr:`Finding.identity`).
    """
    value = _strip_invisible(value)
    spans = _spans(value)
    if not spans:
        return ""
    parts = [_norm_token(value[spans[0][0] : spans[0][1]])]
    for (_, prev_end), (s, e) in itertools.pairwise(spans):
        parts.append(_norm_gap(value[prev_end:s]))
        parts.append(_norm_token(value[s:e]))
    return "".join(parts)


def _strip_invisible(value: str) -> str:
    if value.isascii():
        return value
    return value.translate(_INVISIBLE_TABLE)


_INVISIBLE_TABLE: dict[int, None] = dict.fromkeys(map(ord, INVISIBLE))


def token_count(value: str) -> int:
    """Number of word tokens in ``value`` (what :meth:`KnownEntityIndex.detect` slides)."""
    return len(_spans(_strip_invisible(value)))


def fingerprint(value: str, secret: bytes, *, identity: str | None = None) -> bytes:
    """``HMAC-SHA256(secret, utf8(normalise(value)))``: 32 bytes, equal for values that
    normalise alike, unlinkable across secrets. Use a secret derived for this purpose
    only (e.g. HKDF of the tenant key with its own ``info``), not the placeholder key.

    With ``identity`` (a :attr:`Finding.identity`, e.g. a card's digits) that string is
    fingerprinted instead of ``normalise(value)``, so every written form of the value
    gets the same fingerprint.
    """
    ident = normalise(value) if identity is None else identity
    return hmac.digest(secret, ident.encode("utf-8"), hashlib.sha256)
