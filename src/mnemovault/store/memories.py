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

from mnemovault.store import lexstats

COLUMNS = (
    "id, scope, subject_id, type, content, key, pinned, archived, status, created_at, "
    "updated_at, last_accessed_at, access_count, provenance, parent_id, version, key_id, "
    "content_sealed, key_sealed, provenance_sealed, valid_from, valid_to"
)
"""The columns a :class:`~mnemovault.models.Memory` is built from (never the embedding).
``content_sealed`` under ``key_id`` is opened into ``content`` by the connection's row
factory (:meth:`mnemovault.store.db.Database._row_factory`), so every reader gets the
text, or ``[erased]`` when its key was destroyed; ``key`` likewise from ``key_sealed`` (the
stored ``key`` column, a keyed hash, stays in ``key_hash``), and the writer's
``provenance`` from ``provenance_sealed`` (:func:`mnemovault.pii.sealing.split_provenance`)."""

INSERT_COLUMNS = ("tenant_id, id, scope, subject_id, type, content, key, embedding, "
                  "created_at, updated_at, provenance, parent_id, version, tsv, tsv_length, "
                  "key_id, content_sealed, key_sealed, provenance_sealed, valid_from, "
                  "valid_to")
INSERT_ROW = "(" + ", ".join(["%s"] * 13 + ["%s::tsvector"] + ["%s"] * 7) + ")"
_ROW = INSERT_ROW

# The plaintext column of a sealed row is written empty: the lexical index reads keyed terms
# the application computes (migration 0014_hashed_terms), never the column. (True: written
# in clear too; only the bench's baseline sets it.)
KEEP_PLAINTEXT = False


def stored_plaintext(content: str) -> str:
    """What the plaintext ``content`` column receives for a sealed row."""
    return content if KEEP_PLAINTEXT else ""

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
def supersede_version(conn: Conn, tenant: str, memory_id: uuid.UUID, *,
                      valid_to: datetime, now: datetime) -> bool:
    """Mark version ``memory_id`` superseded, its valid time ending at ``valid_to`` (where
    its successor's begins: never before its own start); whether it was live."""
    row = conn.execute(
        "UPDATE memories SET status = 'superseded', updated_at = %s, "
        "valid_to = greatest(valid_from, %s) WHERE tenant_id = %s AND id = %s "
        "AND status <> 'superseded' RETURNING id", (now, valid_to, tenant, memory_id)).fetchone()
    return row is not None


def set_valid_to(conn: Conn, tenant: str, memory_id: uuid.UUID, valid_to: datetime | None,
                 now: datetime) -> None:
    """End (or, with None, reopen) the valid time of ``memory_id`` at ``valid_to``."""
    conn.execute("UPDATE memories SET valid_to = %s, updated_at = %s WHERE tenant_id = %s "
                 "AND id = %s", (valid_to, now, tenant, memory_id))


def key_timeline(conn: Conn, tenant: str, scope: str, key: str, *,
                 exclude: uuid.UUID | None = None) -> list[dict[str, Any]]:
    """The versions of ``key`` (its stored hash) in ``scope`` that hold a stretch of its
    timeline: ``active`` or ``superseded`` with a non-empty ``[valid_from, valid_to)``
    (displaced and rejected proposals hold none), locked ``FOR UPDATE``, by
    (valid_from, version). Each row: ``id``, ``version``, ``status``, ``valid_from``,
    ``valid_to``. ``exclude``: a row left out (the version being placed)."""
    return conn.execute(
        "SELECT id, version, status, valid_from, valid_to FROM memories "
        "WHERE tenant_id = %s AND scope = %s AND key = %s "
        "AND status IN ('active', 'superseded') AND valid_from IS NOT NULL "
        "AND (valid_to IS NULL OR valid_to > valid_from) AND id IS DISTINCT FROM %s "
        "ORDER BY valid_from, version FOR UPDATE",
        (tenant, scope, key, exclude)).fetchall()


def insert(conn: Conn, rows: Sequence[tuple[Any, ...]], *, status: str = "active") -> None:
    """Insert memories with ``status`` (``active``; ``superseded`` for a historical
    version). Each row: (tenant_id, id, scope, subject_id, type, content, key, embedding,
    created_at, updated_at, provenance (Jsonb), parent_id, version, tsv, tsv_length,
    key_id, content_sealed, key_sealed, provenance_sealed, valid_from, valid_to)
    (:data:`INSERT_COLUMNS`):
    tsv and tsv_length the keyed terms of the content
    (:func:`mnemovault.recall.terms.document`)."""
    if not rows:
        return
    if status not in ("active", "superseded"):
        raise ValueError("status: active or superseded")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO memories ({INSERT_COLUMNS}, status) "
                        f"VALUES {_ROW[:-1]}, '{status}')", rows)
    _note_writes(rows, len(rows))  # one statement a row, each with its own deltas


_ROWS_PER_STATEMENT = 1000  # 21 parameters a row: far below PostgreSQL's 65,535


def insert_many(conn: Conn, rows: Sequence[tuple[Any, ...]]) -> None:
    """:func:`insert` in one multi-row ``INSERT`` per 1,000 rows (rows as there), so the
    statement-level triggers on ``memories`` (the lexical statistics) run once for the
    batch instead of once a row."""
    for i in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[i: i + _ROWS_PER_STATEMENT]
        values = ", ".join([_ROW] * len(chunk))
        conn.execute(f"INSERT INTO memories ({INSERT_COLUMNS}) VALUES " + values,
                     [v for row in chunk for v in row])
    _note_writes(rows, -(-len(rows) // _ROWS_PER_STATEMENT))


def _note_writes(rows: Sequence[tuple[Any, ...]], statements: int) -> None:
    """Count the statistics' deltas these inserts appended, by tenant (the rows' first
    column), towards the next fold (:func:`mnemovault.store.lexstats.note_writes`)."""
    by_tenant: dict[str, int] = {}
    for row in rows:
        by_tenant[row[0]] = by_tenant.get(row[0], 0) + 1
    for tenant, n in by_tenant.items():  # (one tenant in practice)
        lexstats.note_writes(tenant, min(statements, n), n)


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


TOUCH_WAIT = "100ms"
"""How long recall's access count waits for a row another transaction holds (a forget,
supersede or archive of it under way) before it records the access for later instead."""


def touch(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """Count one access of each of ``ids`` (recall's statistics, read by retention and
    wake). Meant for a short transaction of its own after the read: the rows are locked in
    id order (concurrent touches of the same rows queue for microseconds, never deadlock).
    A recall never queues behind a writer (issue 29): when a row stays locked longer than
    :data:`TOUCH_WAIT` (a forget, supersede or archive of it is under way), the accesses
    go to ``memory_accesses`` instead, an append-only table that :func:`fold_accesses`
    counts into the rows later (after writes, and before the retention job scores). The
    commit does not wait for the WAL flush (``synchronous_commit = off``: a crash may lose
    the last few accesses, never a governed change)."""
    conn.execute("SET LOCAL synchronous_commit = off")
    try:
        with conn.transaction():  # a savepoint: a timeout undoes the update only
            conn.execute(f"SET LOCAL lock_timeout = '{TOUCH_WAIT}'")
            conn.execute(
                "UPDATE memories m SET access_count = m.access_count + 1, "
                "last_accessed_at = now() FROM (SELECT id FROM memories WHERE tenant_id = "
                "%(t)s AND id = ANY(%(ids)s) ORDER BY id FOR UPDATE) l "
                "WHERE m.tenant_id = %(t)s AND m.id = l.id", {"t": tenant, "ids": list(ids)})
    except psycopg.errors.LockNotAvailable:
        _pending(conn, tenant, [(i, 1, None) for i in ids])


def _pending(conn: Conn, tenant: str, rows: Sequence[tuple[uuid.UUID, int, Any]]) -> None:
    """Append accesses (id, count, time or None for now) to ``memory_accesses``."""
    if not rows:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO memory_accesses (tenant_id, memory_id, n, at) "
            "VALUES (%s, %s, %s, coalesce(%s, now()))",
            [(tenant, i, n, at) for i, n, at in rows])


def fold_accesses(conn: Conn, tenant: str) -> int:
    """Count the accesses waiting in ``memory_accesses`` into their memories (one short
    transaction of the caller's): the rows no one else holds are updated, the others'
    accesses stay for the next fold, those of memories gone are dropped. How many were
    counted."""
    taken = conn.execute("DELETE FROM memory_accesses WHERE tenant_id = %s "
                         "RETURNING memory_id, n, at", (tenant,)).fetchall()
    if not taken:
        return 0
    agg: dict[uuid.UUID, tuple[int, Any]] = {}
    for r in taken:
        n, at = agg.get(r["memory_id"], (0, r["at"]))
        agg[r["memory_id"]] = (n + int(r["n"]), max(at, r["at"]))
    locked = {r["id"] for r in conn.execute(
        "SELECT id FROM memories WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id "
        "FOR UPDATE SKIP LOCKED", (tenant, sorted(agg))).fetchall()}
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE memories SET access_count = access_count + %s, last_accessed_at = "
            "greatest(coalesce(last_accessed_at, %s), %s) WHERE tenant_id = %s AND id = %s",
            [(agg[i][0], agg[i][1], agg[i][1], tenant, i) for i in sorted(locked)])
    rest = sorted(set(agg) - locked)
    if rest:  # held by someone: kept for later if the memory is still there
        alive = {r["id"] for r in conn.execute(
            "SELECT id FROM memories WHERE tenant_id = %s AND id = ANY(%s)",
            (tenant, rest)).fetchall()}
        _pending(conn, tenant, [(i, *agg[i]) for i in rest if i in alive])
    return sum(agg[i][0] for i in locked)


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
    rows = conn.execute(
        "SELECT id, scope, subject_id, type, archived, status, created_at, "
        "content, key_id, content_sealed "
        "FROM memories WHERE tenant_id = %s AND id = ANY(%s) ORDER BY id",
        (tenant, list(ids))).fetchall()
    for r in rows:
        r["content"] = r["content"][:1000]
        r.pop("key_id", None)
    return rows


def under_keys(conn: Conn, tenant: str, key_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Ids of the memories sealed under any of ``key_ids``, in id order."""
    if not key_ids:
        return []
    rows = conn.execute("SELECT id FROM memories WHERE tenant_id = %s AND key_id = ANY(%s) "
                        "ORDER BY id", (tenant, list(key_ids))).fetchall()
    return [r["id"] for r in rows]


def unsealed(conn: Conn, tenant: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows not sealed whole yet, locked, in id order: written before
    sealing (``key_id`` NULL: ``content``, ``key`` and ``provenance`` in clear), or before
    migration 0017 (``provenance_sealed`` NULL: ``content`` and ``key`` come opened, and
    ``erased`` is set when their key was destroyed). ``id``, ``scope``, ``subject_id``,
    ``content``, ``key``, ``provenance``, ``key_id``."""
    return conn.execute(
        "SELECT id, scope, subject_id, content, key, provenance, key_id, content_sealed, "
        "key_sealed FROM memories WHERE tenant_id = %s AND provenance_sealed IS NULL "
        "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
        (tenant, limit)).fetchall()


def set_sealed(conn: Conn, tenant: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Seal rows in place: each (id, key_id, content_sealed, plaintext column, stored key,
    key_sealed, clear provenance (Jsonb), provenance_sealed)."""
    with conn.cursor() as cur:
        cur.executemany("UPDATE memories SET key_id = %s, content_sealed = %s, content = %s, "
                        "key = %s, key_sealed = %s, provenance = %s, provenance_sealed = %s "
                        "WHERE tenant_id = %s AND id = %s",
                        [(k, blob, plain, skey, kblob, prov, psealed, tenant, i)
                         for i, k, blob, plain, skey, kblob, prov, psealed in rows])


def set_sealed_provenance(conn: Conn, tenant: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Seal the provenance of rows whose content is sealed already: each (id, clear
    provenance (Jsonb), provenance_sealed)."""
    with conn.cursor() as cur:
        cur.executemany("UPDATE memories SET provenance = %s, provenance_sealed = %s "
                        "WHERE tenant_id = %s AND id = %s",
                        [(prov, psealed, tenant, i) for i, prov, psealed in rows])


def delete(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """Delete the rows of ``ids`` (the forget path's step; never call it alone)."""
    conn.execute("DELETE FROM memories WHERE tenant_id = %s AND id = ANY(%s)",
                 (tenant, list(ids)))


def source_ids(conn: Conn, tenant: str, scopes: Sequence[str], *, visible: str,
               params: dict[str, Any]) -> dict[str, set[str]]:
    """The ``provenance.source_id`` values stored in each of ``scopes`` among the rows that
    satisfy ``visible`` (a view's condition, :meth:`mnemovault.visibility.View.clause`,
    its parameters in ``params``): what an import has stored already (it skips those).
    The clear column holds each one's keyed hash: one row per distinct hash is opened
    (its sealed provenance), a row under a destroyed key gives none."""
    out: dict[str, set[str]] = {s: set() for s in scopes}
    for r in conn.execute(
            "SELECT DISTINCT ON (scope, provenance->>'source_id') id, scope, key_id, "
            "provenance, provenance_sealed FROM memories "
            "WHERE tenant_id = %(tenant)s AND scope = ANY(%(scopes)s) "
            f"AND provenance ? 'source_id'{visible}",
            {**params, "tenant": tenant, "scopes": list(scopes)}).fetchall():
        sid = (r["provenance"] or {}).get("source_id")
        if sid is not None:
            out[r["scope"]].add(str(sid))
    return out


# -- retention -----------------------------------------------------------------------------
# The retention score of :func:`mnemovault.governance.retention.score` in SQL (the job must
# not fetch every row to score it in Python). Parameters: now, half_life, w_r, w_a, sat.
# Idle since the last access, else since the later of the record's own time and when it was
# stored (the UUIDv7 id's milliseconds, mnemovault.ids): an import of last spring's
# conversation is not idle for months the moment it lands (issue 28 item 7).
_STORED_AT = ("to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)"
              "::bigint / 1000.0)")
_IDLE_DAYS = ("(extract(epoch FROM (%(now)s::timestamptz - coalesce(last_accessed_at, "
              f"greatest(created_at, {_STORED_AT})))) / 86400.0)")
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
