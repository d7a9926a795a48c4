"""The payment card detector, :class:`CardDetector`, with the Luhn check
(:func:`luhn_valid`) and the issuer (IIN) table it validates against."""

from __future__ import annotations

import re

from mnemovault.pii.detect.base import (
    Finding,
    _char,
    _iban_shaped_before,
    _is_word,
    _reference_context,
)

# ---------------------------------------------------------------------------------------
# Payment cards
# ---------------------------------------------------------------------------------------

_CARD_RUN = re.compile(r"\d[\d \-\u00a0\r\n]{10,}\d")
_CARD_SPLIT = re.compile(r"([ \-\u00a0\r\n]+)")
# A line break (with the spaces around it, and the dash it was wrapped after) may stand
# for the group separator: a grouped number wrapped at the end of a line.
_LINE_BREAK = re.compile(r"[ \u00a0]*(-?)[ \u00a0]*\r?\n[ \u00a0]*\Z")
# Words that say a number is a card: then a Luhn-valid number is taken whatever its issuer.
_CARD_CUE = re.compile(
    r"\b(?:cards?|cc|credit|debit|kreditkarte|karte|carte|tarjeta|cart[aã]o?)\b",
    re.IGNORECASE,
)


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
    2221-2720, Amex, Discover, Diners, JCB, UnionPay, Maestro, Mir). A Luhn-valid number
    of another issuer or length is taken too when a card word (``card``, ``card number``,
    ``credit``/``debit card``, ``CC``...) precedes it within 40 characters, with
    ``cue_confidence``.

    Written either compact or in groups separated by one consistent separator (a single
    space, a single dash or a no-break space; a line break, with spaces around it, may
    stand for it where the number wraps): a first group of four, then groups of 3-6, the
    last of 1-6 (``4111 1111 1111 1111``, ``3782 822463 10005``). If the run continues
    past the number (``4111 1111 1111 1111 2025``), the longest valid run of whole groups
    from its first digit is taken, and the rest of the run is searched again, so several
    numbers in a row (``4111111111111111 5555555555554444``, ``4111 1111 1111 1111 5555
    5555 5555 4444``) are all found. Where no number starts at the run's first digit, a
    number may start at a later group that is a compact 12-19 digit number, a group of four
    after a group that cannot be inside a card (``exp 12 27 4111 1111 1111 1111``), or a
    group of four after whole blocks of four groups of four (a grouped number that failed
    its check, then a card); not at any other group of four inside a longer grouped run
    (``1234 5678 9012 3456 7890`` holds no card). Compact numbers may also be separated by
    commas (``4111111111111111,5555555555554444``). Rejected: runs glued to letters,
    ``.``, ``,``, ``/``, ``:``, ``@`` or ``+`` (GUID fragments, decimals, dates), reference
    numbers (``Order #...``: the whole run), and the digit groups of a malformed IBAN
    (``GB27 DAKD 5840 1036 7418``).

    The identity of a finding is its digits.
    """

    name = "card"
    kind = "card"
    confidence = 0.95
    cue_confidence = 0.8

    def detect(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        for m in _CARD_RUN.finditer(text):
            start = m.start()
            parts = _CARD_SPLIT.split(m.group())
            groups, seps = parts[0::2], parts[1::2]
            kinds = [_sep_kind(s) for s in seps] if seps else []
            # last: the group the run starts at, or the first after the last card found
            pos, i, last = start, 0, 0
            while i < len(groups):
                g = groups[i]
                f = None
                if i == last or _may_start(groups, last, i):
                    f = self._check(text, pos, groups[i:], seps[i:], kinds[i:])
                if f is None:
                    pos += len(g) + (len(seps[i]) if i < len(seps) else 0)
                    i += 1
                    continue
                first = not out or out[-1].start < start  # the run's first card
                if first and _reference_context(text, start):
                    break  # a reference number announced as such: the whole run
                out.append(f)
                while i < len(groups) and pos < f.end:  # on to the first group after it
                    pos += len(groups[i]) + (len(seps[i]) if i < len(seps) else 0)
                    i += 1
                last = i
        return out

    def _check(self, text: str, start: int, groups: list[str], seps: list[str],
               kinds: list[str | None]) -> Finding | None:
        before = _char(text, start - 1)
        # a comma may stand next to a compact number (``4111...1111,5555...4444``): a run of
        # 12+ digits is no group of a thousands-separated number
        comma_before = before == ","
        if _is_word(before) or (before and before in "./:@+-_"):
            return None
        for k in range(min(len(groups), 7), 0, -1):
            digits = "".join(groups[:k])
            if not 12 <= len(digits) <= 19 or (comma_before and k > 1):
                continue
            used = kinds[: k - 1]
            if None in used or len({u for u in used if u != "\n"}) > 1:
                continue
            if k > 1 and not (
                len(groups[0]) == 4
                and all(3 <= len(g) <= 6 for g in groups[1 : k - 1])
                and 1 <= len(groups[k - 1]) <= 6
            ):
                continue
            end = start + len(digits) + sum(len(sep) for sep in seps[: k - 1])
            after = _char(text, end)
            if _is_word(after) or (after and after in "@/:_"):
                continue
            if (
                after
                and after in ".,-"
                and _char(text, end + 1).isdigit()
                and not (after == "," and k == 1)
            ):
                continue
            if not luhn_valid(digits):
                continue
            if _card_brand(digits) is not None:
                confidence = self.confidence
            elif _CARD_CUE.search(text, max(0, start - 40), start):
                confidence = self.cue_confidence
            else:
                continue
            if _iban_shaped_before(text, start):
                return None
            return Finding(
                start, end, self.kind, text[start:end], confidence, self.name, digits
            )
        return None


def _may_start(groups: list[str], last: int, i: int) -> bool:
    """May a card start at ``groups[i]``, no card having started at ``groups[last:i]``? At a
    compact number; at a group of four after a group that cannot be inside a card; at a
    group of four that follows whole blocks of four groups of four (``4111 1111 1111 1112
    5555 5555 5555 4444``: the first card fails its check, the second is still one)."""
    g = groups[i]
    if 12 <= len(g) <= 19:
        return True
    if len(g) != 4:
        return False
    if not 3 <= len(groups[i - 1]) <= 6:
        return True
    return (i - last) % 4 == 0 and all(len(x) == 4 for x in groups[last:i])


def _sep_kind(sep: str) -> str | None:
    """A group separator as one of ``" "``, ``"-"``, ``"\\u00a0"`` or ``"\\n"`` (a line
    break, standing for any of them; ``"-"`` if a dash precedes it), or ``None`` if it is
    none of these."""
    if len(sep) == 1 and sep in " -\u00a0":
        return sep
    m = _LINE_BREAK.match(sep)
    if m is None:
        return None
    return m.group(1) or "\n"  # a dash before the break still says "dashes"
