"""The IP address detector, :class:`IpDetector`: IPv4 dotted quads and IPv6 text forms,
validated by :mod:`ipaddress`."""

from __future__ import annotations

import ipaddress
import re

from mnemovault.pii.detect.base import Finding, _char, _is_word

# ---------------------------------------------------------------------------------------
# IP addresses
# ---------------------------------------------------------------------------------------

_IPV4_CANDIDATE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}")
_IPV6_CANDIDATE = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?"
)
_VERSION_CONTEXT = re.compile(r"\b(?:version|ver\.?|release|build|v)\s*\Z", re.IGNORECASE)
# Groups of at most two decimal digits: ``1:2:3:4:5:6:7:8`` or ``10:20:30:40:50:60:70:80``.
_SHORT_DECIMAL_GROUPS = re.compile(r"\d{1,2}(?::\d{1,2}){7}\Z")


class IpDetector:
    """IPv4 (dotted quad, each part 0-255 without leading zeros) and IPv6 addresses
    (RFC 4291 section 2.2: eight groups, ``::`` compression as in RFC 5952, or an embedded
    IPv4 tail), each validated by :mod:`ipaddress`.

    Rejected: more or fewer than four dotted parts (``1.2.3``, ``1.2.3.4.5``), quads
    announced as versions (``version 1.2.3.4``), IPv6 look-alikes such as times
    (``12:30:45``), MAC addresses, and hex words without a digit (``dead::beef``,
    ``std::add``). A zone index (``%eth0``) and a port are not part of the span.

    IPv6 written as eight groups (no ``::``, no IPv4 tail) where every group is a decimal
    number of one or two digits (``1:2:3:4:5:6:7:8``, ``10:20:30:40:50:60:70:80``) is
    rejected as a list, a ratio or a counter. Addresses in use are written with a group of
    three or four hex digits or a hex letter (global unicast is ``2000::/3``, so its first
    group is ``2xxx``/``3xxx``; link-local ``fe80``, unique-local ``fc``/``fd``, multicast
    ``ff``), or compressed (``::1``, ``1:2::8``, still accepted). What the rule drops lies
    in reserved space below ``0100::``; the one form of it seen in logs is the loopback
    spelt out (``0:0:0:0:0:0:0:1``, as Java prints ``::1``), which is not personal data.

    The identity of a finding is the address in its compressed form (RFC 5952:
    ``2001:0DB8:0:0::1`` -> ``2001:db8::1``).
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
                addr = ipaddress.IPv4Address(m.group())
            except ValueError:
                continue
            out.append(
                Finding(
                    m.start(), end, self.kind, m.group(), self.confidence, self.name,
                    addr.compressed,
                )
            )

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
            if "::" not in cand and _SHORT_DECIMAL_GROUPS.match(cand):
                continue
            try:
                addr = ipaddress.IPv6Address(cand)
            except ValueError:
                continue
            out.append(
                Finding(
                    m.start(), end, self.kind, cand, self.confidence, self.name, addr.compressed
                )
            )
