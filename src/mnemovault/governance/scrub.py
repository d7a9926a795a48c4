"""Scrub: make an erasure physical (issue 10, SPEC section 10's GOAL).

An erase, forget or shred removes rows logically, in one transaction; PostgreSQL keeps the
deleted bytes in the data directory until something rewrites them: table and TOAST pages,
every index (measured: a forgotten memory's lexemes stay in the GIN full-text index after a
plain ``VACUUM``), the planner statistics in ``pg_statistic`` (sample values), and the WAL
segments, which a checkpoint recycles by renaming them, old bytes inside, unless
``wal_recycle = off``. :func:`scrub` removes all of it, in this order (the SQL and what was
measured are in :mod:`mnemovault.store.maintenance`):

1. wait until no transaction older than the scrub holds a snapshot (a rewrite must copy
   every row such a transaction could still see, erased ones included);
2. per table: delete its statistics, ``VACUUM (FULL, ANALYZE)`` (a new heap and TOAST
   file with the live rows only, every index rebuilt, statistics from the live rows);
3. ``VACUUM FULL pg_statistic`` (the dead versions of the old statistics);
4. WAL: ``wal_recycle = off`` (``ALTER SYSTEM``, kept), switch segments until past every
   segment file that exists, ``CHECKPOINT`` (the old files are unlinked), then list
   ``pg_wal`` again to verify that none of them is left and nothing was recycled;
5. one ``SCRUB`` audit row in the chain of each tenant it is done for (below).

**Locking cost.** ``VACUUM FULL`` holds an ACCESS EXCLUSIVE lock on each table while it
rewrites it: every read and write of that table, for every tenant, waits until it is done
(time grows with the table's size: see ``bench/erase.py``); the rewrite needs free disk
space for a second copy of the table and its indexes; the checkpoint is a burst of writes.
Tables are done one at a time, each waiting at most ``lock_timeout`` seconds for its lock
(then :class:`~mnemovault.errors.Unavailable`: the tables before it are done, the rest is
untouched; running it again is safe). Run it after erasures that must be physically
complete, in a quiet hour, and batch erasures: one scrub covers every erasure before it.
``dry_run`` lists the tables and their sizes and what this role may do, changing nothing.

**Scope.** Tables: every table of the schema except the append-only audit tables (their
rows hold ids, counts and keyed fingerprints, never content; ``include_audit`` adds them,
e.g. after a tenant's hard delete) and ``alembic_version``; new tables are included as
they are added. Out of reach of any scrub, always listed in the report's ``outside``:
backups and dumps taken before it, a WAL archive (``archive_mode``), standbys and replicas
(each has its own data directory: scrub there too), and the storage below the files (a
rewrite truncates and unlinks files; it does not overwrite the freed disk blocks).

**Privileges.** Operator path: it runs on the owner's connection (``DATABASE_URL`` or the
embedded server's superuser). On the embedded server every step is possible. With
``DATABASE_URL`` the owner can rewrite the tables; the rest needs a superuser or grants
(:mod:`mnemovault.store.maintenance`), or the deployer sets ``wal_recycle = off`` in
``postgresql.conf``. What the role may not do is skipped and named in ``incomplete``;
``complete`` is then False.

**Interfaces.** The CLI (``mnemovault scrub``) and the library; an erase may run it
afterwards for its principal (``scrub(rt, who, tenants=[who.tenant])``, once the erase's
transaction has committed). No HTTP endpoint: one tenant's key must not be able to lock
every tenant's tables.

**Audit.** A scrub changes no row's content, and ``VACUUM`` cannot run inside a
transaction, so its audit rows are written after it, one transaction per tenant: a
``SCRUB`` row (tables, bytes before and after, WAL switches, ``complete``, ``verified``,
request id) in the chain of each live tenant when the operator runs it (every tenant's
erased bytes are gone), or of the calling principal's tenant only when an erase runs it
for a principal. A scrub that fails part-way writes no row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psycopg.rows import tuple_row

from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Forbidden, Unavailable, ValidationError
from mnemovault.runtime import Runtime
from mnemovault.store import maintenance as m
from mnemovault.store import tenants as tenant_store
from mnemovault.store.db import owner_connection

AUDIT_TABLES = ("audit_log", "audit_nodes", "audit_checkpoints", "audit_heads")
"""Append-only (or head-only) tables: ids and hashes, never content; left out by default."""

NEVER = ("alembic_version",)
"""The schema version row: never holds tenant data."""

LOCK_TIMEOUT_S = 30.0
MTIME_SLACK = timedelta(seconds=1)
SNAPSHOT_WAIT_S = 30.0

Progress = Callable[[str, int, int], None]
"""``progress(step, done, total)``: called before each step (``"rewrite memories"``,
``"statistics"``, ``"wal"``) and once with ``done == total`` at the end."""


@dataclass
class ScrubReport:
    """What :func:`scrub` did (or, with ``dry_run``, would do).

    ``tables``: one dict per table (``table``, ``bytes_before``, and after a run
    ``bytes_after`` and ``seconds``; a dry run adds the size breakdown and row estimates).
    ``statistics``: ``"cleared"`` or why not. ``wal``: ``recycle_was_on``, ``switches``,
    ``segments_before``, ``segments_removed``, ``verified``. ``complete``: every step ran
    and the WAL check passed (a dry run: every step would be possible); ``incomplete``
    says what was not done and why; ``outside``: copies no scrub reaches. ``audit``:
    tenant -> seq of its ``SCRUB`` row."""

    dry_run: bool
    tables: list[dict[str, Any]] = field(default_factory=list)
    statistics: str = ""
    wal: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    incomplete: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    capabilities: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _targets(infos: list[m.TableInfo], tables: Sequence[str] | None,
             include_audit: bool) -> list[m.TableInfo]:
    by_name = {t.name: t for t in infos}
    if tables is not None:
        names = list(dict.fromkeys(tables))
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValidationError(f"tables: not a table of the mnemovault schema: "
                                  f"{', '.join(sorted(unknown))}", field="tables")
        if not names:
            raise ValidationError("tables: give at least one table", field="tables")
        return [by_name[n] for n in names]
    skip = set(NEVER) | (set() if include_audit else set(AUDIT_TABLES))
    return [t for t in infos if t.name not in skip]


def _outside(caps: m.Capabilities) -> list[str]:
    out = ["backups and dumps taken before the scrub",
           "freed disk blocks below the files (rewritten files are truncated and unlinked, "
           "not overwritten)"]
    if caps.archive_mode != "off":
        out.append(f"the WAL archive (archive_mode = {caps.archive_mode})")
    if caps.replication_slots:
        out.append(f"standbys or consumers of {caps.replication_slots} replication slot(s) "
                   "(scrub each standby's data directory too)")
    return out


def _predicted_gaps(caps: m.Capabilities) -> list[str]:
    """What this role cannot do, so a scrub would end incomplete."""
    gaps = []
    if not caps.can_clear_statistics:
        gaps.append("statistics: this role may not delete planner statistics (needs a "
                    "superuser, or PostgreSQL 18 and the table owner)")
    if not caps.can_rewrite_statistics:
        gaps.append("statistics: this role may not rewrite pg_statistic (needs a superuser, "
                    "or MAINTAIN on it from PostgreSQL 17: GRANT pg_maintain)")
    if caps.wal_recycle and not caps.can_set_wal_recycle:
        gaps.append("wal: wal_recycle is on and this role may not change it: set "
                    "wal_recycle = off in postgresql.conf and reload")
    if not (caps.can_switch_wal and caps.can_checkpoint):
        gaps.append("wal: this role may not switch WAL segments or checkpoint (needs a "
                    "superuser, or EXECUTE on pg_switch_wal() and the pg_checkpoint role)")
    elif not caps.can_list_wal:
        gaps.append("wal: this role may not list pg_wal (EXECUTE on pg_ls_waldir()): old "
                    "segments are retired but not verified")
    if caps.wal_keep_size not in ("0", "0MB", "0kB"):
        gaps.append(f"wal: wal_keep_size = {caps.wal_keep_size} keeps old segments")
    return gaps


def scrub(rt: Runtime, who: Principal | None = None, *, tables: Sequence[str] | None = None,
          include_audit: bool = False, tenants: Sequence[str] | None = None,
          dry_run: bool = False, lock_timeout: float = LOCK_TIMEOUT_S,
          snapshot_wait: float = SNAPSHOT_WAIT_S, request_id: str | None = None,
          progress: Progress | None = None) -> ScrubReport:
    """Rewrite the tables and retire the WAL so that no byte of erased records stays in the
    data directory (the module docstring: steps, locking cost, scope, privileges, audit).

    ``who``: None for the operator (CLI, library); a principal (an erase run with
    ``scrub=True``) needs ``subject:erase`` and a key not limited to a scope or subject,
    and gets the audit row in its own tenant only. ``tables``: names to rewrite (default:
    every table but the audit tables, which ``include_audit`` adds). ``tenants``: whose
    chains get a ``SCRUB`` row (default: every live tenant; the principal's with ``who``).
    ``lock_timeout``: seconds to wait for each table's lock; ``snapshot_wait``: seconds to
    wait for older transactions to end. ``dry_run``: report tables, sizes and what this
    role may do, change nothing, audit nothing.

    Raises:
        Forbidden: ``who`` lacks ``subject:erase`` or is limited; or the database role does
            not own a table (permission ``table owner``).
        ValidationError: ``tables`` names no table of the schema, or is empty.
        Unavailable: older transactions still run after ``snapshot_wait`` (nothing was
            rewritten), or a table stayed locked for ``lock_timeout`` (the tables before it
            were rewritten; run it again).
    """
    if who is not None:
        who.require("subject:erase")
        who.require_unlimited("scrub")
    started = time.perf_counter()
    report = ScrubReport(dry_run=dry_run)
    with owner_connection(rt.db.url, autocommit=True, row_factory=tuple_row) as conn:
        caps = m.capabilities(conn)
        report.capabilities = caps.as_dict()
        report.outside = _outside(caps)
        targets = _targets(m.tables(conn), tables, include_audit)
        denied = [t.name for t in targets if not t.may_rewrite]
        if dry_run:
            report.tables = [t.as_dict() for t in targets]
            report.incomplete = _predicted_gaps(caps) + [
                f"table {n}: this role does not own it" for n in denied]
            report.complete = not report.incomplete
            report.statistics = "would be cleared" if caps.can_clear_statistics else \
                "would not be cleared"
            report.wal = {"recycle_was_on": caps.wal_recycle}
            report.seconds = round(time.perf_counter() - started, 3)
            return report
        if denied:
            raise Forbidden(f"scrub: the database role does not own {', '.join(denied)}: "
                            "run it as the schema owner", permission="table owner")
        _wait_for_old_snapshots(conn, snapshot_wait)
        total = len(targets) + 2
        timeout_ms = max(1, int(lock_timeout * 1000))
        for n, t in enumerate(targets):
            if progress:
                progress(f"rewrite {t.name}", n, total)
            before = m.relation_bytes(conn, t.name)
            t0 = time.perf_counter()
            if caps.can_clear_statistics:
                m.clear_statistics(conn, t.name, superuser=caps.superuser)
            m.rewrite(conn, t.name, lock_timeout_ms=timeout_ms)
            report.tables.append({"table": t.name, "bytes_before": before,
                                  "bytes_after": m.relation_bytes(conn, t.name),
                                  "seconds": round(time.perf_counter() - t0, 4)})
        if progress:
            progress("statistics", len(targets), total)
        report.statistics = _statistics(conn, caps, report.incomplete, timeout_ms)
        if progress:
            progress("wal", len(targets) + 1, total)
        report.wal = _retire_wal(conn, caps, report.incomplete)
        if progress:
            progress("done", total, total)
    report.complete = not report.incomplete
    report.seconds = round(time.perf_counter() - started, 3)
    _audit(rt, who, report, tenants, request_id)
    return report


def _wait_for_old_snapshots(conn: m.Conn, wait: float) -> None:
    since = m.server_time(conn)
    deadline = time.monotonic() + wait
    while blockers := m.old_snapshots(conn, since):
        if time.monotonic() >= deadline:
            raise Unavailable(
                "scrub: transactions older than the scrub still run, and a rewrite would "
                f"keep every row they can see ({'; '.join(blockers[:5])}); nothing was "
                "rewritten: retry when they have ended", blockers=blockers)
        time.sleep(0.2)


def _statistics(conn: m.Conn, caps: m.Capabilities, incomplete: list[str],
                timeout_ms: int) -> str:
    gaps = [g for g in _predicted_gaps(caps) if g.startswith("statistics:")]
    if caps.can_rewrite_statistics:
        m.rewrite_statistics_catalog(conn, lock_timeout_ms=timeout_ms)
    incomplete.extend(gaps)
    return "cleared" if not gaps else "; ".join(g.removeprefix("statistics: ") for g in gaps)


def _retire_wal(conn: m.Conn, caps: m.Capabilities, incomplete: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"recycle_was_on": caps.wal_recycle, "switches": 0,
                           "segments_before": None, "segments_removed": None,
                           "verified": False}
    if caps.wal_recycle:
        if not caps.can_set_wal_recycle:
            incomplete.append("wal: wal_recycle is on and this role may not change it: set "
                              "wal_recycle = off in postgresql.conf and reload")
            return out
        m.disable_wal_recycle(conn)
    if not (caps.can_switch_wal and caps.can_checkpoint):
        incomplete.append("wal: this role may not switch WAL segments or checkpoint (needs "
                          "a superuser, or EXECUTE on pg_switch_wal() and pg_checkpoint)")
        return out
    if not caps.can_list_wal:
        out["switches"] = 1
        m.switch_wal(conn)
        m.checkpoint(conn)
        incomplete.append("wal: old segments were retired but not verified (this role may "
                          "not list pg_wal: EXECUTE on pg_ls_waldir())")
        return out
    listed_at = m.server_time(conn)
    before = m.wal_files(conn)
    last = max([f for f, _ in before] + [m.current_wal_file(conn)])
    out["segments_before"] = len(before)
    out["switches"] = m.switch_past(conn, last)
    m.checkpoint(conn)
    after = m.wal_files(conn)
    left = [f for f, _ in after if f <= last]
    # a file named after ``last`` but older than the listing was recycled (renamed), not
    # created; pg_ls_waldir gives whole seconds, from a clock up to a tick behind
    oldest_new = listed_at.replace(microsecond=0) - MTIME_SLACK
    recycled = [f for f, t in after if f > last and t < oldest_new]
    out["segments_removed"] = len([f for f, _ in before if f not in {a for a, _ in after}])
    out["verified"] = not left and not recycled
    if left:
        why = [f"wal_keep_size = {caps.wal_keep_size}"] if caps.wal_keep_size not in (
            "0", "0MB", "0kB") else []
        why += [f"archive_mode = {caps.archive_mode}"] if caps.archive_mode != "off" else []
        why += [f"{caps.replication_slots} replication slot(s)"] if caps.replication_slots \
            else []
        incomplete.append(f"wal: {len(left)} old segment(s) were kept"
                          + (f" ({', '.join(why)})" if why else ""))
    if recycled:
        incomplete.append(f"wal: {len(recycled)} old segment(s) were recycled (wal_recycle "
                          "was still on at the checkpoint); run the scrub again")
    return out


def _audit(rt: Runtime, who: Principal | None, report: ScrubReport,
           tenants: Sequence[str] | None, request_id: str | None) -> None:
    if tenants is None:
        tenants = [who.tenant] if who is not None else tenant_store.live(rt.db.url)
    details = {"tables": [t["table"] for t in report.tables],
               "bytes_before": sum(t["bytes_before"] for t in report.tables),
               "bytes_after": sum(t["bytes_after"] for t in report.tables),
               "wal_switches": report.wal.get("switches", 0),
               "wal_verified": bool(report.wal.get("verified")),
               "complete": report.complete}
    actor = who.actor if who is not None else "operator"
    for t in sorted(set(tenants)):
        with rt.db.transaction(t) as conn:
            report.audit[t] = audit.append(
                conn, tenant=t, operation="SCRUB", actor=actor,
                agent=who.agent if who is not None else None, trigger="scrub",
                request_id=request_id, details=details)
