"""The one forget path (SPEC section 4). Delete on every interface calls :func:`forget`.

In one transaction (the caller's): resolve the named memories and every version of them (a
memory with a ``key`` takes its superseded versions along; versions are linked by
``parent_id`` and share scope and key), delete them, and append one ``FORGET`` audit row
(count, first ten ids, trigger, request id; never content).

Later steps plug in here, in this order and in the same transaction: lineage cascade to
derived facts, graph cleanup (or a ``GRAPH_DELETE`` outbox event), shredding of vault values
no remaining record uses.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from mnemovault.audit import log as audit

_VERSIONS_SQL = """
WITH RECURSIVE named AS (
    SELECT id, scope, key, parent_id FROM memories WHERE id = ANY(%(ids)s)
), chain AS (
    SELECT id, parent_id FROM named
    UNION
    SELECT m.id, m.parent_id FROM memories m JOIN chain c
      ON m.id = c.parent_id OR m.parent_id = c.id
)
SELECT id FROM chain
UNION
SELECT m.id FROM memories m JOIN named n
  ON n.key IS NOT NULL AND m.scope = n.scope AND m.key = n.key
"""


def preview(conn: psycopg.Connection[Any], ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    """The rows a forget of ``ids`` would delete (versions included): id, type, archived,
    status and the first 180 characters. Deletes nothing."""
    rows = conn.execute(
        f"SELECT m.id, m.type, m.archived, m.status, left(m.content, 180) AS excerpt "
        f"FROM memories m WHERE m.id IN ({_VERSIONS_SQL}) ORDER BY m.id",
        {"ids": ids},
    ).fetchall()
    return list(rows)


def forget(
    conn: psycopg.Connection[Any],
    *,
    tenant: str,
    ids: list[uuid.UUID],
    actor: str,
    agent: str | None = None,
    trigger: str = "api",
    request_id: str | None = None,
    scope: str | None = None,
) -> tuple[list[uuid.UUID], list[uuid.UUID], int | None]:
    """Delete ``ids`` and all their versions; return (deleted ids, ids not found, audit seq).

    ``scope``, when given, limits the forget to that scope (ids elsewhere count as not
    found). Nothing is written (not even an audit row) when no id exists.
    """
    wanted = list(dict.fromkeys(ids))
    params: dict[str, Any] = {"ids": wanted}
    scope_clause = ""
    if scope is not None:
        scope_clause = " AND scope = %(scope)s"
        params["scope"] = scope
    present = {
        r["id"] if isinstance(r, dict) else r[0]
        for r in conn.execute(
            f"SELECT id FROM memories WHERE id = ANY(%(ids)s){scope_clause} FOR UPDATE", params
        ).fetchall()
    }
    not_found = [i for i in wanted if i not in present]
    if not present:
        return [], not_found, None
    deleted_rows = conn.execute(
        f"DELETE FROM memories WHERE id IN ({_VERSIONS_SQL}) RETURNING id",
        {"ids": list(present)},
    ).fetchall()
    deleted = sorted(r["id"] if isinstance(r, dict) else r[0] for r in deleted_rows)
    # Seams, same transaction: lineage cascade, graph cleanup, vault shredding (issues 3, 4).
    seq = audit.append(
        conn,
        tenant=tenant,
        operation="FORGET",
        actor=actor,
        agent=agent,
        memory_ids=[str(i) for i in deleted[:10]],
        trigger=trigger,
        request_id=request_id,
        details={"count": len(deleted), "requested": len(wanted), "not_found": len(not_found)},
    )
    return deleted, not_found, seq
