"""SQL of the librarian (:mod:`mnemovault.librarian`): the episodes it reads, the facts it
has written, their rank, and its per-tenant advisory lock.

Every function but the lock runs in the caller's transaction (tenant set for row-level
security) and names its tenant. Episode rows carry ``id``, ``key_id`` and
``content_sealed``, so the connection's row factory opens their content
(:func:`mnemovault.pii.sealing.ContentSealer.row_hook`): the text read is the stored,
pseudonymised text (placeholders), ``[erased]`` (with ``erased`` True) under a destroyed key.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from mnemovault.store.memories import _IDLE_DAYS

Conn = psycopg.Connection[Any]

SOURCE = "librarian"
"""``provenance.source`` of every fact the librarian writes."""

LOCK_CLASS = 0x6D766C62  # "mvlb": pg_try_advisory_lock(LOCK_CLASS, hashtext(tenant))

_LIVE = "status = 'active' AND NOT archived"
# a fact's ``provenance.librarian`` (its kind: merge or distil) stays in the clear column
# (mnemovault.pii.sealing.SYSTEM_PROVENANCE), the rest of its provenance is sealed
_FACTS = "tenant_id = %(tenant)s AND type = 'fact' AND provenance ? 'librarian'"


def try_lock(conn: Conn, tenant: str) -> bool:
    """Take the librarian's session advisory lock of ``tenant`` on ``conn`` (an autocommit
    connection held for the run: released when it closes, also when its process dies);
    False when another run of the tenant holds it."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS got",
                       (LOCK_CLASS, tenant)).fetchone()
    assert row is not None
    return bool(row["got"] if isinstance(row, dict) else row[0])


def unlock(conn: Conn, tenant: str) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_CLASS, tenant))


def scopes(conn: Conn, tenant: str) -> list[str]:
    """The (stored) scopes of the tenant that hold live episodes, sorted."""
    return [r["scope"] for r in conn.execute(
        f"SELECT DISTINCT scope FROM memories WHERE tenant_id = %s AND type = 'episode' "
        f"AND {_LIVE} ORDER BY scope", (tenant,)).fetchall()]


def episodes(conn: Conn, tenant: str, scope: str) -> list[dict[str, Any]]:
    """The live (active, unarchived) episodes of ``scope`` in remembered order: ``id``,
    ``subject_id``, ``created_at``, ``valid_from`` (its event time), ``content`` (opened),
    ``embedding``."""
    return conn.execute(
        "SELECT id, key_id, content_sealed, subject_id, created_at, valid_from, embedding "
        "FROM memories "
        f"WHERE tenant_id = %s AND scope = %s AND type = 'episode' AND {_LIVE} "
        "ORDER BY created_at, id", (tenant, scope)).fetchall()


def facts(conn: Conn, tenant: str, scope: str) -> list[dict[str, Any]]:
    """The librarian's facts of ``scope`` (live, archived, held for review, or superseded:
    an attribute's earlier value stays as a version, and a rerun must not write it again):
    ``id`` and ``source_id`` (the digest of its kind and sources)."""
    rows = conn.execute(  # the sealed provenance opened by the row factory: the digest
        "SELECT id, key_id, provenance, provenance_sealed FROM memories "
        "WHERE tenant_id = %s AND type = 'fact' AND provenance ? 'librarian' "
        "AND scope = %s AND status IN ('active', 'pending_review', 'superseded')",
        (tenant, scope)).fetchall()
    return [{"id": r["id"], "source_id": (r["provenance"] or {}).get("source_id")}
            for r in rows]


def set_boost(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], boost: float) -> int:
    """Set the ``rank_boost`` of ``ids``; how many rows changed."""
    if not ids:
        return 0
    cur = conn.execute("UPDATE memories SET rank_boost = %s WHERE tenant_id = %s "
                       "AND id = ANY(%s) AND rank_boost IS DISTINCT FROM %s::real",
                       (boost, tenant, list(ids), boost))
    return cur.rowcount


def fade_plan(conn: Conn, tenant: str, now: datetime, after_days: float,
              scope: str | None = None) -> list[dict[str, Any]]:
    """The tenant's live librarian facts (of ``scope`` when given) with ``id``, ``pinned``,
    ``rank_boost`` and ``idle`` (whether nothing recalled or woke it for ``after_days`` at
    ``now``: idle since its last access, else since it was written, as retention counts)."""
    where = _FACTS + " AND status = 'active' AND NOT archived"
    params: dict[str, Any] = {"tenant": tenant, "now": now, "days": after_days}
    if scope is not None:
        where += " AND scope = %(scope)s"
        params["scope"] = scope
    return conn.execute(
        f"SELECT id, pinned, rank_boost, {_IDLE_DAYS} >= %(days)s AS idle FROM memories "
        f"WHERE {where} ORDER BY id", params).fetchall()


def boosts(conn: Conn, tenant: str,
           ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, tuple[float, list[uuid.UUID]]]:
    """``id -> (rank_boost, its lineage sources)`` of those of ``ids`` whose boost is not 0
    (recall's candidates: the librarian's facts)."""
    if not ids:
        return {}
    return {r["id"]: (float(r["rank_boost"]), list(r["sources"])) for r in conn.execute(
        "SELECT m.id, m.rank_boost, ARRAY(SELECT l.source_id FROM memory_lineage l "
        "WHERE l.tenant_id = m.tenant_id AND l.memory_id = m.id) AS sources "
        "FROM memories m WHERE m.tenant_id = %s AND m.id = ANY(%s) AND m.rank_boost <> 0",
        (tenant, list(ids))).fetchall()}
