"""Detection of personal values in free text (SPEC section 3, issue 3 item 1).

Pure Python, no model and no database. Every detector maps ``text -> list[Finding]``; a
:class:`Finding` is a half-open character span ``[start, end)`` of ``text`` with its
``value == text[start:end]``, a ``kind`` (``email``, ``phone``, ``iban``, ``card``, ``ip``
or a caller's kind such as ``person``), a confidence in ``[0, 1]`` and the detector's name.
:func:`detect_all` runs several detectors and resolves overlaps into disjoint spans.

Built-in detectors, each validating its candidates rather than trusting a regex alone
(precision first: a look-alike left in the text is cheaper to fix than a memory whose
order number became a placeholder, but a value that *is* found is never cut in half):

- :class:`EmailDetector`: a simplification of RFC 5321/5322 ``addr-spec`` (dot-atom local
  part, DNS host name with an alphabetic TLD), anchored on each ``@`` so it stays linear.
- :class:`PhoneDetector`: one regex for candidate digit runs, each validated by
  ``phonenumbers.parse`` + ``is_valid_number`` (libphonenumber metadata), with the
  caller's default region (and optional fallback regions) for numbers written without a
  country code.
- :class:`IbanDetector`: ISO 13616 via ``stdnum.iban`` (mod-97 check digits and the
  country's BBAN format), compact or in space-separated groups of four.
- :class:`CardDetector`: 12-19 digits, Luhn (ISO/IEC 7812-1 annex B), a known issuer
  prefix (IIN) and a length that issuer uses; groups separated consistently.
- :class:`IpDetector`: IPv4 dotted quads and IPv6 (RFC 4291 section 2.2 text forms,
  including RFC 5952 compressed ``::`` and embedded IPv4), validated by ``ipaddress``.
- :class:`KnownEntityIndex`: values the tenant already knows (names, addresses, account
  numbers), matched by keyed fingerprints ``HMAC-SHA256(secret, normalise(value))`` of
  word n-grams, so no plaintext list is kept outside the vault.
- :class:`OptionalNerDetector`: Presidio + a spaCy model the deployer installed (the
  ``ner`` extra), off by default; it never downloads a model.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import ipaddress
import itertools
import re
import secrets
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import phonenumbers
from stdnum import iban as _iban

__all__ = [
    "CardDetector",
    "Detector",
    "EmailDetector",
    "Finding",
    "IbanDetector",
    "IpDetector",
    "KnownEntity",
    "KnownEntityDetector",
    "KnownEntityIndex",
    "NerUnavailableError",
    "OptionalNerDetector",
    "PhoneDetector",
    "default_detectors",
    "detect_all",
    "fingerprint",
    "luhn_valid",
    "normalise",
    "token_count",
]

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
# Overlap resolution
# ---------------------------------------------------------------------------------------


def detect_all(text: str, detectors: Sequence[Detector]) -> list[Finding]:
    """Run ``detectors`` on ``text``; return disjoint findings sorted by ``start``.

    Findings are grouped into clusters of transitively overlapping spans (touching spans,
    ``a.end == b.start``, do not overlap). Each cluster yields one finding whose kind,
    confidence and detector are those of its best member, ranked by longest span, then
    highest confidence, then the detector's position in ``detectors`` (then start and kind,
    so the result is deterministic). A member contained in the winner is dropped; if some
    member sticks out of the winner, the output span is the union of the cluster, so that
    no detected value is ever left half in the clear after replacement.

    Raises ``ValueError`` if a detector returns a finding that does not match ``text``
    (the message names the detector, never the value).
    """
    ranked: list[tuple[Finding, int]] = []
    for order, det in enumerate(detectors):
        for f in det.detect(text):
            if f.end > len(text) or text[f.start : f.end] != f.value:
                raise ValueError(f"detector {det.name!r} returned a span that is not in the text")
            ranked.append((f, order))
    if not ranked:
        return []
    ranked.sort(key=lambda fo: (fo[0].start, fo[0].end))
    out: list[Finding] = []
    cluster: list[tuple[Finding, int]] = [ranked[0]]
    cluster_end = ranked[0][0].end
    for fo in ranked[1:]:
        if fo[0].start < cluster_end:
            cluster.append(fo)
            cluster_end = max(cluster_end, fo[0].end)
            continue
        out.append(_resolve(text, cluster, cluster_end))
        cluster, cluster_end = [fo], fo[0].end
    out.append(_resolve(text, cluster, cluster_end))
    return out


def _rank(fo: tuple[Finding, int]) -> tuple[int, float, int, int, str]:
    f, order = fo
    return (-f.length, -f.confidence, order, f.start, f.kind)


def _resolve(text: str, cluster: list[tuple[Finding, int]], end: int) -> Finding:
    best = min(cluster, key=_rank)[0]
    start = cluster[0][0].start  # sorted by start
    if (start, end) == (best.start, best.end):
        return best
    return Finding(start, end, best.kind, text[start:end], best.confidence, best.detector)


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
# Email
# ---------------------------------------------------------------------------------------

# An "@" with a local-part character before it and something like ".tld" after it within
# the 253 characters a domain may have: the only places worth a closer look.
_AT = re.compile(r"(?<=[\w.%+-])@(?=[\w.-]{0,252}\.[^\W\d_]{2})")
# Simplified RFC 5322 dot-atom: atext limited to letters, digits and ``_ % + -`` (plus
# Unicode letters, RFC 6531), dots only between atoms. Quoted local parts, comments and
# address literals (``user@[192.0.2.1]``) are not recognised.
_LOCAL_OK = re.compile(r"[\w%+-]+(?:\.[\w%+-]+)*\Z")
_DOMAIN_RUN = re.compile(r"[\w.-]{1,253}")
_LABEL_OK = re.compile(r"[^\W_](?:[^\W_]|-){0,61}(?<!-)\Z")
_TLD_OK = re.compile(r"[^\W\d_]{2,63}\Z")
# Retina image names (``icon@2x.png``) look like addresses; these are not TLDs.
_FILE_SUFFIXES = frozenset(
    {
        "png",
        "jpg",
        "jpeg",
        "gif",
        "svg",
        "webp",
        "bmp",
        "ico",
        "tif",
        "tiff",
        "heic",
        "avif",
        "pdf",
        "css",
        "mp3",
        "mp4",
        "mov",
    }
)


class EmailDetector:
    """Email addresses: ``local@domain.tld`` (RFC 5321 section 4.1.2 / RFC 5322 3.4.1,
    simplified).

    The local part is a dot-atom of at most 64 characters (``[\\w%+-]`` atoms joined by
    single dots); the domain is at least two DNS labels (letters, digits, inner hyphens,
    at most 63 characters each, 253 in all) ending in an alphabetic TLD of 2-63 letters
    that is not a common file suffix. Scans outwards from each ``@``: linear in the text.
    """

    name = "email"
    confidence = 0.95

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        last_end = 0
        for m in _AT.finditer(text):
            at = m.start()
            if at < last_end:
                continue
            f = self._at(text, at, last_end)
            if f is not None:
                out.append(f)
                last_end = f.end
        return out

    def _at(self, text: str, at: int, floor: int) -> Finding | None:
        start, lowest = at, max(floor, at - 65)
        while start > lowest and (text[start - 1].isalnum() or text[start - 1] in "_.%+-"):
            start -= 1
        if at - start > 64:
            return None  # a local part longer than 64 characters
        while start < at and text[start] == ".":
            start += 1  # leading dots are punctuation, not the address
        local = text[start:at]
        if not local or not _LOCAL_OK.match(local):
            return None
        right = _DOMAIN_RUN.match(text, at + 1)
        if right is None:
            return None
        labels = right.group().rstrip(".-").split(".")
        # Shrink from the right (``a@b.com.123``) until the last label is a TLD.
        while len(labels) >= 2:
            tld = labels[-1]
            if (
                _TLD_OK.match(tld)
                and tld.casefold() not in _FILE_SUFFIXES
                and all(_LABEL_OK.match(lab) for lab in labels)
            ):
                break
            labels.pop()
        else:
            return None
        end = at + 1 + len(".".join(labels))
        if end - start > 254 or _is_word(_char(text, end)) or _char(text, end) == "@":
            return None
        return Finding(start, end, "email", text[start:end], self.confidence, self.name)


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


# ---------------------------------------------------------------------------------------
# IBAN
# ---------------------------------------------------------------------------------------

# Country code, check digits, then 10-32 more alphanumerics, optionally one space before
# any of them. Bounded, so each attempt is O(1); groups are checked in code.
_IBAN_CANDIDATE = re.compile(r"(?<![^\W_])[A-Za-z]{2}\d{2}(?:[ \u00a0]?[A-Za-z0-9]){10,32}")
_SPACE = re.compile(r"[ \u00a0]")


class IbanDetector:
    """International Bank Account Numbers (ISO 13616-1), validated by ``stdnum.iban``:
    the mod-97 check digits (ISO 7064) and the country's registered length and BBAN shape.

    Accepts the compact electronic form (``GB82WEST12345698765432``) and the print form in
    groups of four separated by single spaces (``GB82 WEST 1234 5698 7654 32``), upper or
    lower case (lower case gets a lower confidence). When the candidate runs on into the
    next word, the longest valid prefix made of whole groups is taken.
    """

    name = "iban"
    kind = "iban"
    confidence = 0.99
    lowercase_confidence = 0.9

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        pos = 0
        while True:
            m = _IBAN_CANDIDATE.search(text, pos)
            if m is None:
                return out
            f = self._best(text, m.start(), m.group())
            if f is None:
                pos = m.start() + 1
            else:
                out.append(f)
                pos = f.end

    def _best(self, text: str, start: int, cand: str) -> Finding | None:
        groups = _SPACE.split(cand)
        for k in range(len(groups), 0, -1):
            if k > 1 and not (
                all(len(g) == 4 for g in groups[: k - 1]) and 1 <= len(groups[k - 1]) <= 4
            ):
                continue
            end = start + sum(len(g) for g in groups[:k]) + (k - 1)
            if _is_word(_char(text, end)):
                continue  # cut inside a longer alphanumeric run
            value = text[start:end]
            if _iban.is_valid(value.replace("\u00a0", " ")):
                conf = self.confidence if value.upper() == value else self.lowercase_confidence
                return Finding(start, end, self.kind, value, conf, self.name)
        return None


# ---------------------------------------------------------------------------------------
# Payment cards
# ---------------------------------------------------------------------------------------

_CARD_RUN = re.compile(r"\d[\d \-\u00a0]{10,}\d")
_CARD_SPLIT = re.compile(r"([ \-\u00a0]+)")


def luhn_valid(digits: str) -> bool:
    """The Luhn mod-10 check (ISO/IEC 7812-1 annex B) of an all-digit string."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_brand(d: str) -> str | None:
    """The issuer whose IIN range and lengths match ``d`` (digits only), or ``None``.

    Ranges from the ISO/IEC 7812 IIN assignments as published by the networks
    (summarised in Wikipedia's "Payment card number" table), including Mastercard's
    2221-2720 series, 19-digit Visa, legacy 15-digit JCB (1800, 2131) and the historic
    Maestro ranges 56-58, 6390 and 0604.
    """
    n = len(d)
    p2, p3, p4, p6 = int(d[:2]), int(d[:3]), int(d[:4]), int(d[:6])
    if d[0] == "4" and n in (13, 16, 19):
        return "visa"
    if (51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16:
        return "mastercard"
    if p2 in (34, 37) and n == 15:
        return "amex"
    if 2200 <= p4 <= 2204 and 16 <= n <= 19:
        return "mir"
    if (p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925) and 16 <= n <= 19:
        return "discover"
    if p2 == 35 and 16 <= n <= 19:
        # JCB's registered range is 3528-3589. The whole 35 block is accepted: no other
        # network here uses it, and test-card generators (Faker) issue numbers across it.
        return "jcb"
    if p4 in (1800, 2131) and n == 15:
        return "jcb"
    if (300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39)) and 14 <= n <= 19:
        return "diners"
    if p2 == 62 and 16 <= n <= 19:
        return "unionpay"
    if (
        # 604 is the historic 0604 range (int() drops the leading zero)
        p4 in (5018, 5020, 5038, 5893, 6304, 6390, 6759, 6761, 6762, 6763, 604) or 56 <= p2 <= 58
    ) and 12 <= n <= 19:
        return "maestro"
    return None


class CardDetector:
    """Payment card numbers (PANs): 12-19 digits that pass the Luhn check and start with a
    known issuer prefix at a length that issuer uses (Visa, Mastercard 51-55 and
    2221-2720, Amex, Discover, Diners, JCB, UnionPay, Maestro, Mir).

    Written either compact or in groups separated by one consistent separator (a single
    space, a single dash or a no-break space): a first group of four, then groups of 3-6,
    the last of 1-6 (``4111 1111 1111 1111``, ``3782 822463 10005``). If the run continues
    past the number (``4111 1111 1111 1111 2025``), the longest valid run of whole groups
    from its first digit is taken. Rejected: runs glued to letters, ``.``, ``,``, ``/``,
    ``:``, ``@`` or ``+`` (GUID fragments, decimals, dates), and reference numbers
    (``Order #...``).
    """

    name = "card"
    kind = "card"
    confidence = 0.95

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        for m in _CARD_RUN.finditer(text):
            f = self._check(text, m.start(), m.group())
            if f is not None:
                out.append(f)
        return out

    def _check(self, text: str, start: int, run: str) -> Finding | None:
        before = _char(text, start - 1)
        if _is_word(before) or (before and before in ".,/:@+-_"):
            return None
        parts = _CARD_SPLIT.split(run)
        groups, seps = parts[0::2], parts[1::2]
        for k in range(min(len(groups), 7), 0, -1):
            digits = "".join(groups[:k])
            if not 12 <= len(digits) <= 19:
                continue
            used = seps[: k - 1]
            if used and (len(set(used)) != 1 or len(used[0]) != 1):
                continue
            if k > 1 and not (
                len(groups[0]) == 4
                and all(3 <= len(g) <= 6 for g in groups[1 : k - 1])
                and 1 <= len(groups[k - 1]) <= 6
            ):
                continue
            end = start + len(digits) + sum(len(sep) for sep in used)
            after = _char(text, end)
            if _is_word(after) or (after and after in "@/:_"):
                continue
            if after and after in ".,-" and _char(text, end + 1).isdigit():
                continue
            if _card_brand(digits) is None or not luhn_valid(digits):
                continue
            if _reference_context(text, start):
                return None
            return Finding(start, end, self.kind, text[start:end], self.confidence, self.name)
        return None


# ---------------------------------------------------------------------------------------
# IP addresses
# ---------------------------------------------------------------------------------------

_IPV4_CANDIDATE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}")
_IPV6_CANDIDATE = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?"
)
_VERSION_CONTEXT = re.compile(r"\b(?:version|ver\.?|release|build|v)\s*\Z", re.IGNORECASE)


class IpDetector:
    """IPv4 (dotted quad, each part 0-255 without leading zeros) and IPv6 addresses
    (RFC 4291 section 2.2: eight groups, ``::`` compression as in RFC 5952, or an embedded
    IPv4 tail), each validated by :mod:`ipaddress`.

    Rejected: more or fewer than four dotted parts (``1.2.3``, ``1.2.3.4.5``), quads
    announced as versions (``version 1.2.3.4``), IPv6 look-alikes such as times
    (``12:30:45``), MAC addresses, and hex words without a digit (``dead::beef``,
    ``std::add``). A zone index (``%eth0``) and a port are not part of the span.
    """

    name = "ip"
    kind = "ip"
    confidence = 0.9

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        if text.count(".") >= 3:
            self._v4(text, out)
        if text.count(":") >= 2:
            self._v6(text, out)
        return out

    def _v4(self, text: str, out: list[Finding]) -> None:
        for m in _IPV4_CANDIDATE.finditer(text):
            end = m.end()
            after = _char(text, end)
            if _is_word(after) or (after == "." and _is_word(_char(text, end + 1))):
                continue
            if _VERSION_CONTEXT.search(text, max(0, m.start() - 16), m.start()):
                continue
            try:
                ipaddress.IPv4Address(m.group())
            except ValueError:
                continue
            out.append(Finding(m.start(), end, self.kind, m.group(), self.confidence, self.name))

    def _v6(self, text: str, out: list[Finding]) -> None:
        for m in _IPV6_CANDIDATE.finditer(text):
            cand, end = m.group(), m.end()
            if cand.endswith(":") and not cand.endswith("::"):
                cand, end = cand[:-1], end - 1
            after = _char(text, end)
            if _is_word(after) or (after and after in ".:" and _is_word(_char(text, end + 1))):
                continue
            if not any(ch.isdigit() for ch in cand):
                continue
            try:
                ipaddress.IPv6Address(cand)
            except ValueError:
                continue
            out.append(Finding(m.start(), end, self.kind, cand, self.confidence, self.name))


# ---------------------------------------------------------------------------------------
# Known entities: keyed fingerprints of normalised word n-grams
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


_HEAD_KEY_INFO = b"mnemovault.pii.known.head.v1"


def _head_key(secret: bytes) -> bytes:
    return hmac.digest(secret, _HEAD_KEY_INFO, hashlib.sha256)


def _head(head_key: bytes, norm_token: str) -> bytes:
    # Keyed BLAKE2b (RFC 7693 keyed mode, a PRF), 8 bytes: a cheap pre-filter only.
    return hashlib.blake2b(norm_token.encode("utf-8"), key=head_key, digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class KnownEntity:
    """What the index keeps for one value; no plaintext. Persist these fields to rebuild
    an index without decrypting anything (:meth:`KnownEntityIndex.add_fingerprint`).

    ``fingerprint``: 32 bytes, :func:`fingerprint` of the value. ``n_tokens``: its word
    token count. ``head``: 8 bytes, a keyed BLAKE2b of its normalised first token under
    a key derived from the secret, which lets ``detect`` skip most n-grams.
    """

    kind: str
    fingerprint: bytes
    n_tokens: int
    head: bytes


class KnownEntityIndex:
    """Finds values the tenant already knows, wherever they appear, case- and
    whitespace-insensitively (also across line breaks), without holding their plaintext.

    ``add(kind, value)`` keeps ``HMAC-SHA256(secret, normalise(value))``, the value's
    token count and a keyed 8-byte digest of its first token. ``detect(text)`` slides over
    the text's word tokens; where a token's digest is the first-token digest of some known
    value, the n-grams starting there with the lengths such values have are normalised,
    fingerprinted and looked up. A hit is returned with its original offsets (first
    character of its first token to last character of its last, so ``Smith,`` yields
    ``Smith``). Cost: one BLAKE2b per distinct token, plus one HMAC per candidate n-gram
    at matching first tokens; independent of the number of known values. Entities added
    by fingerprint without a ``head`` are checked at every token (slower).

    Matching is on whole tokens: ``Ann`` is not found inside ``Anne`` (but is found in
    ``Ann-Marie``, whose first token it is). Scripts written without spaces (Chinese,
    Japanese, Thai) are one token per run and only match as whole runs.

    The secret must be at least 16 bytes. If the same fingerprint is added with two kinds,
    the lexicographically smallest kind is kept (independent of insertion order).
    """

    name = "known"
    confidence = 1.0

    def __init__(self, secret: bytes, *, name: str = "known") -> None:
        if not isinstance(secret, bytes | bytearray) or len(secret) < 16:
            raise ValueError("KnownEntityIndex: secret must be at least 16 bytes")
        self._secret = bytes(secret)
        self._head_key = _head_key(self._secret)
        self._entries: dict[bytes, tuple[str, int, bytes | None]] = {}
        self._heads: dict[bytes, dict[int, int]] = {}  # head -> {n_tokens: count}
        self._headless: dict[int, int] = {}  # n_tokens -> count, entries without a head
        self.name = name

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and self.fingerprint(value) in self._entries

    def fingerprint(self, value: str) -> bytes:
        """:func:`fingerprint` under this index's secret."""
        return fingerprint(value, self._secret)

    def entity(self, kind: str, value: str) -> KnownEntity:
        """What :meth:`add` would store for ``value``, without adding it."""
        spans = _spans(value)
        if not spans:
            raise ValueError("KnownEntityIndex: value has no letter or digit")
        if not KIND_RE.match(kind):
            raise ValueError("KnownEntityIndex: kind must match [a-z][a-z_]{0,31}")
        head = _head(self._head_key, _norm_token(value[spans[0][0] : spans[0][1]]))
        return KnownEntity(kind, self.fingerprint(value), len(spans), head)

    def add(self, kind: str, value: str) -> KnownEntity:
        """Know ``value`` as ``kind``; returns what was stored. ``ValueError`` if ``kind``
        is malformed or ``value`` has no word token."""
        entity = self.entity(kind, value)
        self.add_fingerprint(entity.kind, entity.fingerprint, entity.n_tokens, entity.head)
        return entity

    def add_fingerprint(
        self, kind: str, fp: bytes, n_tokens: int, head: bytes | None = None
    ) -> None:
        """Know a value by its stored fingerprint and token count (and ``head``, from
        :meth:`entity`/:meth:`add` under the same secret): how the vault reloads an index
        without decrypting. Without ``head`` the entry is still found, only slower."""
        if not KIND_RE.match(kind):
            raise ValueError("KnownEntityIndex: kind must match [a-z][a-z_]{0,31}")
        if len(fp) != 32:
            raise ValueError("KnownEntityIndex: fingerprint must be 32 bytes")
        if n_tokens < 1:
            raise ValueError("KnownEntityIndex: n_tokens must be >= 1")
        if head is not None and len(head) != 8:
            raise ValueError("KnownEntityIndex: head must be 8 bytes")
        old = self._entries.get(fp)
        if old is not None:
            kind = min(kind, old[0])
            head = head if head is not None else old[2]
            self._unlink(old[1], old[2])
        self._entries[fp] = (kind, n_tokens, head)
        counts = self._headless if head is None else self._heads.setdefault(head, {})
        counts[n_tokens] = counts.get(n_tokens, 0) + 1

    def discard(self, fp: bytes) -> bool:
        """Forget a fingerprint (e.g. after a shred); ``True`` if it was known."""
        old = self._entries.pop(fp, None)
        if old is None:
            return False
        self._unlink(old[1], old[2])
        return True

    def _unlink(self, n: int, head: bytes | None) -> None:
        counts = self._headless if head is None else self._heads[head]
        counts[n] -= 1
        if not counts[n]:
            del counts[n]
        if head is not None and not counts:
            del self._heads[head]

    def detect(self, text: str) -> list[Finding]:
        if not self._entries:
            return []
        spans = _spans(text)
        if not spans:
            return []
        toks = [_norm_token(text[s:e]) for s, e in spans]
        heads, headless, head_key = self._heads, self._headless, self._head_key
        seen: dict[str, dict[int, int] | None] = {}
        entries, secret, digest = self._entries, self._secret, hmac.digest
        gaps: dict[int, str] = {}
        out: list[Finding] = []
        n_spans = len(spans)
        for i in range(n_spans):
            tok = toks[i]
            if tok in seen:
                lens = seen[tok]
            else:
                lens = seen[tok] = heads.get(_head(head_key, tok)) if heads else None
            if not lens and not headless:
                continue
            wanted = set(lens or ()) | set(headless)
            longest = min(max(wanted), n_spans - i)
            norm = tok
            for n in range(1, longest + 1):
                if n > 1:
                    j = i + n - 2
                    gap = gaps.get(j)
                    if gap is None:
                        gap = gaps[j] = _norm_gap(text[spans[j][1] : spans[j + 1][0]])
                    norm = norm + gap + toks[i + n - 1]
                if n not in wanted:
                    continue
                hit = entries.get(digest(secret, norm.encode("utf-8"), hashlib.sha256))
                if hit is not None and hit[1] == n:
                    start, end = spans[i][0], spans[i + n - 1][1]
                    out.append(
                        Finding(start, end, hit[0], text[start:end], self.confidence, self.name)
                    )
        return out


class KnownEntityDetector(KnownEntityIndex):
    """A :class:`KnownEntityIndex` filled from ``(kind, value)`` pairs. Without ``secret``
    a random one is drawn, so the fingerprints live only as long as this object."""

    def __init__(
        self,
        entities: Iterable[tuple[str, str]],
        *,
        secret: bytes | None = None,
        name: str = "known",
    ) -> None:
        super().__init__(secret if secret is not None else secrets.token_bytes(32), name=name)
        for kind, value in entities:
            self.add(kind, value)


# ---------------------------------------------------------------------------------------
# Optional NER (the ``ner`` extra)
# ---------------------------------------------------------------------------------------

NER_EXTRA = "ner"


class NerUnavailableError(ImportError):
    """The optional NER detector cannot run: ``presidio-analyzer``/spaCy are not installed
    (``pip install 'mnemovault[ner]'``) or the named spaCy model package is not."""


DEFAULT_NER_KINDS: Mapping[str, str] = {"PERSON": "person", "LOCATION": "location"}


class OptionalNerDetector:
    """Named entities from Presidio's spaCy NLP engine (extra ``ner``: presidio-analyzer
    >= 2.2.33, whose ``SpacyNlpEngine`` takes a model list and returns entity scores, plus
    a spaCy model package the deployer installs), off by default.

    ``model`` is an installed spaCy pipeline package name or a path to one; ``kinds`` maps
    Presidio entity types (``PERSON``, ``LOCATION``, ``ORGANIZATION``, ``NRP``...) to our
    kinds; entities scoring below ``min_score`` are dropped. The model is loaded here with
    ``spacy.load``; Presidio's own loader is bypassed because it downloads missing models,
    and mnemovault never downloads one. Raises :class:`NerUnavailableError` (an
    ``ImportError``) naming the extra when presidio/spaCy or the model is missing.
    """

    name = "ner"

    def __init__(
        self,
        model: str = "en_core_web_sm",
        *,
        language: str = "en",
        kinds: Mapping[str, str] | None = None,
        min_score: float = 0.5,
    ) -> None:
        try:
            import spacy
            from presidio_analyzer.nlp_engine import SpacyNlpEngine
        except ImportError as exc:
            raise NerUnavailableError(
                "OptionalNerDetector needs the optional 'ner' extra: "
                "pip install 'mnemovault[ner]' and a spaCy model package"
            ) from exc
        if not Path(model).exists() and importlib.util.find_spec(model) is None:
            raise NerUnavailableError(
                f"spaCy model {model!r} is not installed (mnemovault never downloads models): "
                "install the model package, or pass the path of a model directory"
            )
        self.kinds = dict(kinds if kinds is not None else DEFAULT_NER_KINDS)
        for kind in self.kinds.values():
            if not KIND_RE.match(kind):
                raise ValueError("OptionalNerDetector: kinds must match [a-z][a-z_]{0,31}")
        self.language = language
        self.min_score = min_score
        self._engine = SpacyNlpEngine(models=[{"lang_code": language, "model_name": model}])
        # never engine.load(): it downloads missing models
        self._engine.nlp = {language: spacy.load(model)}  # type: ignore[assignment,unused-ignore]

    def detect(self, text: str) -> list[Finding]:
        artifacts = self._engine.process_text(text, self.language)
        out: list[Finding] = []
        for ent, score in zip(artifacts.entities, artifacts.scores, strict=False):
            kind = self.kinds.get(ent.label_)
            if kind is None or score < self.min_score:
                continue
            start, end = ent.start_char, ent.end_char
            # spaCy spans can carry surrounding whitespace or punctuation; trim to words
            while start < end and not _is_word(text[start]):
                start += 1
            while end > start and not _is_word(text[end - 1]):
                end -= 1
            if start < end:
                out.append(
                    Finding(start, end, kind, text[start:end], min(float(score), 1.0), self.name)
                )
        return out


# ---------------------------------------------------------------------------------------
# Convenience
# ---------------------------------------------------------------------------------------


def default_detectors(
    default_region: str | None = None,
    known: KnownEntityIndex | None = None,
    *,
    fallback_regions: Sequence[str] = (),
) -> list[Detector]:
    """The built-in model-free detectors in precedence order for ties: known entities
    (if given), IBAN, card, email, IP, phone."""
    out: list[Detector] = [] if known is None else [known]
    out += [
        IbanDetector(),
        CardDetector(),
        EmailDetector(),
        IpDetector(),
        PhoneDetector(default_region, fallback_regions=fallback_regions),
    ]
    return out
