"""The phone detector, :class:`PhoneDetector`: candidate digit runs, the look-alike
filters (dates, versions, postal codes, references...) and validation by
``phonenumbers`` in the default and fallback regions."""

from __future__ import annotations

import re
from collections.abc import Sequence

import phonenumbers

from mnemovault.pii.detect.base import (
    Finding,
    _char,
    _iban_shaped_before,
    _is_word,
    _reference_context,
)

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
# A number in a link: ``tel:`` (RFC 3966), ``sms:`` (RFC 5724), ``callto:``, and WhatsApp's
# ``wa.me/<international number without +>``.
_TEL_LINK = re.compile(r"(?<![\w.+-])(?:tel|sms|callto):\Z", re.IGNORECASE)
_WA_LINK = re.compile(r"(?<![\w-])wa\.me/\Z", re.IGNORECASE)
_PIECE = re.compile(r"[^ \u00a0]+")
# A postal code written before a phone number (``75008 01 42 68 53 00``, ``CA 90210
# (310) 555-0100``): four or five digits.
_POSTCODE = re.compile(r"\d{4,5}\Z")
_LEADING_POSTCODE_RUN = re.compile(r"[1-9]\d{3,4}[ \u00a0]")


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

    A run that is several numbers separated by spaces (``020 7946 0958 020 7946 0959``,
    ``(415) 555-2671 (415) 555-2672``) gives each of them, provided every piece of the run
    belongs to one; a postal code in front of a number (``Paris 75008 01 42 68 53 00``,
    ``90210 (310) 555-0100``) is left out of its span, whether or not the run with it would
    also read as one number (four or five digits not starting with 0 then a number written
    with separators; ``07911 123456`` keeps its trunk-0 area code). Digit groups that end an
    IBAN-shaped run that is no valid IBAN (``GB56 HXDO 8816 7774 6561 1``) are not read.
    Numbers in ``tel:``, ``sms:`` and ``callto:`` links, and in ``wa.me/`` links (the
    international number without ``+``), are read although a ``:`` or ``/`` precedes them.

    The identity of a finding is its number in E.164 (``+442079460958``), with ``;ext=``
    and the extension if it has one.
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
            out += self._candidate(text, start, end, cand)
        return out

    def _candidate(self, text: str, start: int, end: int, cand: str) -> list[Finding]:
        """The numbers in one candidate run: the run itself if it is one (less a postal
        code in front of it), else the numbers it is a sequence of."""
        f = self._check(text, start, end, cand)
        if f is not None and not _LEADING_POSTCODE_RUN.match(cand):
            return [f]
        if f is None and (
            (" " not in cand and "\u00a0" not in cand) or len(_DIGIT.findall(cand)) < 11
        ):
            return []  # one piece, or too few digits for a postal code and a number
        pieces = [(start + p.start(), start + p.end()) for p in _PIECE.finditer(cand)]
        if f is not None:
            if len(pieces) > 1:
                # ``75008 01 42 68 53 00``: the whole run reads as one number in some plan,
                # but it starts with a postal code and the rest is a number written with
                # separators on its own. (Trunk-0 area codes such as ``01632`` or ``07911``
                # never match: a postal code taken here does not start with 0.)
                rest_text = text[pieces[1][0] : end]
                if not rest_text.isdigit():
                    rest = self._check(text, pieces[1][0], end, rest_text)
                    if rest is not None:
                        return [rest]
            return [f]
        if len(pieces) < 2 or self._glued(text, start, end):
            return []
        return self._sequence(text, pieces)

    def _sequence(self, text: str, pieces: list[tuple[int, int]]) -> list[Finding]:
        """Split a run of whitespace-separated pieces that is not one number into numbers
        (``020 7946 0958 020 7946 0959``). Every piece must belong to one of them, or be
        a postal code before a single number (``90210 (310) 555-0100``); otherwise nothing
        is found (a run of digit groups that only partly reads as numbers is something
        else: an account, a table, a code)."""
        n = len(pieces)
        digits = [sum(ch.isdigit() for ch in text[s:e]) for s, e in pieces]
        # best[i]: the best covering of pieces[i:] by numbers, as (findings, their lowest
        # confidence), or None; better = a higher lowest confidence, then fewer numbers
        best: list[tuple[list[Finding], float] | None] = [None] * n + [([], 1.0)]
        for i in range(n - 1, -1, -1):
            total = 0
            for j in range(i + 1, n + 1):
                total += digits[j - 1]
                if total > 15:
                    break
                if total < 7 or best[j] is None:
                    continue
                s, e = pieces[i][0], pieces[j - 1][1]
                f = self._check(text, s, e, text[s:e])
                if f is None:
                    continue
                rest = best[j]
                assert rest is not None
                cover = ([f, *rest[0]], min(f.confidence, rest[1]))
                old = best[i]
                if old is None or (cover[1], -len(cover[0])) > (old[1], -len(old[0])):
                    best[i] = cover
        if best[0] is not None:
            return best[0][0]
        if n > 1 and best[1] is not None and len(best[1][0]) == 1:
            # a postal code, then one number: five digits (US ZIP, DE/FR/IT/ES codes), or
            # four before a number that starts with a trunk 0 or an area code in
            # parentheses (``1234 5678 1234 5670`` is no postal code and a phone)
            code, lead = text[pieces[0][0] : pieces[0][1]], text[pieces[1][0]]
            if _POSTCODE.match(code) and (len(code) == 5 or lead in "0("):
                return best[1][0]
        return []

    @staticmethod
    def _glued(text: str, start: int, end: int) -> bool:
        before, after = _char(text, start - 1), _char(text, end)
        return _is_word(before) or before in _PHONE_BAD_BEFORE or _is_word(after)

    def _check(self, text: str, start: int, end: int, cand: str) -> Finding | None:
        before, after = _char(text, start - 1), _char(text, end)
        link = ""
        if before in ":/":
            if before == ":" and _TEL_LINK.search(text, max(0, start - 8), start):
                link = "tel"
            elif before == "/" and _WA_LINK.search(text, max(0, start - 8), start):
                link = "wa"
        if not link and (_is_word(before) or before in _PHONE_BAD_BEFORE):
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
        if _reference_context(text, start) or _iban_shaped_before(text, start):
            return None
        if link == "wa" and not cand.startswith("+"):
            cand_intl = "+" + cand
            parsed = self._read([(cand_intl, None, self.international_confidence)])
        else:
            cue = bool(link) or bool(_PHONE_CUE.search(text, max(0, start - 40), start))
            fallback_ok = bool(self.fallback_regions) and (
                len([g for g in _GROUP_SEP.split(body) if g]) >= 3
                or "(" in body
                or body.startswith("0")
                or cue
            )
            parsed = self._parse(cand, digits, fallback_ok, plain_ok=cue)
        if parsed is None:
            return None
        confidence, identity = parsed
        return Finding(start, end, self.kind, text[start:end], confidence, self.name, identity)

    def _parse(self, cand: str, digits: str, fallback_ok: bool,
               plain_ok: bool = False) -> tuple[float, str] | None:
        """The confidence and E.164 identity of the first valid reading of ``cand``, or
        ``None``. A plain digit run is read in the fallback regions only when ``plain_ok``
        (a phone word such as ``Fax:`` precedes it, or it is a ``tel:`` link)."""
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
        return self._read(tries)

    @staticmethod
    def _read(tries: list[tuple[str, str | None, float]]) -> tuple[float, str] | None:
        for raw, region, confidence in tries:
            try:
                number = phonenumbers.parse(raw, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return confidence, _e164(number)
        return None


def _e164(number: phonenumbers.PhoneNumber) -> str:
    """The number's identity: E.164 (``+442079460958``), with ``;ext=`` and the extension
    if it has one (RFC 3966), so two extensions of one line stay two values."""
    e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    return f"{e164};ext={number.extension}" if number.extension else e164


def _region(code: str) -> str:
    region = code.upper()
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise ValueError(
            "PhoneDetector: regions must be ISO 3166-1 alpha-2 codes known to phonenumbers"
        )
    return region
