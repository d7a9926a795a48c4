"""Appending audit rows inside the caller's transaction (SPEC section 6).

One chain per tenant. The per-tenant head row is locked (``SELECT … FOR UPDATE``) in the
same transaction as the change it records, so concurrent writers serialise and the chain
never forks. The row is canonicalised once (:func:`mnemovault.audit.chain.build_row`) and
``row_hash = SHA-256(prev_hash || row_bytes)`` is computed over the stored bytes.

What the lock costs (issue 29): every governed operation appends its row as its last
statements, so the head is held from the lock to the commit only. The row is
canonicalised before the lock with ``seq`` and ``ts`` cut out (:func:`_template`), and one
statement (``mv_audit_append``, migration 0016) takes the lock, fills them in, hashes the
row, computes its Merkle nodes and writes the row, the nodes and the head: inside the
lock there is no round trip to this process and no Python to wait for (under load, most of
the old critical section was this process getting the GIL back between its two round
trips). A due checkpoint (every ``checkpoint_rows`` rows or ``checkpoint_seconds``; it is
signed here, the key is outside the database) adds one statement under the lock. A row
whose values happen to spell a mark is built the old way (:func:`_append_locked`). Every
statement still names its tenant and locks one row of it (on Citus: one shard, no
multi-shard row lock).

The head row also keeps the RFC 9162 compact range of the tenant's Merkle tree; each
append stores the perfect nodes it completes (so proofs read O(log n) rows) and, every
``checkpoint_rows`` rows or ``checkpoint_seconds`` seconds, a signed checkpoint (C2SP
signed note, Ed25519; the signing key lives outside the database).

Rows hold ids, counts, placeholders and keyed hashes only, never a personal value.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemovault.audit.canonical import canonical_json
from mnemovault.audit.chain import GENESIS_HASH, build_row, build_row_body
from mnemovault.audit.checkpoint import (
    generate_signing_key,
    load_private_key,
    sign_checkpoint,
    write_public_key,
)
from mnemovault.audit.merkle import CompactRange, leaf_hash
from mnemovault.store import audit as store
from mnemovault.store.db import note_audit_append, tenant_of

HASH = 32


@dataclass
class AuditConfig:
    """Where checkpoints come from. ``key_path`` holds the Ed25519 signing key (PKCS#8 PEM,
    mode 0600, created on first use; its public half in ``<key_path>.pub``)."""

    key_path: Path | None = None
    origin: str = "mnemovault/audit"
    checkpoint_rows: int = 1000
    checkpoint_seconds: float = 3600.0
    _key: Ed25519PrivateKey | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def signing_key(self) -> Ed25519PrivateKey | None:
        if self.key_path is None:
            return None
        with self._lock:
            if self._key is None:
                if self.key_path.exists():
                    self._key = load_private_key(self.key_path)
                else:
                    self.key_path.parent.mkdir(parents=True, exist_ok=True)
                    self._key = generate_signing_key(self.key_path)
                    write_public_key(self.public_key_path, self._key.public_key(),
                                     name=self.origin)
            return self._key

    @property
    def public_key_path(self) -> Path:
        assert self.key_path is not None
        return self.key_path.with_name(self.key_path.name + ".pub")

    def origin_for(self, tenant: str) -> str:
        return f"{self.origin}/{tenant}"


config = AuditConfig()


def configure(new: AuditConfig) -> None:
    """Set the process-wide checkpoint configuration (done by ``MemoryVault.open``)."""
    global config
    config = new


def _peaks(blob: bytes) -> list[bytes]:
    return [bytes(blob[i : i + HASH]) for i in range(0, len(blob), HASH)]


def _head(conn: psycopg.Connection[Any], tenant: str) -> dict[str, Any]:
    """The tenant's head row, locked ``FOR UPDATE`` until commit (created at genesis)."""
    return store.lock_head(conn, tenant, GENESIS_HASH)


def append(
    conn: psycopg.Connection[Any],
    *,
    tenant: str,
    operation: str,
    actor: str | None,
    agent: str | None = None,
    memory_ids: list[str] | None = None,
    trigger: str | None = None,
    provenance: dict[str, Any] | None = None,
    request_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> int:
    """Append one row to ``tenant``'s chain in the open transaction ``conn``; return its seq.

    Raises:
        CanonicalFormError: a value cannot be canonicalised (e.g. an integer beyond ±2^53).
    """
    parts = _template(tenant=tenant, operation=operation, actor=actor, agent=agent,
                      memory_ids=memory_ids or [], trigger=trigger,
                      provenance=provenance or {}, request_id=request_id,
                      details=details or {})
    if parts is None:  # a value that spells one of the marks: the row built under the lock
        return _append_locked(conn, tenant=tenant, operation=operation, actor=actor,
                              agent=agent, memory_ids=memory_ids, trigger=trigger,
                              provenance=provenance, request_id=request_id, details=details)
    # the lock, the row, its Merkle nodes and the head in one statement (module docstring)
    head = store.append_row(conn, tenant, operation, *parts, GENESIS_HASH)
    seq = int(head["seq"])
    now = head["ts"]
    cp_size, cp_at = int(head["checkpoint_size"]), head["checkpoint_at"]
    if (seq - cp_size >= config.checkpoint_rows or cp_size == 0
            or (cp_at is not None
                and (now - cp_at).total_seconds() >= config.checkpoint_seconds)):
        root = CompactRange(seq, _peaks(bytes(head["peaks"]))).root()
        if _write_checkpoint(conn, tenant, seq, root, now):
            store.update_head_checkpoint(conn, tenant, size=seq, at=now)
    note_audit_append(tenant)
    return seq


# Stand-ins for ``seq`` and ``ts`` in a row's canonical bytes, cut out and filled in by
# the database under the head's lock (canonical JSON quotes every string, so these
# spellings occur only as the two members themselves: checked, with a fallback).
_SEQ_MARK = 2**53 - 1
_TS_MARK = "0001-01-01T00:00:00.000000Z"
_SEQ_TOKEN = b'"seq":' + str(_SEQ_MARK).encode()
_TS_TOKEN = b'"ts":"' + _TS_MARK.encode() + b'"'


def _template(*, tenant: str, **fields: Any) -> tuple[bytes, bytes, bytes] | None:
    """The row's canonical bytes around its ``seq`` and ``ts`` values: ``(head, mid,
    tail)`` with ``row_bytes = head + str(seq) + mid + ts + tail``; None when a mark is
    not found exactly once (then the row is built under the lock instead)."""
    body = canonical_json(build_row_body(seq=_SEQ_MARK, tenant_id=tenant, ts=_TS_MARK,
                                         **fields))
    if body.count(_SEQ_TOKEN) != 1 or body.count(_TS_TOKEN) != 1:
        return None
    head, rest = body.split(_SEQ_TOKEN)
    if _TS_TOKEN not in rest:  # ts before seq: not the canonical order
        return None
    mid, tail = rest.split(_TS_TOKEN)
    return head + b'"seq":', mid + b'"ts":"', b'"' + tail


def _append_locked(conn: psycopg.Connection[Any], *, tenant: str, operation: str,
                   actor: str | None, agent: str | None, memory_ids: list[str] | None,
                   trigger: str | None, provenance: dict[str, Any] | None,
                   request_id: str | None, details: dict[str, Any] | None) -> int:
    """:func:`append` with the row built in Python under the head's lock (the fallback)."""
    head = _head(conn, tenant)  # the lock: held from here until the caller's commit
    seq = int(head["seq"]) + 1
    now = datetime.now(UTC)
    prev_hash = bytes(head["head_hash"])
    row_bytes, row_hash = build_row(
        prev_hash=prev_hash, seq=seq, tenant_id=tenant, ts=now, operation=operation,
        actor=actor, agent=agent, memory_ids=memory_ids or [], trigger=trigger,
        provenance=provenance or {}, request_id=request_id, details=details or {})
    cr = CompactRange(seq - 1, _peaks(bytes(head["peaks"])))
    nodes = cr.append(leaf_hash(row_bytes))
    cp_size, cp_at = int(head["checkpoint_size"]), head["checkpoint_at"]
    due = (seq - cp_size >= config.checkpoint_rows
           or (cp_at is not None and (now - cp_at).total_seconds() >= config.checkpoint_seconds)
           or cp_size == 0)
    note = _checkpoint_note(tenant, seq, cr.root()) if due else None
    if note is not None:
        cp_size, cp_at = seq, now
    with conn.pipeline():
        store.insert_row(conn, tenant, seq=seq, ts=now, operation=operation,
                         row_bytes=row_bytes, prev_hash=prev_hash, row_hash=row_hash)
        store.insert_nodes(conn, tenant, nodes)
        if note is not None:
            store.insert_checkpoint(conn, tenant, size=seq, root=cr.root(), note=note,
                                    created_at=now)
        store.update_head(conn, tenant, seq=seq, head_hash=row_hash,
                          peaks=b"".join(cr.peaks), checkpoint_size=cp_size,
                          checkpoint_at=cp_at)
    note_audit_append(tenant)
    return seq


def _checkpoint_note(tenant: str, size: int, root: bytes) -> str | None:
    """The signed checkpoint note of ``tenant``'s tree at ``size`` with ``root``, or None
    without a signing key."""
    key = config.signing_key()
    return None if key is None else sign_checkpoint(config.origin_for(tenant), size, root, key)


def _write_checkpoint(conn: psycopg.Connection[Any], tenant: str, size: int, root: bytes,
                      now: datetime) -> bool:
    key = config.signing_key()
    if key is None:
        return False
    note = sign_checkpoint(config.origin_for(tenant), size, root, key)
    store.insert_checkpoint(conn, tenant, size=size, root=root, note=note, created_at=now)
    return True


def checkpoint_now(conn: psycopg.Connection[Any], tenant: str) -> dict[str, Any] | None:
    """Sign a checkpoint of the tenant's tree at its current size (if it has rows and the
    latest checkpoint is older). Returns the latest checkpoint row."""
    head = _head(conn, tenant)
    seq = int(head["seq"])
    if seq and int(head["checkpoint_size"]) < seq:
        cr = CompactRange(seq, _peaks(bytes(head["peaks"])))
        now = datetime.now(UTC)
        if _write_checkpoint(conn, tenant, seq, cr.root(), now):
            store.update_head_checkpoint(conn, tenant, size=seq, at=now)
    return latest_checkpoint(conn, tenant)


def latest_checkpoint(conn: psycopg.Connection[Any],
                      tenant: str | None = None) -> dict[str, Any] | None:
    """The tenant's latest checkpoint row (size, root, note, created_at), or None
    (``tenant`` None: the tenant of the connection's transaction)."""
    return store.latest_checkpoint(conn, tenant if tenant is not None else tenant_of(conn))
