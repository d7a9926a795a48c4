"""SQL of the review gate (:mod:`mnemovault.governance.review`) over the ``memories`` table:
hold new rows for review, the queue of pending rows (oldest id first, keyset), and the
status changes of a decision.

A held row has ``status = 'pending_review'`` and ``provenance.review = 'pending'``; an
approved one ``active`` and ``approved``; a rejected version ``superseded`` and
``rejected``. Every function runs in the caller's transaction (tenant set for row-level
security) and names the tenant in its statement too (on Citus: routed to one shard).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.store.memories import COLUMNS

Conn = psycopg.Connection[Any]

MARK = "review"
"""The provenance key that records the review state of a row that passed the gate."""


def hold(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> int:
    """Hold ``ids`` for review (rows already superseded stay so); the count held."""
    if not ids:
        return 0
    cur = conn.execute(
        "UPDATE memories SET status = 'pending_review', provenance = provenance || %s "
        "WHERE tenant_id = %s AND id = ANY(%s) AND status IN ('active', 'pending_review')",
        (Jsonb({MARK: "pending"}), tenant, list(ids)))
    return cur.rowcount


def pending(conn: Conn, tenant: str, *, scope: str | None, subject: str | None,
            cursor: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` pending rows (:data:`~mnemovault.store.memories.COLUMNS`), oldest
    id first, after ``cursor``; limited to ``scope`` and ``subject`` when given."""
    params: dict[str, Any] = {"limit": limit, "tenant": tenant}
    where = "tenant_id = %(tenant)s AND status = 'pending_review'"
    if scope is not None:
        where += " AND scope = %(scope)s"
        params["scope"] = scope
    if subject is not None:
        where += " AND subject_id = %(subject)s"
        params["subject"] = subject
    if cursor is not None:
        where += " AND id > %(cursor)s"
        params["cursor"] = cursor
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE {where} ORDER BY id "
                        "LIMIT %(limit)s", params).fetchall()


def lock(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """The row of ``memory_id`` (:data:`~mnemovault.store.memories.COLUMNS`), locked ``FOR
    UPDATE``; None when there is none."""
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s AND id = %s "
                        "FOR UPDATE", (tenant, memory_id)).fetchone()


def approve(conn: Conn, tenant: str, memory_id: uuid.UUID) -> bool:
    """Make a pending row active; whether it was pending."""
    cur = conn.execute(
        "UPDATE memories SET status = 'active', updated_at = now(), "
        "provenance = provenance || %s WHERE tenant_id = %s AND id = %s "
        "AND status = 'pending_review'", (Jsonb({MARK: "approved"}), tenant, memory_id))
    return cur.rowcount == 1


def mark_rejected(conn: Conn, tenant: str, memory_id: uuid.UUID) -> bool:
    """Retire a pending row as a rejected version (``superseded``, never recalled again);
    whether it was pending."""
    cur = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = now(), "
        "provenance = provenance || %s WHERE tenant_id = %s AND id = %s "
        "AND status = 'pending_review'", (Jsonb({MARK: "rejected"}), tenant, memory_id))
    return cur.rowcount == 1


def restore_parent(conn: Conn, tenant: str, parent_id: uuid.UUID) -> bool:
    """Make ``parent_id`` live again after its replacement was rejected: only when it is
    superseded, was not itself waiting for review (never held, or approved), and its key
    has no other live version; whether it was restored."""
    cur = conn.execute(
        "UPDATE memories p SET status = 'active', updated_at = now() "
        "WHERE p.tenant_id = %(t)s AND p.id = %(id)s AND p.status = 'superseded' "
        "AND coalesce(p.provenance ->> %(mark)s, 'approved') = 'approved' "
        "AND NOT EXISTS (SELECT 1 FROM memories o WHERE o.tenant_id = p.tenant_id "
        "AND o.scope = p.scope AND o.key = p.key AND o.status <> 'superseded')",
        {"id": parent_id, "mark": MARK, "t": tenant})
    return cur.rowcount == 1
