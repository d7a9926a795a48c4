"""SQL of the entity graph and of lineage.

Tables owned: ``graph_nodes``, ``graph_edges``, ``graph_node_support``,
``graph_edge_support`` and ``memory_lineage``. Also reads (and key-share locks) rows of
``memories`` to check lineage sources (:func:`lock_memory_scopes`).

The rules (what to index, when a node may go, lock order, validation) live in
:mod:`mnemovault.governance.graph` and :mod:`mnemovault.governance.lineage`; these functions
run one statement each (two for the support deletions), in the order given, and hold the row
locks their docstrings name until the caller's transaction ends. Rows come back as the
connection's ``dict_row`` rows. Tenant scoping is by row-level security on the
connection and, in every statement, by ``tenant_id = ...`` (the ``tenant`` argument): defence
in depth, and on Citus the statement is routed to the tenant's one shard.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

_CHUNK = 2000  # rows per statement (a statement takes at most 65535 parameters)


def _insert(conn: psycopg.Connection[Any], into: str, tenant: str,
            rows: Sequence[tuple[Any, ...]], returning: str | None = None) -> list[Any]:
    """``INSERT INTO {into} VALUES (tenant, *row), ... ON CONFLICT DO NOTHING`` in the
    order given, a statement per :data:`_CHUNK` rows; the ``returning`` column's values.
    (Not ``SELECT ... FROM unnest(...)``: Citus routes a ``VALUES`` insert to the tenant's
    shard, but runs an ``INSERT ... SELECT`` of a constant tenant through the coordinator,
    on a connection of its own, which makes the transaction a two-phase commit.)"""
    out: list[Any] = []
    for i in range(0, len(rows), _CHUNK):
        part = rows[i:i + _CHUNK]
        one = "(" + ", ".join(["%s"] * (1 + len(part[0]))) + ")"
        cur = conn.execute(
            f"INSERT INTO {into} VALUES {', '.join([one] * len(part))} ON CONFLICT DO NOTHING"
            + (f" RETURNING {returning}" if returning else ""),
            [v for r in part for v in (tenant, *r)])
        if returning:
            out += [r[returning] for r in cur.fetchall()]
    return out


# -- nodes -------------------------------------------------------------------------------


def lock_nodes_key_share(conn: psycopg.Connection[Any], tenant: str,
                         node_ids: Sequence[str]) -> set[str]:
    """Lock the existing nodes among ``node_ids`` ``FOR KEY SHARE``, in ``node_id`` order.

    Returns the ids of the nodes found (and now locked); missing ones are absent.
    """
    return {r["node_id"] for r in conn.execute(
        "SELECT node_id FROM graph_nodes WHERE tenant_id = %s AND node_id = ANY(%s) "
        "ORDER BY node_id FOR KEY SHARE", (tenant, list(node_ids))).fetchall()}


def create_nodes(conn: psycopg.Connection[Any], tenant: str,
                 nodes: Sequence[tuple[str, str]]) -> set[str]:
    """Insert ``(node_id, kind)`` nodes in the order given, skipping ids that exist.

    Returns the ids this call created (a node a concurrent writer made is absent).
    """
    return set(_insert(conn, "graph_nodes (tenant_id, node_id, kind)", tenant, nodes,
                       returning="node_id"))


def lock_nodes_for_update(conn: psycopg.Connection[Any], tenant: str,
                          node_ids: Sequence[str]) -> None:
    """Lock the existing nodes among ``node_ids`` ``FOR UPDATE``, in ``node_id`` order
    (waits for writers holding ``FOR KEY SHARE`` on them). Returns nothing."""
    conn.execute("SELECT 1 FROM graph_nodes WHERE tenant_id = %s AND node_id = ANY(%s) "
                 "ORDER BY node_id FOR UPDATE", (tenant, list(node_ids)))


def delete_unsupported_nodes(conn: psycopg.Connection[Any], tenant: str,
                             node_ids: Sequence[str]) -> list[str]:
    """Delete the nodes among ``node_ids`` that have no support row and no edge.

    Returns the deleted node ids, in no particular order.
    """
    return [r["node_id"] for r in conn.execute(
        "DELETE FROM graph_nodes n WHERE n.tenant_id = %(t)s AND n.node_id = ANY(%(n)s) "
        "AND NOT EXISTS (SELECT 1 FROM graph_node_support s WHERE s.tenant_id = %(t)s "
        "  AND s.node_id = n.node_id) "
        "AND NOT EXISTS (SELECT 1 FROM graph_edges e WHERE e.tenant_id = %(t)s "
        "  AND e.source_node = n.node_id) "
        "AND NOT EXISTS (SELECT 1 FROM graph_edges e WHERE e.tenant_id = %(t)s "
        "  AND e.target_node = n.node_id) "
        "RETURNING node_id", {"t": tenant, "n": list(node_ids)}).fetchall()]


# -- edges -------------------------------------------------------------------------------


def insert_edges(conn: psycopg.Connection[Any], tenant: str,
                 pairs: Sequence[tuple[str, str]]) -> None:
    """Insert ``(source_node, target_node)`` edges in the order given (existing ones
    ignored). Returns nothing."""
    _insert(conn, "graph_edges (tenant_id, source_node, target_node)", tenant, pairs)


def delete_unsupported_edges(conn: psycopg.Connection[Any], tenant: str,
                             pairs: Sequence[tuple[str, str]]) -> int:
    """Delete the edges among ``(source_node, target_node)`` ``pairs`` that no support row
    names. Returns how many were deleted."""
    cur = conn.execute(
        "DELETE FROM graph_edges e USING unnest(%s::text[], %s::text[]) AS u(a, b) "
        "WHERE e.tenant_id = %s AND e.source_node = u.a AND e.target_node = u.b "
        "AND NOT EXISTS (SELECT 1 FROM graph_edge_support s WHERE s.tenant_id = e.tenant_id "
        "  AND s.source_node = e.source_node AND s.target_node = e.target_node)",
        ([a for a, _ in pairs], [b for _, b in pairs], tenant))
    return cur.rowcount or 0


def neighbours(conn: psycopg.Connection[Any], tenant: str,
               node_id: str) -> list[dict[str, Any]]:
    """The nodes sharing an edge with ``node_id``: rows ``{"node_id": str, "support": int}``
    (``support`` = number of edge support rows), most supported first, then by id."""
    return list(conn.execute(
        "SELECT CASE WHEN e.source_node = %(n)s THEN e.target_node ELSE e.source_node END "
        "AS node_id, count(s.memory_id) AS support FROM graph_edges e "
        "JOIN graph_edge_support s USING (tenant_id, source_node, target_node) "
        "WHERE e.tenant_id = %(t)s AND (e.source_node = %(n)s OR e.target_node = %(n)s) "
        "GROUP BY 1 ORDER BY support DESC, node_id", {"n": node_id, "t": tenant}).fetchall())


# -- support -----------------------------------------------------------------------------


def insert_node_support(conn: psycopg.Connection[Any], tenant: str,
                        rows: Sequence[tuple[str, uuid.UUID, bool]]) -> None:
    """Insert ``(node_id, memory_id, quoted)`` node support rows in the order given
    (existing ones ignored). Returns nothing."""
    _insert(conn, "graph_node_support (tenant_id, node_id, memory_id, quoted)", tenant, rows)


def insert_edge_support(conn: psycopg.Connection[Any], tenant: str,
                        rows: Sequence[tuple[str, str, uuid.UUID]]) -> None:
    """Insert ``(source_node, target_node, memory_id)`` edge support rows in the order given
    (existing ones ignored). Returns nothing."""
    _insert(conn, "graph_edge_support (tenant_id, source_node, target_node, memory_id)",
            tenant, rows)


def nodes_supported_by(conn: psycopg.Connection[Any], tenant: str,
                       memory_ids: Sequence[uuid.UUID]) -> list[str]:
    """The distinct node ids that any of ``memory_ids`` supports, sorted by ``node_id``."""
    return [r["node_id"] for r in conn.execute(
        "SELECT DISTINCT node_id FROM graph_node_support WHERE tenant_id = %s "
        "AND memory_id = ANY(%s) ORDER BY node_id", (tenant, list(memory_ids))).fetchall()]


def edges_supported_by(conn: psycopg.Connection[Any], tenant: str,
                       memory_ids: Sequence[uuid.UUID]) -> list[tuple[str, str]]:
    """The distinct ``(source_node, target_node)`` edges that any of ``memory_ids``
    supports, sorted by source then target."""
    return [(r["source_node"], r["target_node"]) for r in conn.execute(
        "SELECT DISTINCT source_node, target_node FROM graph_edge_support "
        "WHERE tenant_id = %s AND memory_id = ANY(%s) ORDER BY source_node, target_node",
        (tenant, list(memory_ids))).fetchall()]


def delete_support(conn: psycopg.Connection[Any], tenant: str,
                   memory_ids: Sequence[uuid.UUID]) -> int:
    """Delete the edge support rows, then the node support rows, of ``memory_ids``.
    Returns the total number of rows deleted."""
    a = conn.execute("DELETE FROM graph_edge_support WHERE tenant_id = %s "
                     "AND memory_id = ANY(%s)", (tenant, list(memory_ids)))
    b = conn.execute("DELETE FROM graph_node_support WHERE tenant_id = %s "
                     "AND memory_id = ANY(%s)", (tenant, list(memory_ids)))
    return (a.rowcount or 0) + (b.rowcount or 0)


# -- lineage -----------------------------------------------------------------------------


def lock_memory_scopes(conn: psycopg.Connection[Any], tenant: str,
                       memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Lock the existing memories among ``memory_ids`` ``FOR KEY SHARE``, in ``id`` order.

    Returns ``{memory id: scope}`` for those visible to the connection's tenant (missing
    and other tenants' memories are absent).
    """
    rows = conn.execute(
        "SELECT id, scope FROM memories WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id "
        "FOR KEY SHARE", (tenant, list(memory_ids))).fetchall()
    return {r["id"]: r["scope"] for r in rows}


def insert_lineage(conn: psycopg.Connection[Any], tenant: str,
                   pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Insert ``(memory_id, source_id)`` lineage rows in the order given (existing ones
    ignored). Returns nothing."""
    _insert(conn, "memory_lineage (tenant_id, memory_id, source_id)", tenant, pairs)


def lineage_sources(conn: psycopg.Connection[Any], tenant: str,
                    memory_id: uuid.UUID) -> list[uuid.UUID]:
    """The ``source_id`` values of ``memory_id``'s lineage rows, sorted."""
    return [r["source_id"] for r in conn.execute(
        "SELECT source_id FROM memory_lineage WHERE tenant_id = %s AND memory_id = %s "
        "ORDER BY source_id", (tenant, memory_id)).fetchall()]


def delete_lineage(conn: psycopg.Connection[Any], tenant: str,
                   memory_ids: Sequence[uuid.UUID]) -> int:
    """Delete the lineage rows whose ``memory_id`` is in ``memory_ids``. Returns how many."""
    cur = conn.execute("DELETE FROM memory_lineage WHERE tenant_id = %s "
                       "AND memory_id = ANY(%s)", (tenant, list(memory_ids)))
    return cur.rowcount or 0
