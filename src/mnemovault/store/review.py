"""SQL of the review gate (:mod:`mnemovault.governance.review`) over the ``memories`` table:
hold new rows for review, the queue of pending rows (oldest id first, keyset), and the
status changes of a decision.

A held row has ``status = 'pending_review'``, ``provenance.review = 'pending'`` and
``provenance.captured_by`` (the actor that wrote it: ``key:<id>`` or ``local``, for the
separation of duties); an approved one ``active`` and ``approved``; a rejected version
``superseded`` and ``rejected``; a pending version that a newer pending version of its key
replaced before anyone decided on it ``superseded`` and ``displaced``. A key has at most
one ``active`` and one ``pending_review`` row (migration ``0011_visibility``). Every
function runs in the caller's transaction (tenant set for row-level security) and names
the tenant in its statement too (on Citus: routed to one shard).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.store.memories import COLUMNS, INSERT_COLUMNS, INSERT_ROW

Conn = psycopg.Connection[Any]

MARK = "review"
"""The provenance key that records the review state of a row that passed the gate."""

CAPTURED_BY = "captured_by"
"""The provenance key of a held row that names the actor who wrote it (``key:<id>`` or
``local``): the reviewer must be another one unless ``REVIEW_SELF_APPROVAL=true``."""


def held_provenance(captured_by: str) -> dict[str, str]:
    """The provenance keys :func:`hold` sets, for a row inserted as ``pending_review``
    directly (procedures and their versions)."""
    return {MARK: "pending", CAPTURED_BY: captured_by}


def hold(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], *, captured_by: str) -> int:
    """Hold ``ids`` for review (rows already superseded stay so), recording ``captured_by``
    (the writing actor; it overwrites any value the writer put in its provenance); the
    count held."""
    if not ids:
        return 0
    cur = conn.execute(
        "UPDATE memories SET status = 'pending_review', provenance = provenance || %s "
        "WHERE tenant_id = %s AND id = ANY(%s) AND status IN ('active', 'pending_review')",
        (Jsonb(held_provenance(captured_by)), tenant, list(ids)))
    return cur.rowcount


def insert_held(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert memories as ``pending_review`` (rows as :func:`mnemovault.store.memories.
    insert`): a held version of a key that has an ``active`` one cannot pass through
    ``active`` on its way in. :func:`hold` then marks them like every held row."""
    if not rows:
        return
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO memories ({INSERT_COLUMNS}, status) "
            f"VALUES {INSERT_ROW[:-1]}, 'pending_review')",
            rows,
        )


def key_versions(conn: Conn, tenant: str, scope: str,
                 key: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, int]:
    """The live versions of ``key`` in ``scope``, locked ``FOR UPDATE``: (the ``active``
    row, the ``pending_review`` row, the highest ``version`` of any row of the key, 0 when
    it has none). Each row: ``id``, ``version``."""
    live = conn.execute(
        "SELECT id, version, status FROM memories WHERE tenant_id = %s AND scope = %s "
        "AND key = %s AND status IN ('active', 'pending_review') FOR UPDATE",
        (tenant, scope, key)).fetchall()
    top = conn.execute(
        "SELECT coalesce(max(version), 0) AS v FROM memories WHERE tenant_id = %s "
        "AND scope = %s AND key = %s", (tenant, scope, key)).fetchone()
    by = {r["status"]: r for r in live}
    return by.get("active"), by.get("pending_review"), int(top["v"]) if top else 0


def displace(conn: Conn, tenant: str, memory_id: uuid.UUID, now: Any) -> bool:
    """Retire a pending row that a newer pending version of its key replaces before any
    decision (``superseded``, ``provenance.review = 'displaced'``; kept as history, never
    recalled, not in the queue, an empty valid interval: it was never the true version);
    whether it was pending."""
    cur = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = %s, valid_to = valid_from, "
        "provenance = provenance || %s WHERE tenant_id = %s AND id = %s "
        "AND status = 'pending_review'", (now, Jsonb({MARK: "displaced"}), tenant, memory_id))
    return cur.rowcount == 1


def supersede_active_of_key(conn: Conn, tenant: str, memory_id: uuid.UUID) -> uuid.UUID | None:
    """For the approval of keyed row ``memory_id``: its key's ``active`` version (another
    row) becomes ``superseded``; its id, or None (no key, or no active version)."""
    row = conn.execute(
        "UPDATE memories a SET status = 'superseded', updated_at = now(), "
        "valid_to = greatest(a.valid_from, m.valid_from) FROM memories m "
        "WHERE m.tenant_id = %(t)s AND m.id = %(id)s AND m.key IS NOT NULL "
        "AND a.tenant_id = %(t)s AND a.scope = m.scope AND a.key = m.key "
        "AND a.status = 'active' AND a.id <> m.id RETURNING a.id",
        {"t": tenant, "id": memory_id}).fetchone()
    return row["id"] if row is not None else None


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


FLAG_REVIEW = "flag_review"
"""The provenance key of a flagged import's decision (:func:`mnemovault.governance.review.
flag`): ``kept`` or ``sent_to_review``."""


def mark_flag(conn: Conn, tenant: str, memory_id: uuid.UUID, outcome: str) -> bool:
    """Record a flagged import's decision in its provenance; whether the row was there."""
    cur = conn.execute("UPDATE memories SET provenance = provenance || %s "
                       "WHERE tenant_id = %s AND id = %s",
                       (Jsonb({FLAG_REVIEW: outcome}), tenant, memory_id))
    return cur.rowcount == 1


def lock(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """The row of ``memory_id`` (:data:`~mnemovault.store.memories.COLUMNS`), locked ``FOR
    UPDATE``; None when there is none."""
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s AND id = %s "
                        "FOR UPDATE", (tenant, memory_id)).fetchone()


def replaced_parent(conn: Conn, tenant: str, parent_id: uuid.UUID) -> uuid.UUID | None:
    """For a procedure version whose parent is ``parent_id``: the parent's active version
    other than itself when the parent was replaced already (it is ``superseded`` and one of
    its versions is ``active``), locked ``FOR SHARE``; None when the parent is still what
    the version was made from."""
    row = conn.execute(
        "SELECT c.id FROM memories p JOIN memories c ON c.tenant_id = p.tenant_id "
        "AND c.parent_id = p.id WHERE p.tenant_id = %s AND p.id = %s "
        "AND p.status = 'superseded' AND c.status = 'active' ORDER BY c.id LIMIT 1 "
        "FOR SHARE OF c", (tenant, parent_id)).fetchone()
    return row["id"] if row else None


def approve(conn: Conn, tenant: str, memory_id: uuid.UUID, *, current: bool = True,
            valid_to: Any = None) -> bool:
    """Make a pending row active (``current``), or, for a keyed statement dated before its
    key's current version, a historical version (``superseded``, its valid time ending at
    ``valid_to``: :mod:`mnemovault.memories.valid_time`); whether it was pending."""
    cur = conn.execute(
        "UPDATE memories SET status = %s, updated_at = now(), valid_to = %s, "
        "provenance = provenance || %s WHERE tenant_id = %s AND id = %s "
        "AND status = 'pending_review'",
        ("active" if current else "superseded", None if current else valid_to,
         Jsonb({MARK: "approved"}), tenant, memory_id))
    return cur.rowcount == 1


def mark_rejected(conn: Conn, tenant: str, memory_id: uuid.UUID) -> bool:
    """Retire a pending row as a rejected version (``superseded``, never recalled again, an
    empty valid interval); whether it was pending."""
    cur = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = now(), valid_to = valid_from, "
        "provenance = provenance || %s WHERE tenant_id = %s AND id = %s "
        "AND status = 'pending_review'", (Jsonb({MARK: "rejected"}), tenant, memory_id))
    return cur.rowcount == 1


def restore_parent(conn: Conn, tenant: str, parent_id: uuid.UUID) -> bool:
    """Make ``parent_id`` live again after its replacement was rejected; whether it was
    restored. A held version no longer displaces its parent (the parent stays ``active``
    until the version is approved), so this acts only where the parent did go: a
    rectified memory held for review (its parent is the version before it), and versions
    held before migration ``0011_visibility``. Only when the parent is superseded, was not
    itself waiting for review (never held, or approved: not ``displaced`` or
    ``rejected``), its key has no ``active`` version, and no other version of it is
    ``active`` (a procedure whose other proposed version was approved stays replaced:
    procedures have no key, so the key's rule alone would bring the parent back)."""
    cur = conn.execute(
        "UPDATE memories p SET status = 'active', updated_at = now(), valid_to = NULL "
        "WHERE p.tenant_id = %(t)s AND p.id = %(id)s AND p.status = 'superseded' "
        "AND coalesce(p.provenance ->> %(mark)s, 'approved') = 'approved' "
        "AND NOT EXISTS (SELECT 1 FROM memories o WHERE o.tenant_id = p.tenant_id "
        "AND o.scope = p.scope AND o.key = p.key AND o.status = 'active') "
        "AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.tenant_id = p.tenant_id "
        "AND c.parent_id = p.id AND c.status = 'active')",
        {"id": parent_id, "mark": MARK, "t": tenant})
    return cur.rowcount == 1


def was_rejected(conn: Conn, tenant: str, memory_id: uuid.UUID) -> bool:
    """Whether a ``REVIEW_REJECT`` audit row names ``memory_id`` (a rejected item that was
    deleted: a second decision on it is a conflict, not a missing item)."""
    return conn.execute(
        "SELECT 1 FROM audit_log WHERE tenant_id = %s AND operation = 'REVIEW_REJECT' "
        "AND convert_from(row_bytes, 'UTF8')::jsonb -> 'memory_ids' ? %s LIMIT 1",
        (tenant, str(memory_id))).fetchone() is not None
