"""SQL of the ``memories`` table: insert and key versioning, reads, pins, the forget walk
(versions and lineage), and the retention score.

Every function runs in the caller's transaction (tenant already set for row-level
security) and returns plain rows (dicts) or ids; the rules of when to call them live in
the capability modules (:mod:`mnemovault.memories`, :mod:`mnemovault.governance`).

Every statement also names its tenant (``tenant_id = ...``, the ``tenant`` argument):
row-level security stays the guarantee, the filter is defence in depth, and on Citus it
routes the statement to the tenant's one shard (a row lock in a statement that does not
name the distribution column is refused there as multi-shard).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

COLUMNS = (
    "id, scope, subject_id, type, content, key, pinned, archived, status, created_at, "
    "updated_at, last_accessed_at, access_count, provenance, parent_id, version"
)
"""The columns a :class:`~mnemovault.models.Memory` is built from (never the embedding)."""

Conn = psycopg.Connection[Any]


def _limits(params: dict[str, Any], scope: str | None, subject: str | None) -> str:
    """`` AND scope = … AND subject_id = …`` for the limits given (None: no limit), their
    values added to ``params``."""
    clause = ""
    if scope is not None:
        clause += " AND scope = %(scope)s"
        params["scope"] = scope
    if subject is not None:
        clause += " AND subject_id = %(subject)s"
        params["subject"] = subject
    return clause


# -- write ---------------------------------------------------------------------------------
def supersede(conn: Conn, tenant: str, scope: str, key: str,
              now: datetime) -> tuple[uuid.UUID, int] | None:
    """Mark the live version of ``key`` in ``scope`` superseded; its (id, version), or None
    when the key has no live version."""
    row = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = %s WHERE tenant_id = %s "
        "AND scope = %s AND key = %s AND status <> 'superseded' RETURNING id, version",
        (now, tenant, scope, key)).fetchone()
    return (row["id"], row["version"]) if row is not None else None


def insert(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert memories. Each row: (tenant_id, id, scope, subject_id, type, content, key,
    embedding, created_at, updated_at, provenance (Jsonb), parent_id, version)."""
    if not rows:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO memories (tenant_id, id, scope, subject_id, type, content, key, "
            "embedding, created_at, updated_at, provenance, parent_id, version) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            rows,
        )


_ROWS_PER_STATEMENT = 1000  # 13 parameters a row: far below PostgreSQL's 65,535


def insert_many(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    """:func:`insert` in one multi-row ``INSERT`` per 1,000 rows (rows as there), so the
    statement-level triggers on ``memories`` (the lexical statistics) run once for the
    batch instead of once a row."""
    for i in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[i: i + _ROWS_PER_STATEMENT]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
        conn.execute(
            "INSERT INTO memories (tenant_id, id, scope, subject_id, type, content, key, "
            "embedding, created_at, updated_at, provenance, parent_id, version) VALUES "
            + values, [v for row in chunk for v in row])


# -- read ----------------------------------------------------------------------------------
def by_id(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """One memory row (:data:`COLUMNS`), whatever its status."""
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s AND id = %s",
                        (tenant, memory_id)).fetchone()


def by_ids(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], *,
           touch: bool) -> list[dict[str, Any]]:
    """Rows of ``ids`` (any order); with ``touch`` their access count and last access time
    are updated first (recall's statistics)."""
    if touch:
        return conn.execute(
            f"UPDATE memories SET access_count = access_count + 1, "
            f"last_accessed_at = now() WHERE tenant_id = %s AND id = ANY(%s) "
            f"RETURNING {COLUMNS}", (tenant, list(ids))).fetchall()
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s "
                        "AND id = ANY(%s)", (tenant, list(ids))).fetchall()


def touch(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """Count one access of each of ``ids`` (recall's statistics, read by retention and
    wake). Meant for a short transaction of its own after the read: the rows are locked in
    id order (concurrent touches of the same rows queue for microseconds, never deadlock)
    and the commit does not wait for the WAL flush (``synchronous_commit = off``: a crash
    may lose the last few accesses, never a governed change)."""
    conn.execute("SET LOCAL synchronous_commit = off")
    conn.execute(
        "UPDATE memories m SET access_count = m.access_count + 1, last_accessed_at = now() "
        "FROM (SELECT id FROM memories WHERE tenant_id = %(t)s AND id = ANY(%(ids)s) "
        "ORDER BY id FOR UPDATE) l WHERE m.tenant_id = %(t)s AND m.id = l.id",
        {"t": tenant, "ids": list(ids)})


def page(conn: Conn, tenant: str, *, scope: str | None, subject: str | None,
         visible: str, params: dict[str, Any], cursor: uuid.UUID | None, limit: int,
         flagged_by: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
    """At most ``limit`` rows in id order (oldest first), after ``cursor`` when given, that
    satisfy ``visible`` (a view's condition, :meth:`mnemovault.visibility.View.clause`,
    whose values are in ``params``); with ``flagged_by``, only rows whose provenance has
    that key (the sanitiser's label); with ``key``, only that key's rows."""
    params = {**params, "limit": limit, "tenant": tenant}
    clauses: list[str] = ["tenant_id = %(tenant)s" + _limits(params, scope, subject) + visible]
    if cursor is not None:
        clauses.append("id > %(cursor)s")
        params["cursor"] = cursor
    if flagged_by is not None:
        clauses.append("provenance ? %(flag)s")
        params["flag"] = flagged_by
    if key is not None:
        clauses.append("key = %(key)s")
        params["key"] = key
    return conn.execute(
        f"SELECT {COLUMNS} FROM memories WHERE {' AND '.join(clauses)} "
        f"ORDER BY id LIMIT %(limit)s", params).fetchall()


def using_nodes(conn: Conn, tenant: str, nodes: Sequence[str], scope: str,
                subject: str | None = None) -> list[uuid.UUID]:
    """Ids of the memories of ``scope`` (and ``subject`` when given) that support any of
    the graph ``nodes`` (e.g. use a vault placeholder), in id order."""
    rows = conn.execute(
        "SELECT DISTINCT s.memory_id FROM graph_node_support s JOIN memories m "
        "ON m.tenant_id = s.tenant_id AND m.id = s.memory_id "
        "WHERE s.tenant_id = %s AND s.node_id = ANY(%s) AND m.scope = %s "
        "AND (%s::text IS NULL OR m.subject_id = %s) ORDER BY s.memory_id",
        (tenant, list(nodes), scope, subject, subject)).fetchall()
    return [r["memory_id"] for r in rows]


# -- wake and timeline ---------------------------------------------------------------------
def _subject_scope(tenant: str, scope: str, subject: str | None, *,
                   with_archived: bool = False) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"tenant": tenant}
    where = ("tenant_id = %(tenant)s AND status = 'active'"
             + ("" if with_archived else " AND NOT archived")
             + _limits(params, scope, subject))
    return where, params


def wake_candidates(conn: Conn, tenant: str, scope: str, subject: str | None,
                    limit: int) -> dict[str, list[dict[str, Any]]]:
    """For the waking state of ``subject`` in ``scope`` (live, unarchived memories): up to
    ``limit`` rows each of ``pinned`` (newest first), ``facts`` (most used first) and
    ``recent`` (newest first)."""
    where, params = _subject_scope(tenant, scope, subject)
    params["limit"] = limit
    order = {"pinned": ("pinned", "created_at DESC, id DESC"),
             "facts": ("type = 'fact'", "access_count DESC, created_at DESC, id DESC"),
             "recent": ("true", "created_at DESC, id DESC")}
    return {name: conn.execute(
        f"SELECT {COLUMNS} FROM memories WHERE {where} AND {cond} ORDER BY {by} "
        "LIMIT %(limit)s", params).fetchall() for name, (cond, by) in order.items()}


def timeline(conn: Conn, tenant: str, *, scope: str, subject: str | None,
             since: datetime | None, until: datetime | None,
             after: tuple[datetime, uuid.UUID] | None, limit: int) -> list[dict[str, Any]]:
    """Live memories of ``scope`` (and ``subject``) created in ``[since, until)``, oldest
    first by (created_at, id), after the keyset position ``after``; at most ``limit``."""
    where, params = _subject_scope(tenant, scope, subject, with_archived=True)  # archived
    params["limit"] = limit
    if since is not None:
        where += " AND created_at >= %(since)s"
        params["since"] = since
    if until is not None:
        where += " AND created_at < %(until)s"
        params["until"] = until
    if after is not None:
        where += " AND (created_at, id) > (%(at)s, %(aid)s)"
        params["at"], params["aid"] = after
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE {where} "
                        "ORDER BY created_at, id LIMIT %(limit)s", params).fetchall()


# -- pin -----------------------------------------------------------------------------------
def set_pinned(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], pinned: bool,
               scope: str | None, subject: str | None = None) -> list[uuid.UUID]:
    """Pin (and un-archive) or unpin ``ids`` (limited to ``scope`` and ``subject`` when
    given); the ids changed, sorted."""
    params: dict[str, Any] = {"ids": list(ids), "pinned": pinned, "tenant": tenant}
    clause = _limits(params, scope, subject)
    rows = conn.execute(
        "UPDATE memories SET pinned = %(pinned)s, updated_at = now(), "
        "archived = CASE WHEN %(pinned)s THEN false ELSE archived END "
        f"WHERE tenant_id = %(tenant)s AND id = ANY(%(ids)s){clause} RETURNING id",
        params).fetchall()
    return sorted(r["id"] for r in rows)


# -- forget walk ---------------------------------------------------------------------------
_VERSIONS_SQL = """
SELECT m.id FROM memories m WHERE m.tenant_id = %(t)s AND m.parent_id = ANY(%(f)s)
UNION
SELECT p.id FROM memories m JOIN memories p ON p.tenant_id = m.tenant_id AND p.id = m.parent_id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s)
UNION
SELECT o.id FROM memories m JOIN memories o
  ON o.tenant_id = m.tenant_id AND o.scope = m.scope AND o.key = m.key
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s) AND m.key IS NOT NULL
"""
# The same walk kept inside one subject (an erase BY SUBJECT, issue 10 defect "Bob's memory
# became a version of Ada's"): ``key`` is unique per scope, not per subject, so a later
# write of another subject with the same key supersedes the row and links to it by
# ``parent_id``; a subject's erase must not follow that link into another subject's rows.
_SAME_SUBJECT_VERSIONS_SQL = """
SELECT m.id FROM memories m JOIN memories p ON p.tenant_id = m.tenant_id AND p.id = ANY(%(f)s)
WHERE m.tenant_id = %(t)s AND m.parent_id = p.id
  AND m.subject_id IS NOT DISTINCT FROM p.subject_id
UNION
SELECT p.id FROM memories m JOIN memories p ON p.tenant_id = m.tenant_id AND p.id = m.parent_id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s) AND p.subject_id IS NOT DISTINCT FROM m.subject_id
UNION
SELECT o.id FROM memories m JOIN memories o
  ON o.tenant_id = m.tenant_id AND o.scope = m.scope AND o.key = m.key
  AND o.subject_id IS NOT DISTINCT FROM m.subject_id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s) AND m.key IS NOT NULL
"""
_DERIVED_SQL = ("SELECT l.memory_id AS id FROM memory_lineage l WHERE l.tenant_id = %(t)s "
                "AND l.source_id = ANY(%(f)s)")


def _closure(conn: Conn, tenant: str, start: set[uuid.UUID], sql: str) -> set[uuid.UUID]:
    """Everything reachable from ``start`` through ``sql`` (which maps ``%(f)s`` to ids,
    ``%(t)s`` to the tenant)."""
    seen = set(start)
    frontier = sorted(start)
    while frontier:
        rows = conn.execute(sql, {"f": frontier, "t": tenant}).fetchall()
        new = {r["id"] for r in rows} - seen
        seen |= new
        frontier = sorted(new)
    return seen


def existing(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], *, scope: str | None,
             lock: bool, subject: str | None = None) -> set[uuid.UUID]:
    """Which of ``ids`` exist (in ``scope`` and of ``subject`` when given), locked ``FOR
    UPDATE`` with ``lock``."""
    params: dict[str, Any] = {"ids": list(ids), "tenant": tenant}
    scope_clause = _limits(params, scope, subject)
    return {r["id"] for r in conn.execute(
        f"SELECT id FROM memories WHERE tenant_id = %(tenant)s AND id = ANY(%(ids)s)"
        f"{scope_clause} ORDER BY id" + (" FOR UPDATE" if lock else ""), params).fetchall()}


def lock(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """Lock ``ids`` ``FOR UPDATE``, in id order (a fixed order avoids deadlocks)."""
    conn.execute("SELECT id FROM memories WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id "
                 "FOR UPDATE", (tenant, sorted(ids)))


def versions_closure(conn: Conn, tenant: str, start: set[uuid.UUID], *,
                     same_subject: bool = False) -> set[uuid.UUID]:
    """``start`` with every version of each (by ``parent_id`` and by scope and key); with
    ``same_subject`` only versions of the same subject as the row they link to (an erase
    by subject: never another subject's versions)."""
    return _closure(conn, tenant, start,
                    _SAME_SUBJECT_VERSIONS_SQL if same_subject else _VERSIONS_SQL)


def versions_and_derived_closure(conn: Conn, tenant: str, start: set[uuid.UUID], *,
                                 same_subject: bool = False) -> set[uuid.UUID]:
    """``start`` with, transitively, every version (``same_subject``: as in
    :func:`versions_closure`) and every memory derived through ``memory_lineage``."""
    versions = _SAME_SUBJECT_VERSIONS_SQL if same_subject else _VERSIONS_SQL
    return _closure(conn, tenant, start, f"{versions} UNION {_DERIVED_SQL}")


def preview_rows(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """``id``, ``scope``, ``subject_id``, ``type``, ``archived``, ``status``, ``created_at``
    and ``content``
    (at most 1000 characters) of ``ids``, in id order."""
    return conn.execute(
        "SELECT id, scope, subject_id, type, archived, status, created_at, "
        "left(content, 1000) AS content "
        "FROM memories WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id",
        (tenant, list(ids))).fetchall()


def delete(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """Delete the rows of ``ids`` (the forget path's step; never call it alone)."""
    conn.execute("DELETE FROM memories WHERE tenant_id = %s AND id = ANY(%s)",
                 (tenant, list(ids)))


# -- retention -----------------------------------------------------------------------------
# The retention score of :func:`mnemovault.governance.retention.score` in SQL (the job must
# not fetch every row to score it in Python). Parameters: now, half_life, w_r, w_a, sat.
_IDLE_DAYS = ("(extract(epoch FROM (%(now)s::timestamptz - coalesce(last_accessed_at, "
              "created_at))) / 86400.0)")
# Total over every stored timestamp: the exponent is clamped at -1000 (2^-1000 ~ 1e-301, a
# normal float8), so a memory idle for centuries scores ~0 instead of raising "value out of
# range: underflow"; the arithmetic is float8 throughout.
_SCORE_SQL = (f"power(2.0::float8, greatest(-1000.0::float8, -greatest({_IDLE_DAYS}, 0)::float8 "
              "/ %(half_life)s::float8)) * (%(w_r)s::float8 + %(w_a)s::float8 * "
              "least(1.0::float8, ln(1 + greatest(access_count, 0)::float8) "
              "/ ln(1 + %(sat)s::float8)))")


def retention_scores(conn: Conn, tenant: str, ids: Sequence[uuid.UUID],
                     params: dict[str, Any]) -> list[dict[str, Any]]:
    """``id``, ``pinned`` and ``score`` of ``ids`` (``params``: the score's parameters)."""
    return conn.execute(
        f"SELECT id, pinned, {_SCORE_SQL} AS score FROM memories "
        "WHERE tenant_id = %(tenant)s AND id = ANY(%(ids)s)",
        {**params, "ids": list(ids), "tenant": tenant}).fetchall()


def archive_below(conn: Conn, tenant: str, params: dict[str, Any], *,
                  dry_run: bool) -> list[uuid.UUID]:
    """Archive (with ``dry_run`` only list) the active, unpinned, unarchived memories idle
    ``min_idle`` days or more whose score is below ``below``; their ids, sorted."""
    where = (f"tenant_id = %(tenant)s AND NOT pinned AND NOT archived AND status = 'active' "
             f"AND {_IDLE_DAYS} >= %(min_idle)s AND {_SCORE_SQL} < %(below)s")
    if dry_run:
        sql = f"SELECT id FROM memories WHERE {where}"
    else:
        sql = (f"UPDATE memories SET archived = true, updated_at = %(now)s "
               f"WHERE {where} RETURNING id")
    return sorted(r["id"] for r in conn.execute(sql, {**params, "tenant": tenant}).fetchall())


def idle_unpinned(conn: Conn, tenant: str, now: datetime, days: float) -> list[uuid.UUID]:
    """Unpinned memories idle ``days`` or more at ``now``, in id order."""
    rows = conn.execute(
        f"SELECT id FROM memories WHERE tenant_id = %(tenant)s AND NOT pinned "
        f"AND {_IDLE_DAYS} >= %(days)s ORDER BY id",
        {"now": now, "days": days, "tenant": tenant}).fetchall()
    return [r["id"] for r in rows]
