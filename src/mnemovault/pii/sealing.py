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

What is sealed where (migrations 0015 and 0017):

=========================  =====================================  ==========================
row                        sealed (opened by :meth:`Sealer.       left in clear
                           row_hook` into)                        (what SQL compares)
=========================  =====================================  ==========================
``memories``               ``content``, ``key``, ``provenance``   ``key`` as ``h1:`` hash;
                           (the writer's: source, agent, run id,  ``provenance``: the
                           source id, tags, extra keys)           :data:`SYSTEM_PROVENANCE`
                                                                  keys and the hashes of
                                                                  ``tags`` / ``source_id``
                                                                  / ``run_id``
``procedures``             ``name``, ``intent``, ``steps``        nothing (empty columns)
                           (one JSON document, ``procedure``)
``procedure_runs``         ``provenance`` under the run's own     verdicts, scores, times
                           owner's key                            (no free text)
=========================  =====================================  ==========================
"""

from __future__ import annotations

import hashlib
import hmac
import json
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


def tag_hash(fingerprint_key: bytes, tag: str) -> str:
    """``t1:<32 hex>``: a tag as the clear ``provenance.tags`` of a sealed row holds it (a
    tag filter compares these)."""
    return "t1:" + term_hash(fingerprint_key, "tag", tag).hex()


def source_id_hash(fingerprint_key: bytes, source_id: str) -> str:
    """``s1:<32 hex>``: a ``provenance.source_id`` in the clear column of a sealed row."""
    return "s1:" + term_hash(fingerprint_key, "source-id", source_id).hex()


def run_id_hash(fingerprint_key: bytes, run_id: str) -> str:
    """``r1:<32 hex>``: a ``provenance.run_id`` (the conversation or session a memory was
    said in) in the clear column of a sealed row: what recall's conversation-context stage
    compares (:mod:`mnemovault.store.neighbours`)."""
    return "r1:" + term_hash(fingerprint_key, "run-id", run_id).hex()


SYSTEM_PROVENANCE = frozenset({"review", "captured_by", "injection_flags", "librarian"})
"""Provenance keys the product sets (the review gate's state and capturer, the
sanitiser's rule names, the kind of a librarian's fact) and SQL reads: kept in the clear
column, never sealed."""

_HASHED_PROVENANCE = ("tags", "source_id", "run_id")


def split_provenance(fingerprint_key: bytes,
                     provenance: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``(clear, writer JSON)`` of a provenance to store: the clear column gets the
    :data:`SYSTEM_PROVENANCE` keys and the keyed hashes of ``tags``, ``source_id`` and
    ``run_id``; everything the writer gave goes into the JSON that is sealed."""
    clear = {k: v for k, v in provenance.items() if k in SYSTEM_PROVENANCE}
    writer = {k: v for k, v in provenance.items() if k not in SYSTEM_PROVENANCE}
    if writer.get("tags"):
        clear["tags"] = [tag_hash(fingerprint_key, t) for t in writer["tags"]]
    if writer.get("source_id") is not None:
        clear["source_id"] = source_id_hash(fingerprint_key, str(writer["source_id"]))
    if writer.get("run_id") is not None:
        clear["run_id"] = run_id_hash(fingerprint_key, str(writer["run_id"]))
    return clear, json.dumps(writer, ensure_ascii=False, separators=(",", ":"),
                             sort_keys=True)


def _join_provenance(clear: Any, writer: dict[str, Any] | None) -> dict[str, Any]:
    """A stored row's provenance as readers see it: the clear column's product-set keys
    (its hashes dropped) with the opened writer's keys (None: the key was destroyed)."""
    base = {k: v for k, v in (clear or {}).items() if k not in _HASHED_PROVENANCE}
    return {**(writer or {}), **base}


PROCEDURE_TEXTS = ("name", "intent", "steps")
"""A procedure's free-text fields, sealed together as one JSON document."""

_SEALED_COLUMNS = ("content_sealed", "key_sealed", "provenance_sealed", "procedure_sealed")


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
        """:attr:`mnemovault.store.db.Database.row_hook`: open a row's sealed columns under
        its ``key_id`` (a ``memories`` row: ``content_sealed``, ``key_sealed``,
        ``provenance_sealed``; a procedure's joined ``procedure_sealed``; a run's
        ``provenance_sealed``). A row under a destroyed key reads as :data:`ERASED` with
        ``erased`` True (its provenance: the product-set keys only); a row not sealed yet
        (``key_id`` NULL, before ``db seal``) keeps its plaintext."""
        blobs = {c: row.pop(c) for c in _SEALED_COLUMNS if c in row}
        if not blobs:
            return row
        if "content_sealed" in blobs and "key" in row:
            row["key_hash"] = row["key"]  # what SQL compares (key_versions, supersede)
        kid = row.get("key_id")
        if kid is None:
            return row
        kid = str(kid)
        keys, _gone = self.cache.keys(tenant, [kid])
        key = keys.get(kid)
        rid = row["id"]
        if key is None:
            row["erased"] = True
        for col, blob in blobs.items():
            if blob is None:
                continue
            if col == "provenance_sealed":
                writer = None if key is None else json.loads(open_text(
                    key, blob, content_aad(tenant, "record", "provenance", rid, kid)))
                row["provenance"] = _join_provenance(row.get("provenance"), writer)
            elif col == "procedure_sealed":
                texts = ({"name": ERASED, "intent": ERASED, "steps": {}} if key is None
                         else json.loads(open_text(key, blob, content_aad(
                             tenant, "procedures", "procedure", rid, kid))))
                row.update(texts)
            else:
                name = col.removesuffix("_sealed")
                row[name] = ERASED if key is None else open_text(
                    key, blob, content_aad(tenant, "memories", name, rid, kid))
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

    def provenance(self, scope: str, subject: str | None, row_id: object,
                   provenance: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """``(clear provenance, provenance_sealed)`` of a ``memories`` or
        ``procedure_runs`` row (:func:`split_provenance`), under the owner's key."""
        kid, key = self.key(scope, subject)
        clear, writer = split_provenance(self.fingerprint_key, provenance)
        return clear, seal_text(key, writer, content_aad(self.tenant, "record", "provenance",
                                                         row_id, kid))

    def procedure(self, scope: str, subject: str | None, memory_id: object,
                  texts: dict[str, Any]) -> bytes:
        """The sealed ``procedures.sealed`` of a procedure (its :data:`PROCEDURE_TEXTS`),
        under its memory row's key."""
        kid, key = self.key(scope, subject)
        doc = json.dumps({k: texts[k] for k in PROCEDURE_TEXTS}, ensure_ascii=False,
                         separators=(",", ":"), sort_keys=True)
        return seal_text(key, doc, content_aad(self.tenant, "procedures", "procedure",
                                               memory_id, kid))

    def tag_hashes(self, tags: Sequence[str]) -> list[str]:
        """What a tag filter compares the clear ``provenance.tags`` with."""
        return [tag_hash(self.fingerprint_key, t) for t in tags]
