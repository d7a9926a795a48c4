"""The payment card detector, :class:`CardDetector`, with the Luhn check
(:func:`luhn_valid`) and the issuer (IIN) table it validates against."""

from __future__ import annotations

import re

from mnemovault.pii.detect.base import Finding, _char, _is_word, _reference_context

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
