"""The phone detector, :class:`PhoneDetector`: candidate digit runs, the look-alike
filters (dates, versions, postal codes, references...) and validation by
``phonenumbers`` in the default and fallback regions."""

from __future__ import annotations

import re
from collections.abc import Sequence

import phonenumbers

from mnemovault.pii.detect.base import Finding, _char, _is_word, _reference_context

# ---------------------------------------------------------------------------------------
# Phone
# ---------------------------------------------------------------------------------------

# Candidate: optional ``+``, digits with spaces (incl. no-break), dots, dashes and
# parentheses in between, ending in a digit, optionally an extension.
_PHONE_CANDIDATE = re.compile(
    r"(?:\+[ \u00a0]?)?\(?\d[\d \u00a0().\-]{5,}\d"
    r"(?:[ \u00a0]?(?:x|ext\.?|extension)[ \u00a0]?\d{1,6})?",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")
_EXTENSION = re.compile(r"[ \u00a0]?(?:x|ext\.?|extension)", re.IGNORECASE)
_DATE_SHAPES = (
    re.compile(r"\d{4}([-./ ])\d{1,2}\1\d{1,2}\Z"),  # 2024-05-06, 2024.05.06
    re.compile(r"\d{1,2}([-./ ])\d{1,2}\1\d{2}(?:\d{2})?\Z"),  # 06.05.2024, 06-05-24
    re.compile(r"(?:19|20)\d{2}[ ]?[-.][ ]?(?:19|20)\d{2}\Z"),  # 2020-2024
    re.compile(r"\d{1,3}(?:\.\d{1,3}){3}\Z"),  # dotted quad: an IPv4 address, not a phone
    re.compile(r"\d{3,4}-\d{2}-\d{4}\Z"),  # US SSN 123-45-6789 and look-alikes
    re.compile(r"(?:\d{5}-\d{3,4}|\d{4}-\d{3})\Z"),  # ZIP+4, BR CEP, PT postal codes
)
_GROUP_SEP = re.compile(r"[ \u00a0().\-]+")
# Words that announce a phone number; a weakly shaped fallback reading needs one.
_PHONE_CUE = re.compile(
    r"\b(?:phone|telephone|tel|mobile|cell|fax|call|text|sms|messages?|whatsapp|contact|"
    r"desk|dial|reach)\b",
    re.IGNORECASE,
)
_ONE_DIGIT_GROUP = re.compile(r"(?:^|\.)\d(?:\.|$)")  # 10.0.19041: a version string
_PHONE_BAD_BEFORE = frozenset("+#$€£¥./:@-_=\\")
_PHONE_BAD_AFTER = frozenset("@/:%_\\")


class PhoneDetector:
    """Phone numbers in international (``+44 20 7946 0958``, ``0044 ...``) and, with a
    ``default_region``, national formats (``020 7946 0958`` for ``"GB"``).

    Candidates are runs of digits with optional ``+``, spaces, dots, dashes and
    parentheses, 7-15 digits (E.164, ITU-T), plus an optional extension (``x123``,
    ``ext. 123``). Each candidate is parsed once with ``phonenumbers.parse`` (the default
    region applies only when there is no ``+``/``00`` country prefix) and kept if
    ``phonenumbers.is_valid_number`` accepts it: libphonenumber's per-country number plans,
    not a regex. Rejected before parsing: runs glued to letters, ``/``, ``:``, ``@`` or
    another number (GUID fragments, URLs, timestamps like ``2024-05-06T12:30:45Z``), dates,
    year ranges, dotted quads, dotted versions with a one-digit part, SSN-shaped
    ``123-45-6789``, postal codes (``12345-6789``, ``3610-114``), and numbers announced as
    references (``Order #...``, ``invoice no. ...``).

    ``default_region``: ISO 3166-1 alpha-2 code (``"US"``, ``"GB"``, ``"DE"``...) or
    ``None`` (then only numbers with a country prefix are found).
    ``fallback_regions``: further regions tried in order, for a number without a country
    prefix that the default region rejects (still one parse per region per candidate, not
    a scan per region). Off by default: some numbering plans (DE, AT, FI...) accept most
    7-11 digit strings, so each fallback trades precision for recall. A number found only
    through a fallback must be written with separators (``467 3395``, not ``4673395``)
    unless a phone word precedes it (``Fax: 9498777106``);
    if it has fewer than three digit groups, no parentheses and no trunk ``0`` (the shape
    of ``17151 2450 Crown St``), a phone word (``phone``, ``tel``, ``call``, ``fax``...)
    must precede it within 40 characters. It gets ``fallback_confidence``.
    """

    name = "phone"
    kind = "phone"
    international_confidence = 0.85
    national_confidence = 0.75
    fallback_confidence = 0.6

    def __init__(
        self, default_region: str | None = None, *, fallback_regions: Sequence[str] = ()
    ) -> None:
        self.default_region = _region(default_region) if default_region else None
        self.fallback_regions = tuple(_region(r) for r in fallback_regions)

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        for m in _PHONE_CANDIDATE.finditer(text):
            start, end = m.start(), m.end()
            cand = m.group()
            if cand.startswith("(") and cand.count("(") > cand.count(")"):
                start, cand = start + 1, cand[1:]
            f = self._check(text, start, end, cand)
            if f is not None:
                out.append(f)
        return out

    def _check(self, text: str, start: int, end: int, cand: str) -> Finding | None:
        before, after = _char(text, start - 1), _char(text, end)
        if _is_word(before) or before in _PHONE_BAD_BEFORE:
            return None
        if _is_word(after) or after in _PHONE_BAD_AFTER:
            return None
        if after and after in ".-," and _char(text, end + 1).isdigit():
            return None  # 1.2.3.4.5, 12-34-56-78-90-12..., 1,234,567
        main = _EXTENSION.split(cand, maxsplit=1)[0]
        digits = "".join(_DIGIT.findall(main))
        if not 7 <= len(digits) <= 15:
            return None
        if cand.count("(") != cand.count(")"):
            return None
        body = main.lstrip("+ \u00a0")
        if any(shape.match(body) for shape in _DATE_SHAPES):
            return None
        if "." in body and _ONE_DIGIT_GROUP.search(body):
            return None
        if _reference_context(text, start):
            return None
        cue = bool(_PHONE_CUE.search(text, max(0, start - 40), start))
        fallback_ok = bool(self.fallback_regions) and (
            len([g for g in _GROUP_SEP.split(body) if g]) >= 3
            or "(" in body
            or body.startswith("0")
            or cue
        )
        parsed = self._parse(cand, digits, fallback_ok, plain_ok=cue)
        if parsed is None:
            return None
        return Finding(start, end, self.kind, cand, parsed, self.name)

    def _parse(self, cand: str, digits: str, fallback_ok: bool,
               plain_ok: bool = False) -> float | None:
        """The confidence of the first valid reading of ``cand``, or ``None``. A plain digit
        run is read in the fallback regions only when ``plain_ok`` (a phone word such as
        ``Fax:`` precedes it)."""
        tries: list[tuple[str, str | None, float]] = []
        if cand.startswith("+"):
            tries.append((cand, None, self.international_confidence))
        else:
            if self.default_region is not None:
                tries.append((cand, self.default_region, self.national_confidence))
            if digits.startswith("00") and not digits.startswith("000"):
                # 00 is the international prefix of most of the world (ITU-T E.164 annex).
                intl = "+" + cand.replace("0", "", 2)
                tries.append((intl, None, self.international_confidence))
            if fallback_ok and (plain_ok or not cand.isdigit()):
                tries += [(cand, r, self.fallback_confidence) for r in self.fallback_regions]
        for raw, region, confidence in tries:
            try:
                number = phonenumbers.parse(raw, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return confidence
        return None


def _region(code: str) -> str:
    region = code.upper()
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise ValueError(
            "PhoneDetector: regions must be ISO 3166-1 alpha-2 codes known to phonenumbers"
        )
    return region
