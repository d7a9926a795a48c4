"""SQL of subject rights (SPEC section 10): the memories of an erase target, the advisory
locks that make a write and an erase of the same subject conflict, the rows of a subject
listing or export, and the in-place content replacement of a rectification.

Tables read or written: ``memories`` (and ``memory_lineage`` for an export's lineage).
Every function runs in the caller's transaction, tenant set for row-level security, and
names the tenant in its statements too (``tenant_id = ...``: on Citus, one shard).

Lock protocol (:func:`lock_for_write`, :func:`lock_for_erase`): transaction-level advisory
locks on a 64-bit key per (tenant, scope, subject) and per (tenant, scope) as a whole. A
write takes the shared lock of each (scope, subject) it writes and of each scope; an erase
of a subject takes the exclusive lock of its (scope, subject), an erase of a scope the
exclusive lock of the scope. A write's acquisition is a *try*: a write that finds an erase
holding (or waiting for) its subject fails with :class:`~mnemovault.errors.Conflict` at
once instead of waiting (so a write never slips in after an erase resolved its rows).
An erase waits for its lock up to a bounded time (``MNEMOVAULT_ERASE_LOCK_TIMEOUT_SECONDS``,
PostgreSQL's ``lock_timeout`` for that one statement) and fails with Conflict only after
it: PostgreSQL queues a lock request behind a waiting one that conflicts with it, so while
the erase waits, new writes of the subject fail their try and the erase gets the lock as
soon as the writes already under way commit (an erase no longer loses to a stream of
writes). Writes share the locks, so writes never conflict with each other here. All of a
write's keys are tried in one statement.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.errors import Conflict
from mnemovault.store.memories import COLUMNS, stored_plaintext

Conn = psycopg.Connection[Any]

_WHOLE_SCOPE = "\x00*"  # cannot be a subject: subjects have no control characters


def lock_key(tenant: str, scope: str, subject: str | None) -> int:
    """The advisory lock key of (tenant, scope, subject) (``subject`` None: the whole
    scope): the first 8 bytes of SHA-256 of the three, as a signed 64-bit integer."""
    parts = (tenant, scope, _WHOLE_SCOPE if subject is None else subject)
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _try(conn: Conn, keys: Collection[int], *, shared: bool) -> bool:
    """Try every lock of ``keys`` in one statement (a try never waits, so the order does
    not matter for deadlocks); whether all were granted (the caller fails otherwise, and
    its rollback releases those that were)."""
    fn = "pg_try_advisory_xact_lock_shared" if shared else "pg_try_advisory_xact_lock"
    if not keys:
        return True
    row = conn.execute(f"SELECT bool_and({fn}(k)) AS ok FROM unnest(%s::bigint[]) AS k",
                       (sorted(set(keys)),)).fetchone()
    return bool(row and row["ok"])


def lock_for_write(conn: Conn, tenant: str, pairs: Iterable[tuple[str, str | None]]) -> None:
    """Take the shared locks of a write of (scope, subject) ``pairs`` (as stored) until the
    transaction ends.

    Raises:
        Conflict: an erase of one of these subjects or scopes is under way; nothing was
            stored and retrying (after it) is safe.
    """
    keys: set[int] = set()
    for scope, subject in pairs:
        keys.add(lock_key(tenant, scope, None))
        if subject is not None:
            keys.add(lock_key(tenant, scope, subject))
    if not _try(conn, keys, shared=True):
        raise Conflict("subject: an erase of this subject or scope is under way; nothing "
                       "was stored and retrying is safe", field="subject")


def lock_for_erase(conn: Conn, tenant: str, scope: str, subject: str | None, *,
                   timeout: float = 0.0) -> None:
    """Take the exclusive lock of an erase of ``subject`` in ``scope`` (None: the whole
    scope) until the transaction ends, waiting up to ``timeout`` seconds for the writes
    holding it (0: fail at once). The wait runs in a savepoint with ``lock_timeout`` set
    for it alone, so the erase's later statements keep the ``lock_timeout`` they had.

    Raises:
        Conflict: writes for this subject (or scope) still held it after ``timeout``;
            nothing was erased and retrying is safe.
    """
    key = lock_key(tenant, scope, subject)
    if timeout <= 0:
        granted = _try(conn, [key], shared=False)
    else:
        granted = True
        row = conn.execute("SELECT current_setting('lock_timeout') AS t").fetchone()
        before = str(row["t"]) if row else "0"
        try:
            with conn.transaction():  # a savepoint: a timeout rolls back to it
                conn.execute("SELECT set_config('lock_timeout', %s, true), "
                             "pg_advisory_xact_lock(%s)",
                             (f"{max(1, round(timeout * 1000))}ms", key))
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (before,))
        except psycopg.errors.LockNotAvailable:
            granted = False
    if not granted:
        raise Conflict("subject: writes for this subject or scope kept it busy; nothing "
                       "was erased and retrying is safe", field="subject")


def target_ids(conn: Conn, tenant: str, scope: str, subject: str | None, *,
               lock: bool = False) -> list[uuid.UUID]:
    """Ids of every memory of ``subject`` in ``scope`` (None: every memory of the scope),
    any status, in id order; locked ``FOR UPDATE`` with ``lock``."""
    sql = "SELECT id FROM memories WHERE tenant_id = %s AND scope = %s"
    params: tuple[str, ...] = (tenant, scope)
    if subject is not None:
        sql, params = sql + " AND subject_id = %s", (tenant, scope, subject)
    rows = conn.execute(sql + " ORDER BY id" + (" FOR UPDATE" if lock else ""),
                        params).fetchall()
    return [r["id"] for r in rows]


def rows(conn: Conn, tenant: str, ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """The rows of ``ids`` (:data:`~mnemovault.store.memories.COLUMNS`: never the
    embedding), in id order."""
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s "
                        "AND id = ANY(%s) ORDER BY id", (tenant, list(ids))).fetchall()


def lineage_sources(conn: Conn, tenant: str,
                    ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[uuid.UUID]]:
    """``{memory id: [source ids, sorted]}`` for those of ``ids`` derived from others."""
    out: dict[uuid.UUID, list[uuid.UUID]] = {}
    for r in conn.execute("SELECT memory_id, source_id FROM memory_lineage "
                          "WHERE tenant_id = %s AND memory_id = ANY(%s) "
                          "ORDER BY memory_id, source_id", (tenant, list(ids))).fetchall():
        out.setdefault(r["memory_id"], []).append(r["source_id"])
    return out


def lock_memory(conn: Conn, tenant: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    """One memory row (:data:`~mnemovault.store.memories.COLUMNS`) locked ``FOR UPDATE``,
    or None."""
    return conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s AND id = %s "
                        "FOR UPDATE", (tenant, memory_id)).fetchone()


def replace_content(conn: Conn, tenant: str, memory_id: uuid.UUID, content: str,
                    embedding: Any, now: datetime, *, terms: tuple[str, int],
                    key_id: uuid.UUID, sealed: bytes,
                    flags: list[str] | None = None, restart: bool = False) -> dict[str, Any]:
    """Replace a memory's content, its keyed terms (``terms``: tsv, tsv_length) and its
    embedding in place (a rectification): the version
    goes up by one, ``updated_at`` is ``now``; ``flags`` (not None) sets the injection
    sanitiser's label (``provenance.injection_flags``); ``restart``: its valid time starts
    again at ``now`` (the corrected version holds from the correction). The new row
    (COLUMNS)."""
    valid = ", valid_from = %(now)s, valid_to = NULL" if restart else ""
    # decided here, not in SQL: Citus refuses a CASE holding a non-immutable function in
    # an UPDATE of a distributed table
    label = ("" if flags is None else
             ", provenance = coalesce(provenance, '{}'::jsonb) || %(label)s")
    row = conn.execute(
        f"UPDATE memories SET content = %(content)s, embedding = %(emb)s, "
        f"key_id = %(kid)s, content_sealed = %(sealed)s, "
        f"tsv = %(tsv)s::tsvector, tsv_length = %(tsvlen)s, terms_keyed = true, "
        f"version = version + 1, updated_at = %(now)s{label}{valid} "
        f"WHERE tenant_id = %(t)s AND id = %(id)s RETURNING {COLUMNS}",
        {"content": stored_plaintext(content), "emb": embedding, "now": now, "t": tenant,
         "id": memory_id, "kid": key_id, "sealed": sealed,
         "tsv": terms[0], "tsvlen": terms[1],
         "label": Jsonb({"injection_flags": flags})}).fetchone()
    assert row is not None
    return row


def vault_entries(conn: Conn, tenant: str, placeholders: Sequence[str]) -> list[dict[str, Any]]:
    """``placeholder``, ``kind``, ``created_at``, ``shredded_at`` of the vault entries among
    ``placeholders`` (read from ``pii_values``; metadata only), by placeholder."""
    return conn.execute(
        "SELECT placeholder, kind, created_at, shredded_at FROM pii_values "
        "WHERE tenant_id = %s AND placeholder = ANY(%s) ORDER BY placeholder",
        (tenant, list(placeholders))).fetchall()


def _target_where(alias: str, subject: str | None) -> str:
    where = f"{alias}.tenant_id = %(tenant)s AND {alias}.scope = %(scope)s"
    if subject is not None:
        where += f" AND {alias}.subject_id = %(subject)s"
    return where


def neighbours(conn: Conn, tenant: str, scope: str,
               subject: str | None) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """The memories outside the target (every memory of ``subject`` in ``scope``; with
    ``subject`` None the whole scope) one link away from it, in one statement run in the
    server: (other versions of a target memory: same scope and key, or parent/child by
    ``parent_id``; memories derived from a target memory through ``memory_lineage``).
    The forget walk's first step out of the target, without sending its ids anywhere.

    With a ``subject``, a version link is followed only to a row of the same subject (the
    ``key`` is unique per scope, so another subject's later write of the same key is a
    version of the subject's row by ``parent_id``: it is not the subject's to erase)."""
    params: dict[str, Any] = {"scope": scope, "subject": subject, "tenant": tenant}
    t = _target_where("m", subject)
    same = " AND o.subject_id = %(subject)s" if subject is not None else ""
    rows = conn.execute(
        f"WITH d AS MATERIALIZED (SELECT m.id, m.parent_id, m.key FROM memories m WHERE {t}) "
        "SELECT x.id, x.link FROM ("
        "  SELECT o.id, 'version' AS link FROM d JOIN memories o "
        f"    ON o.tenant_id = %(tenant)s AND o.scope = %(scope)s AND o.key = d.key{same} "
        "    WHERE d.key IS NOT NULL"
        "  UNION SELECT o.id, 'version' FROM d JOIN memories o "
        f"    ON o.tenant_id = %(tenant)s AND o.id = d.parent_id{same}"
        "  UNION SELECT o.id, 'version' FROM d JOIN memories o "
        f"    ON o.tenant_id = %(tenant)s AND o.parent_id = d.id{same}"
        "  UNION SELECT l.memory_id, 'derived' FROM d JOIN memory_lineage l "
        "    ON l.tenant_id = %(tenant)s AND l.source_id = d.id"
        ") x WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.id = x.id)", params).fetchall()
    versions = {r["id"] for r in rows if r["link"] == "version"}
    return versions, {r["id"] for r in rows if r["link"] == "derived"} - versions


def in_target(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], scope: str,
              subject: str | None) -> set[uuid.UUID]:
    """Those of ``ids`` that belong to the target themselves."""
    if not ids:
        return set()
    params: dict[str, Any] = {"scope": scope, "subject": subject, "ids": list(ids),
                              "tenant": tenant}
    return {r["id"] for r in conn.execute(
        f"SELECT m.id FROM memories m WHERE m.id = ANY(%(ids)s) AND "
        f"{_target_where('m', subject)}", params).fetchall()}


def target_page(conn: Conn, tenant: str, scope: str, subject: str | None,
                after: uuid.UUID | None, limit: int) -> list[uuid.UUID]:
    """Up to ``limit`` ids of the target's own memories after ``after``, in id order (the
    ``memories_scope_subject`` index)."""
    params: dict[str, Any] = {"scope": scope, "subject": subject, "limit": limit,
                              "after": after, "tenant": tenant}
    cond = " AND m.id > %(after)s" if after is not None else ""
    return [r["id"] for r in conn.execute(
        f"SELECT m.id FROM memories m WHERE {_target_where('m', subject)}{cond} "
        "ORDER BY m.id LIMIT %(limit)s", params).fetchall()]


# -- the keyset listing's extras (issue 10: one page costs O(page), not O(subject)) ----------
WINDOW_CAP = 5000
"""At most this many memories outside the target are examined in one page's id window;
past it :func:`extras_in_window` gives up (None) and the caller walks from the target."""

# Links into a memory, walked backwards: its lineage sources, and its versions (symmetric:
# children by parent_id, the parent, same scope and key); with %(same)s only versions of
# the same subject (an erase by subject). Rows: (id: the memory, src: the linked one).
_INTO_SQL = """
SELECT l.memory_id AS id, l.source_id AS src FROM memory_lineage l
WHERE l.tenant_id = %(t)s AND l.memory_id = ANY(%(f)s)
UNION
SELECT m.id, o.id FROM memories m JOIN memories o
  ON o.tenant_id = %(t)s AND o.parent_id = m.id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s)
  AND (NOT %(same)s OR o.subject_id IS NOT DISTINCT FROM m.subject_id)
UNION
SELECT m.id, o.id FROM memories m JOIN memories o
  ON o.tenant_id = %(t)s AND o.id = m.parent_id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s)
  AND (NOT %(same)s OR o.subject_id IS NOT DISTINCT FROM m.subject_id)
UNION
SELECT m.id, o.id FROM memories m JOIN memories o
  ON o.tenant_id = %(t)s AND o.scope = m.scope AND o.key = m.key AND o.id <> m.id
WHERE m.tenant_id = %(t)s AND m.id = ANY(%(f)s) AND m.key IS NOT NULL
  AND (NOT %(same)s OR o.subject_id IS NOT DISTINCT FROM m.subject_id)
"""


def extras_in_window(conn: Conn, tenant: str, scope: str, subject: str | None,
                     after: uuid.UUID | None, upper: uuid.UUID | None, *,
                     cap: int | None = None) -> list[uuid.UUID] | None:
    """The memories outside the target (every memory of ``subject`` in ``scope``; with
    ``subject`` None the whole scope) with ``after < id <= upper`` (None: unbounded) that
    an erase of the target reaches (the extras of :func:`mnemovault.governance.forget.
    extras`: versions and, transitively, derived memories), in id order; or None when the
    window holds more than ``cap`` (default :data:`WINDOW_CAP`) memories outside the target.

    Walked backwards from the window, never from the target: an extra is a memory from
    which a path of reversed links (to its lineage sources; to its versions, symmetric,
    within one subject for an erase by subject, as the forward walk) reaches a target
    memory. The walk starts at the window's memories outside the target that have a link
    at all (a key, a parent, a child, a lineage source), goes back through memories
    outside the target only, records each link, and stops at target memories; a memory of
    the window is an extra when the recorded links lead forward to it from a target memory
    reached. Cost: the window (``LIMIT cap + 1``, primary key order) and the ancestry of
    its linked memories, not the target's size."""
    cap = WINDOW_CAP if cap is None else cap
    params: dict[str, Any] = {"tenant": tenant, "scope": scope, "subject": subject,
                              "after": after, "upper": upper, "cap": cap + 1}
    cond = " AND m.id > %(after)s" if after is not None else ""
    cond += " AND m.id <= %(upper)s" if upper is not None else ""
    rows = conn.execute(
        "SELECT m.id, (m.key IS NOT NULL OR m.parent_id IS NOT NULL"
        "  OR EXISTS (SELECT 1 FROM memory_lineage l WHERE l.tenant_id = %(tenant)s"
        "             AND l.memory_id = m.id)"
        "  OR EXISTS (SELECT 1 FROM memories c WHERE c.tenant_id = %(tenant)s"
        "             AND c.parent_id = m.id)) AS linked "
        f"FROM memories m WHERE m.tenant_id = %(tenant)s{cond} AND NOT (m.scope = %(scope)s"
        + (" AND m.subject_id IS NOT DISTINCT FROM %(subject)s" if subject is not None
           else "") + ") ORDER BY m.id LIMIT %(cap)s", params).fetchall()
    if len(rows) > cap:
        return None
    window = [r["id"] for r in rows if r["linked"]]
    if not window:
        return []
    # backwards from the window, through memories outside the target
    into: dict[uuid.UUID, set[uuid.UUID]] = {}  # linked -> memories it links forward to
    seen: set[uuid.UUID] = set(window)
    reached: set[uuid.UUID] = set()  # target memories met
    frontier = sorted(window)
    while frontier:
        links = conn.execute(_INTO_SQL, {"t": tenant, "f": frontier,
                                         "same": subject is not None}).fetchall()
        new = {r["src"] for r in links} - seen
        for r in links:
            into.setdefault(r["src"], set()).add(r["id"])
        seen |= new
        own = in_target(conn, tenant, sorted(new), scope, subject)
        reached |= own
        frontier = sorted(new - own)
    # forwards from the target memories met, along the recorded links
    found: set[uuid.UUID] = set()
    todo = list(reached)
    while todo:
        for nxt in into.get(todo.pop(), ()):
            if nxt not in found and nxt not in reached:
                found.add(nxt)
                todo.append(nxt)
    return sorted(found & set(window))


def known_fingerprints(conn: Conn, tenant: str,
                       fingerprints: Collection[bytes]) -> list[dict[str, Any]]:
    """``fingerprint``, ``kind``, ``ntokens``, ``head`` of the live vault values among
    ``fingerprints`` (the ``pii_values_fingerprint`` index): the known entities a short
    name (a subject, a scope) can contain (:class:`mnemovault.pii.service.Translator`)."""
    if not fingerprints:
        return []
    return conn.execute(
        "SELECT fingerprint, kind, ntokens, head FROM pii_values "
        "WHERE tenant_id = %s AND fingerprint = ANY(%s)",
        (tenant, list(fingerprints))).fetchall()
