"""Sealing stored free text under content keys (issue 21, item 1).

One recipe (:mod:`mnemovault.pii.crypto`'s AES-256-GCM), one column format::

    sealed = b"\\x01" || nonce (12 bytes) || ciphertext and tag
    AAD    = enc("mnemovault/content/v1", tenant, table, column, row id, key id)

so a ciphertext moved to another row, column, table, tenant or key fails to open. Which
key: the record's subject's within its scope if it has a subject, else its scope's
(:class:`~mnemovault.pii.keystore.Owner`, named by keyed fingerprints). A record whose key
was destroyed reads as :data:`ERASED` on every path.

Filtered columns (a memory's ``key`` and ``tags``) keep an equality-searchable keyed hash
beside the ciphertext (:func:`term_hash`), derived from the tenant's fingerprint key as
:mod:`mnemovault.governance.forget` derives its query hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mnemovault.audit.chain import keyed_fingerprint
from mnemovault.pii.crypto import NONCE_BYTES, Sealed, encode_aad, open_sealed, seal
from mnemovault.pii.keystore import KeyCache, KeyStore, Owner

FORMAT = b"\x01"
ERASED = "[erased]"


def owner_of(fingerprint_key: bytes, scope: str, subject: str | None) -> Owner:
    """The owner of a record of ``subject`` (as stored: its placeholder for a personal
    name) in ``scope``: the fingerprints the erase, the audit log and the ledger use
    (:func:`mnemovault.subjects.erase.fingerprint`)."""
    return Owner(keyed_fingerprint(fingerprint_key, scope, purpose="mnemovault/scope"),
                 keyed_fingerprint(fingerprint_key, subject, purpose="mnemovault/subject")
                 if subject is not None else None)


def content_aad(tenant: str, table: str, column: str, row_id: object, key_id: str) -> bytes:
    return encode_aad("mnemovault/content/v1", tenant, table, column, str(row_id), key_id)


def seal_text(key: bytes, text: str, aad: bytes) -> bytes:
    s = seal(key, text.encode("utf-8"), aad)
    return FORMAT + s.nonce + s.ciphertext


def open_text(key: bytes, blob: bytes, aad: bytes) -> str:
    """Raises:
        DecryptionError: tampered, moved, or another key."""
    blob = bytes(blob)
    if blob[:1] != FORMAT:
        from mnemovault.pii.crypto import DecryptionError

        raise DecryptionError("sealing: unknown ciphertext format")
    sealed = Sealed(blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:])
    return open_sealed(key, sealed, aad).decode("utf-8")


def term_hash(fingerprint_key: bytes, purpose: str, value: str) -> bytes:
    """The keyed hash of a filtered value (equality only): 16 bytes of
    ``HMAC-SHA256(HKDF-less key, purpose || 0 || value)``."""
    msg = f"mnemovault/{purpose}/v1".encode() + b"\x00" + value.encode("utf-8")
    return hmac.new(fingerprint_key, msg, hashlib.sha256).digest()[:16]


def key_hash(fingerprint_key: bytes, key: str) -> str:
    """``h1:<32 hex>``: what the ``memories.key`` column holds for a sealed row."""
    return "h1:" + term_hash(fingerprint_key, "memory-key", key).hex()


@dataclass
class Sealer:
    """Seals and opens texts of one process (key store + its cache)."""

    store: KeyStore
    cache: KeyCache

    @classmethod
    def of(cls, store: KeyStore) -> Sealer:
        return cls(store, KeyCache(store))

    def key_for(self, tenant: str, owner: Owner) -> tuple[str, bytes]:
        return self.cache.for_owner(tenant, owner)

    def writer(self, tenant: str, fingerprint_key: bytes) -> SealWriter:
        """Seals the texts of one write transaction (the caller holds the wrap lock in
        share mode: :func:`mnemovault.store.pii.lock_wrap`)."""
        return SealWriter(self, tenant, fingerprint_key)

    def row_hook(self, tenant: str, row: dict[str, Any]) -> dict[str, Any]:
        """:attr:`mnemovault.store.db.Database.row_hook`: open a row's sealed columns (a
        ``memories`` row: ``content_sealed`` under ``key_id``). A row under a destroyed key
        reads as :data:`ERASED` with ``erased`` True; a row not sealed yet (``key_id``
        NULL, before ``db seal``) keeps its plaintext."""
        if "content_sealed" not in row:
            return row
        kid = row.get("key_id")
        blob = row.pop("content_sealed")
        kblob = row.pop("key_sealed", None)
        if "key" in row:
            row["key_hash"] = row["key"]  # what SQL compares (key_versions, supersede)
        if kid is None or blob is None:
            return row
        kid = str(kid)
        keys, _gone = self.cache.keys(tenant, [kid])
        key = keys.get(kid)
        if key is None:
            row["content"] = ERASED
            if kblob is not None:
                row["key"] = ERASED
            row["erased"] = True
            return row
        row["content"] = open_text(key, blob, content_aad(tenant, "memories", "content",
                                                          row["id"], kid))
        if kblob is not None:
            row["key"] = open_text(key, kblob, content_aad(tenant, "memories", "key",
                                                           row["id"], kid))
        return row

    def seal(self, tenant: str, key_id: str, key: bytes, table: str, column: str,
             row_id: object, text: str) -> bytes:
        return seal_text(key, text, content_aad(tenant, table, column, row_id, key_id))

    def open_rows(self, tenant: str, rows: Sequence[dict[str, Any]], table: str,
                  columns: Iterable[str], *, id_col: str = "id",
                  key_col: str = "key_id") -> list[dict[str, Any]]:
        """Open the sealed ``columns`` of ``rows`` in place (``<col>_sealed`` bytes ->
        ``<col>`` text), one key-store read for the request's keys. A row under a destroyed
        key gets :data:`ERASED` in each column and ``erased = True``. Rows without a key id
        (written before sealing, not yet migrated) keep their plaintext columns."""
        cols = list(columns)
        ids = sorted({r[key_col] for r in rows if r.get(key_col)})
        keys, _gone = self.cache.keys(tenant, ids) if ids else ({}, set())
        for r in rows:
            kid = r.get(key_col)
            if not kid:
                for c in cols:
                    r.pop(f"{c}_sealed", None)
                continue
            key = keys.get(kid)
            for c in cols:
                blob = r.pop(f"{c}_sealed", None)
                if blob is None:
                    r[c] = None
                elif key is None:
                    r[c] = ERASED
                else:
                    r[c] = open_text(key, blob, content_aad(tenant, table, c, r[id_col], kid))
            if key is None:
                r["erased"] = True
        return list(rows)


class SealWriter:
    """The owner keys of one write transaction, looked up once each."""

    def __init__(self, sealer: Sealer, tenant: str, fingerprint_key: bytes) -> None:
        self.sealer = sealer
        self.tenant = tenant
        self.fingerprint_key = fingerprint_key
        self._keys: dict[tuple[str, str | None], tuple[str, bytes]] = {}

    def key(self, scope: str, subject: str | None) -> tuple[str, bytes]:
        got = self._keys.get((scope, subject))
        if got is None:
            got = self.sealer.key_for(self.tenant,
                                      owner_of(self.fingerprint_key, scope, subject))
            self._keys[(scope, subject)] = got
        return got

    def key_hash(self, key: str) -> str:
        """The stored (compared) form of a memory's upsert key: its keyed hash."""
        return key_hash(self.fingerprint_key, key)

    def memory_key(self, scope: str, subject: str | None, row_id: object,
                   key: str | None) -> tuple[str | None, bytes | None]:
        """``(stored key, key_sealed)`` of a ``memories`` row's upsert key (None: none)."""
        if key is None:
            return None, None
        kid, k = self.key(scope, subject)
        return self.key_hash(key), seal_text(k, key, content_aad(
            self.tenant, "memories", "key", row_id, kid))

    def content(self, scope: str, subject: str | None, row_id: object,
                text: str) -> tuple[uuid.UUID, bytes]:
        """``(key id, sealed content)`` of a ``memories`` row."""
        kid, key = self.key(scope, subject)
        return uuid.UUID(kid), seal_text(key, text, content_aad(self.tenant, "memories",
                                                                "content", row_id, kid))
