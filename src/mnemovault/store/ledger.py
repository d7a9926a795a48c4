"""SQL of the erasure ledger (migrations ``0006_subjects``, ``0012_ledger``): one append-only
row per erase, forget, shred, rectification or reapply, keyed by the seq of the audit row
written in the same transaction. Ids, placeholders and keyed fingerprints only;
``contributed`` holds the ids erase contributors removed that are not memories, by kind
(``{"procedure_runs": [...]}``).

:func:`insert` also notes, for this thread's context, that the tenant has a new ledger row,
so the after-commit hook that appends rows to the ledger file
(:mod:`mnemovault.subjects.ledger`) runs only when there is something to append
(:func:`take_pending`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]

COLUMNS = ("tenant_id, audit_seq, id, kind, at, request_id, subject_fp, scope_fp, "
           "memory_ids, placeholders, rectified, contributed")

_pending: ContextVar[set[str] | None] = ContextVar("mnemovault_ledger_pending", default=None)


def insert(conn: Conn, *, tenant: str, audit_seq: int, kind: str, request_id: str | None,
           subject_fp: str | None, scope_fp: str | None, memory_ids: Sequence[uuid.UUID],
           placeholders: Sequence[str],
           rectified: Sequence[uuid.UUID] = (),
           contributed: dict[str, Sequence[uuid.UUID]] | None = None) -> uuid.UUID:
    """Append a ledger row; its id. ``contributed``: ids removed by kind (empty kinds are
    left out)."""
    rid = uuid.uuid4()
    extra = {k: sorted(str(i) for i in v) for k, v in sorted((contributed or {}).items()) if v}
    conn.execute(
        "INSERT INTO erasure_ledger (tenant_id, audit_seq, id, kind, request_id, subject_fp, "
        "scope_fp, memory_ids, placeholders, rectified, contributed) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (tenant, audit_seq, rid, kind, request_id, subject_fp, scope_fp,
         sorted(memory_ids), sorted(placeholders), sorted(rectified), Jsonb(extra)))
    pending = _pending.get()
    if pending is None:
        pending = set()
        _pending.set(pending)
    pending.add(tenant)
    return rid


def take_pending(tenant: str) -> bool:
    """Whether this context wrote a ledger row for ``tenant`` since the last call (a row
    of a transaction that rolled back counts too: the caller's sync is idempotent)."""
    pending = _pending.get()
    if pending is None or tenant not in pending:
        return False
    pending.discard(tenant)
    return True


def after(conn: Conn, tenant: str, seq: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``tenant`` with ``audit_seq`` > ``seq``, in seq order."""
    return conn.execute(f"SELECT {COLUMNS} FROM erasure_ledger WHERE tenant_id = %s "
                        "AND audit_seq > %s ORDER BY audit_seq LIMIT %s",
                        (tenant, seq, limit)).fetchall()


def before(conn: Conn, tenant: str, seq: int | None, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``tenant`` with ``audit_seq`` < ``seq`` (None: any), newest
    first."""
    return conn.execute(f"SELECT {COLUMNS} FROM erasure_ledger WHERE tenant_id = %s "
                        "AND (%s::bigint IS NULL OR audit_seq < %s) "
                        "ORDER BY audit_seq DESC LIMIT %s",
                        (tenant, seq, seq, limit)).fetchall()


def id_at(conn: Conn, tenant: str, seq: int) -> uuid.UUID | None:
    """The id of ``tenant``'s row at ``audit_seq`` = ``seq``, or None."""
    row = conn.execute("SELECT id FROM erasure_ledger WHERE tenant_id = %s AND audit_seq = %s",
                       (tenant, seq)).fetchone()
    return row["id"] if row else None


def head(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """``tenant``'s last row (highest ``audit_seq``): ``audit_seq`` and ``id``, or None."""
    row: dict[str, Any] | None = conn.execute(
        "SELECT audit_seq, id FROM erasure_ledger WHERE tenant_id = %s "
        "ORDER BY audit_seq DESC LIMIT 1", (tenant,)).fetchone()
    return row


def ids_among(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``ids`` are ids of ``tenant``'s rows."""
    if not ids:
        return set()
    rows = conn.execute("SELECT id FROM erasure_ledger WHERE tenant_id = %s AND id = ANY(%s)",
                        (tenant, list(ids))).fetchall()
    return {r["id"] for r in rows}


def last_reapply(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """``tenant``'s latest ``reapply`` row (any request), or None."""
    row: dict[str, Any] | None = conn.execute(
        f"SELECT {COLUMNS} FROM erasure_ledger WHERE tenant_id = %s AND kind = 'reapply' "
        "ORDER BY audit_seq DESC LIMIT 1", (tenant,)).fetchone()
    return row


# -- the database's ledger id (mv_meta) and the owner's tenant list --------------------
def meta(conn: Conn, key: str) -> Any:
    """The ``mv_meta`` value of ``key`` (JSON), or None."""
    row = conn.execute("SELECT value FROM mv_meta WHERE key = %s", (key,)).fetchone()
    if row is None:
        return None
    return row["value"] if isinstance(row, dict) else row[0]


def meta_first(conn: Conn, key: str, value: Any) -> Any:
    """Record ``value`` under ``key`` unless a value is there already (owner connection);
    the value that is there now."""
    conn.execute("INSERT INTO mv_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) "
                 "DO NOTHING", (key, Jsonb(value)))
    return meta(conn, key)


def tenants_with_rows(conn: Conn) -> list[str]:
    """Tenants with erasure-ledger rows (owner connection: every tenant)."""
    rows = conn.execute("SELECT DISTINCT tenant_id FROM erasure_ledger ORDER BY 1").fetchall()
    return [r["tenant_id"] if isinstance(r, dict) else r[0] for r in rows]
