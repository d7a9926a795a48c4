"""Appending audit rows inside the caller's transaction (SPEC section 6).

One chain per tenant: the per-tenant head row is locked (``SELECT … FOR UPDATE``) in the
same transaction as the change it records, so concurrent writers serialise and the chain
never forks. ``row_hash = SHA-256(prev_hash || row_bytes)`` where ``row_bytes`` is the
canonical JSON of the row (canonicalised once, here; the stored bytes are what is hashed).
Rows hold ids, counts and keyed hashes only, never a personal value.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import psycopg

from mnemovault.audit.canonical import canonical_json

GENESIS_HASH = bytes(32)


def format_ts(ts: datetime) -> str:
    """The one timestamp format of the log: UTC, microseconds, ``Z``."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    head = conn.execute(
        "SELECT seq, head_hash FROM audit_heads WHERE tenant_id = %s FOR UPDATE", (tenant,)
    ).fetchone()
    if head is None:
        conn.execute(
            "INSERT INTO audit_heads (tenant_id, seq, head_hash) VALUES (%s, 0, %s) "
            "ON CONFLICT (tenant_id) DO NOTHING",
            (tenant, GENESIS_HASH),
        )
        head = conn.execute(
            "SELECT seq, head_hash FROM audit_heads WHERE tenant_id = %s FOR UPDATE", (tenant,)
        ).fetchone()
    assert head is not None
    seq = int(_get(head, "seq", 0)) + 1
    prev_hash = bytes(_get(head, "head_hash", 1))
    now = datetime.now(UTC)
    row = {
        "seq": seq,
        "tenant_id": tenant,
        "ts": format_ts(now),
        "actor": actor,
        "agent": agent,
        "operation": operation,
        "memory_ids": memory_ids or [],
        "trigger": trigger,
        "provenance": provenance or {},
        "request_id": request_id,
        "details": details or {},
    }
    row_bytes = canonical_json(row)
    row_hash = hashlib.sha256(prev_hash + row_bytes).digest()
    conn.execute(
        "INSERT INTO audit_log (tenant_id, seq, ts, operation, row_bytes, prev_hash, row_hash) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (tenant, seq, now, operation, row_bytes, prev_hash, row_hash),
    )
    conn.execute(
        "UPDATE audit_heads SET seq = %s, head_hash = %s WHERE tenant_id = %s",
        (seq, row_hash, tenant),
    )
    return seq


def _get(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]
