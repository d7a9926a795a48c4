"""SQL of the audit log (SPEC section 6).

Tables owned: ``audit_log`` (the chained rows), ``audit_heads`` (one row per tenant: chain
head, Merkle compact range, last checkpoint), ``audit_nodes`` (the perfect Merkle subtree
hashes) and ``audit_checkpoints`` (signed checkpoints).

Hashing, canonical form, the Merkle arithmetic and checkpoint signing live in
:mod:`mnemovault.audit`; these functions only read and write rows. Concurrency rests on
:func:`lock_head`: every append or checkpoint first locks the tenant's head row
``FOR UPDATE`` in the caller's transaction, so writers to one chain serialise and every
later write in that transaction (row, nodes, checkpoint, head update) happens under that
lock. Every statement names its tenant (``tenant_id = ...``) as well as row-level security
scoping it: defence in depth, and on Citus the statement goes to the tenant's shard only.
The writes after :func:`lock_head` are plain single-row statements so that the appender can
send them together (:func:`mnemovault.audit.log.append` uses pipeline mode): none of them
needs another's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

# -- audit_heads -------------------------------------------------------------------------

_SELECT_HEAD = ("SELECT seq, head_hash, peaks, checkpoint_size, checkpoint_at FROM audit_heads "
                "WHERE tenant_id = %s FOR UPDATE")


def lock_head(conn: psycopg.Connection[Any], tenant: str, genesis_hash: bytes) -> dict[str, Any]:
    """Lock ``tenant``'s head row ``FOR UPDATE`` until the transaction ends, creating it
    first (``seq`` 0, ``head_hash`` = ``genesis_hash``) if the tenant has none.

    The head is selected ``FOR UPDATE``; when absent it is inserted with ``ON CONFLICT DO
    NOTHING`` (a concurrent creator wins harmlessly) and selected ``FOR UPDATE`` again, so
    the caller always ends up holding the lock on the one committed-or-own head row.

    Returns ``{"seq": int, "head_hash": bytes, "peaks": bytes (concatenated 32-byte peak
    hashes), "checkpoint_size": int, "checkpoint_at": datetime | None}`` (bytea columns may
    come back as ``memoryview``/``bytes``; callers wrap them in ``bytes``).
    """
    head = conn.execute(_SELECT_HEAD, (tenant,)).fetchone()
    if head is None:
        conn.execute(
            "INSERT INTO audit_heads (tenant_id, seq, head_hash) VALUES (%s, 0, %s) "
            "ON CONFLICT (tenant_id) DO NOTHING", (tenant, genesis_hash))
        head = conn.execute(_SELECT_HEAD, (tenant,)).fetchone()
    assert head is not None
    return dict(head) if not isinstance(head, dict) else head


def append_row(conn: psycopg.Connection[Any], tenant: str, operation: str, head: bytes,
               mid: bytes, tail: bytes, genesis_hash: bytes) -> dict[str, Any]:
    """Append one row in one statement (``mv_audit_append``, migration 0016): lock the
    head (created at ``genesis_hash`` if absent), fill ``seq`` and ``ts`` into the row's
    bytes ``head || seq || mid || ts || tail``, chain and hash it, store it with its Merkle
    nodes and move the head; the lock stays until the caller's commit. Returns ``{"seq",
    "ts", "peaks", "checkpoint_size", "checkpoint_at"}`` (the head after the row, with the
    checkpoint fields as they were)."""
    row = conn.execute("SELECT * FROM mv_audit_append(%s, %s, %s, %s, %s, %s)",
                       (tenant, operation, head, mid, tail, genesis_hash)).fetchone()
    assert row is not None
    return dict(row) if not isinstance(row, dict) else row


def update_head(conn: psycopg.Connection[Any], tenant: str, *, seq: int, head_hash: bytes,
                peaks: bytes, checkpoint_size: int, checkpoint_at: datetime | None) -> None:
    """Set every field of ``tenant``'s head row (which the caller holds locked with
    :func:`lock_head`). Returns nothing."""
    conn.execute(
        "UPDATE audit_heads SET seq = %s, head_hash = %s, peaks = %s, checkpoint_size = %s, "
        "checkpoint_at = %s WHERE tenant_id = %s",
        (seq, head_hash, peaks, checkpoint_size, checkpoint_at, tenant))


def update_head_checkpoint(conn: psycopg.Connection[Any], tenant: str, *, size: int,
                           at: datetime) -> None:
    """Record that ``tenant``'s latest checkpoint is at tree ``size``, made ``at`` (the
    caller holds the head locked with :func:`lock_head`). Returns nothing."""
    conn.execute("UPDATE audit_heads SET checkpoint_size = %s, checkpoint_at = %s "
                 "WHERE tenant_id = %s", (size, at, tenant))


def head_seq(conn: psycopg.Connection[Any], tenant: str) -> int:
    """The chain length (head ``seq``) of ``tenant``; 0 when it has no head. Takes no
    lock."""
    row = conn.execute("SELECT seq FROM audit_heads WHERE tenant_id = %s",
                       (tenant,)).fetchone()
    return int(row["seq"]) if row else 0


# -- audit_log ---------------------------------------------------------------------------


def insert_row(conn: psycopg.Connection[Any], tenant: str, *, seq: int, ts: datetime,
               operation: str, row_bytes: bytes, prev_hash: bytes, row_hash: bytes) -> None:
    """Insert one chained row. Returns nothing."""
    conn.execute(
        "INSERT INTO audit_log (tenant_id, seq, ts, operation, row_bytes, prev_hash, row_hash) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (tenant, seq, ts, operation, row_bytes, prev_hash, row_hash))


def rows_after(conn: psycopg.Connection[Any], tenant: str, after: int,
               limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``tenant`` with ``seq > after``, in ``seq`` order: ``{"seq":
    int, "row_bytes", "prev_hash", "row_hash"}`` (bytea values; wrap in ``bytes``)."""
    return list(conn.execute(
        "SELECT seq, row_bytes, prev_hash, row_hash FROM audit_log "
        "WHERE tenant_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (tenant, after, limit)).fetchall())


def rows_between(conn: psycopg.Connection[Any], tenant: str, after: int, until: int | None,
                 limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows with ``after < seq <= until`` (no upper bound when ``until`` is
    None), in ``seq`` order; rows as in :func:`rows_after`."""
    return list(conn.execute(
        "SELECT seq, row_bytes, prev_hash, row_hash FROM audit_log "
        "WHERE tenant_id = %s AND seq > %s AND (%s::bigint IS NULL OR seq <= %s) "
        "ORDER BY seq LIMIT %s", (tenant, after, until, until, limit)).fetchall())


def ts_at(conn: psycopg.Connection[Any], tenant: str, seq: int) -> datetime | None:
    """The ``ts`` of row ``seq`` of ``tenant`` (None when there is no such row); one
    primary-key lookup."""
    row = conn.execute("SELECT ts FROM audit_log WHERE tenant_id = %s AND seq = %s",
                       (tenant, seq)).fetchone()
    return row["ts"] if row else None


def rows_before(conn: psycopg.Connection[Any], tenant: str, *, low: int, high: int,
                limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows with ``low <= seq <= high``, newest first: ``{"seq", "ts",
    "operation", "row_bytes"}`` (a backward primary-key range scan)."""
    return list(conn.execute(
        "SELECT seq, ts, operation, row_bytes FROM audit_log WHERE tenant_id = %s "
        "AND seq >= %s AND seq <= %s ORDER BY seq DESC LIMIT %s",
        (tenant, low, high, limit)).fetchall())


# -- audit_nodes -------------------------------------------------------------------------


def insert_nodes(conn: psycopg.Connection[Any], tenant: str,
                 nodes: Sequence[tuple[int, int, bytes]]) -> None:
    """Insert ``(level, idx, hash)`` Merkle nodes, one statement each, in the order given.
    Returns nothing."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO audit_nodes (tenant_id, level, idx, hash) VALUES (%s, %s, %s, %s)",
            [(tenant, level, idx, h) for level, idx, h in nodes])


def node_hashes(conn: psycopg.Connection[Any], tenant: str,
                ids: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored hashes of the ``(level, idx)`` nodes in ``ids``: ``{(level, idx): hash}``
    (ids with no stored node are absent)."""
    rows = conn.execute(
        "SELECT level, idx, hash FROM audit_nodes WHERE tenant_id = %s AND (level, idx) IN "
        "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))",
        (tenant, [i[0] for i in ids], [i[1] for i in ids])).fetchall()
    return {(r["level"], r["idx"]): bytes(r["hash"]) for r in rows}


# -- audit_checkpoints -------------------------------------------------------------------


def insert_checkpoint(conn: psycopg.Connection[Any], tenant: str, *, size: int, root: bytes,
                      note: str, created_at: datetime) -> None:
    """Insert a signed checkpoint (one at the same size already stored wins). Returns
    nothing."""
    conn.execute(
        "INSERT INTO audit_checkpoints (tenant_id, size, root, note, created_at) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (tenant, size, root, note, created_at))


def latest_checkpoint(conn: psycopg.Connection[Any], tenant: str) -> dict[str, Any] | None:
    """``tenant``'s largest checkpoint: ``{"size": int, "root": bytes, "note": str,
    "created_at": datetime}``, or None when it has none."""
    row = conn.execute("SELECT size, root, note, created_at FROM audit_checkpoints "
                       "WHERE tenant_id = %s ORDER BY size DESC LIMIT 1", (tenant,)).fetchone()
    return dict(row) if row is not None else None
