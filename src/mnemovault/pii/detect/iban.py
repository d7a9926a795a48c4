"""The IBAN detector, :class:`IbanDetector`: compact or grouped candidates validated by
``stdnum.iban`` (ISO 13616 check digits and BBAN format)."""

from __future__ import annotations

import re

from stdnum import iban as _iban

from mnemovault.pii.detect.base import Finding, _char, _is_word

# ---------------------------------------------------------------------------------------
# IBAN
# ---------------------------------------------------------------------------------------

# A group separator: one space, no-break space or dash, or a line break with the spaces
# around it (a grouped IBAN wrapped at the end of a line).
_SEP = r"(?:[ \u00a0\-]|[ ]*+\r?\n[ ]*+)"
# Country code, check digits, then 10-32 more alphanumerics, optionally one separator
# before any of them. Bounded, so each attempt is O(1); groups are checked in code.
_IBAN_CANDIDATE = re.compile(rf"(?<![^\W_])[A-Za-z]{{2}}\d{{2}}(?:{_SEP}?[A-Za-z0-9]){{10,32}}")
_SPLIT = re.compile(rf"({_SEP})")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


class IbanDetector:
    """International Bank Account Numbers (ISO 13616-1), validated by ``stdnum.iban``:
    the mod-97 check digits (ISO 7064) and the country's registered length and BBAN shape.
    The national checks ``stdnum`` also knows (a bank's own check digit in some countries)
    are not required: a number whose IBAN check digits are right is an IBAN as written,
    even if its bank code would fail the national rule.

    Accepts the compact electronic form (``GB82WEST12345698765432``) and the print form in
    groups of four separated by single spaces (``GB82 WEST 1234 5698 7654 32``) or dashes
    (``GB82-WEST-1234-...``), not mixed; a line break may stand for a separator. Upper or
    lower case (lower case gets a lower confidence). When the candidate runs on into the
    next word, the longest valid prefix made of whole groups is taken.

    The identity of a finding is the compact upper-case form.
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
        parts = _SPLIT.split(cand)
        groups, seps = parts[0::2], parts[1::2]
        kinds = ["-" if s == "-" else " " if len(s) == 1 else "\n" for s in seps]
        for k in range(len(groups), 0, -1):
            if k > 1 and not (
                all(len(g) == 4 for g in groups[: k - 1]) and 1 <= len(groups[k - 1]) <= 4
            ):
                continue
            if len({u for u in kinds[: k - 1] if u != "\n"}) > 1:
                continue  # spaces and dashes mixed
            end = start + sum(len(g) for g in groups[:k]) + sum(len(s) for s in seps[: k - 1])
            if _is_word(_char(text, end)):
                continue  # cut inside a longer alphanumeric run
            value = text[start:end]
            compact = _NOT_ALNUM.sub("", value).upper()
            if _iban.is_valid(compact, check_country=False):
                conf = self.confidence if value.upper() == value else self.lowercase_confidence
                return Finding(start, end, self.kind, value, conf, self.name, compact)
        return None
