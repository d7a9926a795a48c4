"""Values the tenant already knows: :class:`KnownEntityIndex` (keyed fingerprints of
normalised word n-grams, no plaintext kept), the record it stores per value
(:class:`KnownEntity`), and :class:`KnownEntityDetector`, an index filled from
``(kind, value)`` pairs. The comparison form and fingerprint themselves live in
:mod:`mnemovault.pii.detect.base`."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from mnemovault.pii.detect.base import (
    KIND_RE,
    Finding,
    _norm_gap,
    _norm_token,
    _spans,
    _strip_invisible,
    fingerprint,
)

# ---------------------------------------------------------------------------------------
# Known entities: keyed fingerprints of normalised word n-grams
# ---------------------------------------------------------------------------------------


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
    ``Ann-Marie``, whose first token it is). Tokens are compared in their normal form
    (:func:`normalise`), which folds Cyrillic/Greek look-alike letters inside a Latin word
    (``Mаria`` with a Cyrillic ``а`` is ``Maria``); through ``detect_all`` the text is also
    searched without invisible characters and with full-width forms folded, so
    ``Ma\\u200bria`` (a zero-width space inside) is found too, its span covering the
    invisible character. Scripts written without spaces (Chinese, Japanese, Thai) are one
    token per run and only match as whole runs.

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

    def fingerprint(self, value: str, *, identity: str | None = None) -> bytes:
        """:func:`fingerprint` under this index's secret."""
        return fingerprint(value, self._secret, identity=identity)

    def entity(self, kind: str, value: str, *, identity: str | None = None) -> KnownEntity:
        """What :meth:`add` would store for ``value``, without adding it.

        With ``identity`` (a :attr:`Finding.identity` such as a card's digits), the
        fingerprint, token count and first-token digest are those of the identity, so the
        entry is found again whichever way the value is written (a compact identity such
        as ``4111111111111111`` also matches that form in text)."""
        if identity is not None:
            value = identity
        value = _strip_invisible(value)
        spans = _spans(value)
        if not spans:
            raise ValueError("KnownEntityIndex: value has no letter or digit")
        if not KIND_RE.match(kind):
            raise ValueError("KnownEntityIndex: kind must match [a-z][a-z_]{0,31}")
        head = _head(self._head_key, _norm_token(value[spans[0][0] : spans[0][1]]))
        return KnownEntity(kind, self.fingerprint(value, identity=identity), len(spans), head)

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
                        Finding(
                            start, end, hit[0], text[start:end], self.confidence, self.name,
                            norm,
                        )
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
