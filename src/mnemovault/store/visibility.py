"""SQL of the visibility rule (:mod:`mnemovault.visibility`): the row condition of a view
(limits and statuses), the values a view may reveal, and the known values within limits.

Every function runs in the caller's transaction (tenant set for row-level security) and
names its tenant in each statement (on Citus: routed to the tenant's shard).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def clause(params: dict[str, Any], *, scope: str | None, subject: str | None,
           statuses: Sequence[str] | None, alias: str = "") -> str:
    """`` AND scope = … AND subject_id = … AND status = ANY(…)`` for a view (``None``: no
    condition of that kind), its values added to ``params`` under ``vis_*`` names. ``alias``
    prefixes the columns (``m.``)."""
    out = ""
    if scope is not None:
        out += f" AND {alias}scope = %(vis_scope)s"
        params["vis_scope"] = scope
    if subject is not None:
        out += f" AND {alias}subject_id = %(vis_subject)s"
        params["vis_subject"] = subject
    if statuses is not None:
        out += f" AND {alias}status = ANY(%(vis_statuses)s)"
        params["vis_statuses"] = list(statuses)
    return out


def valid_at(params: dict[str, Any], as_of: Any, *, alias: str = "") -> str:
    """`` AND valid_from <= T AND (valid_to IS NULL OR valid_to > T)``: the rows whose valid
    interval ``[valid_from, valid_to)`` contains ``as_of`` (an ``as_of`` view,
    :mod:`mnemovault.visibility`; ``memories_valid_time`` of migration 0019 serves it), its
    value added to ``params`` as ``vis_as_of``."""
    params["vis_as_of"] = as_of
    return (f" AND {alias}valid_from <= %(vis_as_of)s"
            f" AND ({alias}valid_to IS NULL OR {alias}valid_to > %(vis_as_of)s)")


def _supported(conn: Conn, tenant: str, placeholders: Sequence[str], *, scope: str | None,
               subject: str | None, statuses: Sequence[str] | None,
               carried_only: bool) -> set[str]:
    """Those of ``placeholders`` with a support row of a memory within ``scope``/``subject``
    (as stored) and in one of ``statuses``; with ``carried_only``, rows not ``quoted``."""
    if not placeholders:
        return set()
    params: dict[str, Any] = {"t": tenant, "ph": list(placeholders)}
    where = clause(params, scope=scope, subject=subject, statuses=statuses, alias="m.")
    rows = conn.execute(
        "SELECT DISTINCT s.node_id FROM graph_node_support s JOIN memories m "
        "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
        "WHERE s.tenant_id = %(t)s AND m.tenant_id = %(t)s AND s.node_id = ANY(%(ph)s)"
        + (" AND NOT s.quoted" if carried_only else "") + where, params).fetchall()
    return {r["node_id"] if isinstance(r, dict) else r[0] for r in rows}


def carried(conn: Conn, tenant: str, placeholders: Sequence[str], *, scope: str | None,
            subject: str | None, statuses: Sequence[str] | None) -> set[str]:
    """Those of ``placeholders`` that a memory of the view carries: its text held the value
    itself (the support row is not ``quoted``, migration 0011), and the memory is within
    ``scope``/``subject`` (as stored) and in one of ``statuses``."""
    return _supported(conn, tenant, placeholders, scope=scope, subject=subject,
                      statuses=statuses, carried_only=True)


def entries(conn: Conn, tenant: str, *, after: str, limit: int, limited: bool,
            scope: str | None, subject: str | None,
            statuses: Sequence[str] | None) -> list[dict[str, Any]]:
    """``placeholder``, ``kind``, ``created_at``, ``shredded_at`` of up to ``limit`` vault
    entries after ``after``, by placeholder; with ``limited``, only those a memory of the
    view carries (as :func:`carried`)."""
    params: dict[str, Any] = {"t": tenant, "after": after, "limit": limit}
    where = ""
    if limited:
        inner = clause(params, scope=scope, subject=subject, statuses=statuses, alias="m.")
        where = (" AND EXISTS (SELECT 1 FROM graph_node_support s JOIN memories m "
                 "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
                 "WHERE s.tenant_id = v.tenant_id AND s.node_id = v.placeholder "
                 f"AND NOT s.quoted{inner})")
    return conn.execute(
        "SELECT v.placeholder, v.kind, v.created_at, v.shredded_at FROM pii_values v "
        f"WHERE v.tenant_id = %(t)s AND v.placeholder > %(after)s{where} "
        "ORDER BY v.placeholder LIMIT %(limit)s", params).fetchall()


def used(conn: Conn, tenant: str, placeholders: Sequence[str], *, scope: str | None,
         subject: str | None) -> set[str]:
    """Those of ``placeholders`` that any memory within ``scope``/``subject`` uses (carries
    or quotes), whatever its status."""
    return _supported(conn, tenant, placeholders, scope=scope, subject=subject,
                      statuses=None, carried_only=False)


def known_within(conn: Conn, tenant: str, *, scope: str | None,
                 subject: str | None) -> list[dict[str, Any]]:
    """``fingerprint``, ``kind``, ``ntokens``, ``head`` of the live vault values some memory
    within ``scope``/``subject`` uses: the known entities a limited key's writes recognise
    (:mod:`mnemovault.visibility`, "known values")."""
    params: dict[str, Any] = {"t": tenant}
    where = clause(params, scope=scope, subject=subject, statuses=None, alias="m.")
    return conn.execute(
        "SELECT v.fingerprint, v.kind, v.ntokens, v.head FROM pii_values v "
        "WHERE v.tenant_id = %(t)s AND v.shredded_at IS NULL AND v.fingerprint IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM graph_node_support s JOIN memories m "
        "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
        f"WHERE s.tenant_id = v.tenant_id AND s.node_id = v.placeholder{where})",
        params).fetchall()


def carried_by(conn: Conn, tenant: str, memory_id: Any) -> set[str]:
    """The placeholders ``memory_id`` carries (its support rows that are not quoted)."""
    rows = conn.execute("SELECT node_id FROM graph_node_support WHERE tenant_id = %s "
                        "AND memory_id = %s AND NOT quoted", (tenant, memory_id)).fetchall()
    return {r["node_id"] if isinstance(r, dict) else r[0] for r in rows}


def first_carried(conn: Conn, tenant: str, placeholders: Sequence[str], *,
                  scope: str | None, subject: str | None,
                  statuses: Sequence[str] | None) -> dict[str, Any]:
    """placeholder -> the creation time of the oldest memory of the view that carries it
    (as :func:`carried`), for those of ``placeholders`` some memory carries."""
    if not placeholders:
        return {}
    params: dict[str, Any] = {"t": tenant, "ph": list(placeholders)}
    where = clause(params, scope=scope, subject=subject, statuses=statuses, alias="m.")
    rows = conn.execute(
        "SELECT s.node_id, min(m.created_at) AS first FROM graph_node_support s "
        "JOIN memories m ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
        "WHERE s.tenant_id = %(t)s AND m.tenant_id = %(t)s AND s.node_id = ANY(%(ph)s) "
        f"AND NOT s.quoted{where} GROUP BY s.node_id", params).fetchall()
    return {r["node_id"]: r["first"] for r in rows}
