"""The email detector, :class:`EmailDetector`, and its regexes (a simplified RFC 5322
``addr-spec``, scanned outwards from each ``@``)."""

from __future__ import annotations

import re
import unicodedata

from mnemovault.pii.detect.base import Finding, _char, _is_word

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
# An alphabetic TLD, or an internationalised one in its ASCII (punycode, RFC 3492) form.
_TLD_OK = re.compile(
    r"(?:[^\W\d_]{2,63}|[Xx][Nn]--[A-Za-z0-9](?:[A-Za-z0-9-]{0,57}[A-Za-z0-9])?)\Z"
)
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
    that is not a common file suffix, or an internationalised TLD in punycode
    (``xn--p1ai``); labels may be punycode too (``xn--bcher-kva``). Scans outwards from
    each ``@``: linear in the text.

    The identity of a finding is the address NFKC-normalised and case-folded, with its
    punycode labels decoded (``user@xn--bcher-kva.de`` and ``USER@bücher.de`` are one
    address).
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
        value = text[start:end]
        return Finding(start, end, "email", value, self.confidence, self.name, _identity(value))


def _identity(address: str) -> str:
    """``address`` case-folded (NFKC first), its ``xn--`` labels decoded (IDNA)."""
    if not address.isascii():
        address = unicodedata.normalize("NFKC", address)
    local, _, domain = address.casefold().rpartition("@")
    if "xn--" in domain:
        domain = ".".join(_decode_label(label) for label in domain.split("."))
    return f"{local}@{domain}"


def _decode_label(label: str) -> str:
    """A ``xn--`` label decoded from punycode (RFC 3492); others, and labels that are not
    valid punycode, as they are."""
    if not label.startswith("xn--"):
        return label
    try:
        return label[4:].encode("ascii").decode("punycode").casefold()
    except UnicodeError:
        return label
