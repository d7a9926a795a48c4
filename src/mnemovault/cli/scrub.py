"""``mnemovault scrub``: rewrite the tables and retire the WAL, so that no byte of erased
records stays in the data directory (:mod:`mnemovault.governance.scrub`).

Locking cost: each table is locked ACCESS EXCLUSIVE (no reads, no writes, for every
tenant) while ``VACUUM FULL`` rewrites it, one table at a time; the rewrite needs free disk
space for a copy of the table; the final checkpoint is a burst of writes. ``--dry-run``
lists the tables, their sizes and what the database role may do, changing nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from mnemovault.cli._common import EXIT_CODES, JSON_HELP, _emit_json, _fail, _vault, err, out
from mnemovault.errors import MnemoError


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def scrub(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="List the tables, their sizes and what this database role may "
                          "do; change nothing.")] = False,
    table: Annotated[list[str] | None, typer.Option(
        "--table", help="Rewrite only this table (repeatable; default: every table but "
                        "the audit tables).")] = None,
    include_audit: Annotated[bool, typer.Option(
        "--include-audit", help="Also rewrite the audit tables (e.g. after a tenant's hard "
                                "delete).")] = False,
    lock_timeout: Annotated[float, typer.Option(
        min=0.001, help="Seconds to wait for each table's lock.")] = 30.0,
    wait: Annotated[float, typer.Option(
        min=0.0, help="Seconds to wait for older transactions to end.")] = 30.0,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Make erasures physical: rewrite the tables (VACUUM FULL: heap, TOAST, every index),
    clear and rebuild planner statistics, turn wal_recycle off and retire every old WAL
    segment, then verify pg_wal. Run it after erasures that must be physically complete.

    LOCKING COST: each table is locked ACCESS EXCLUSIVE while it is rewritten: every read
    and write of it, for every tenant, waits (a quiet hour; one scrub covers every erasure
    before it). Needs free disk space for a copy of the largest table. Exit 0 when
    complete; 6 when a step could not be done (the report says which and why)."""
    from mnemovault.governance.scrub import scrub as run_scrub

    report: Any = None
    try:
        with _vault(ctx, create=False) as vault, Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), console=err, disable=dry_run) as progress:
            task = progress.add_task("scrub", total=None)

            def step(name: str, done: int, total: int) -> None:
                progress.update(task, description=name, completed=done, total=total)

            report = run_scrub(vault.rt, tables=table, include_audit=include_audit,
                               dry_run=dry_run, lock_timeout=lock_timeout,
                               snapshot_wait=wait, progress=step)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(report.as_dict())
    else:
        _print(report)
    if not dry_run and not report.complete:
        raise typer.Exit(EXIT_CODES["unavailable"])


def _print(report: Any) -> None:
    t = Table(title="tables to rewrite" if report.dry_run else "tables rewritten")
    t.add_column("table")
    t.add_column("size before" if not report.dry_run else "size", justify="right")
    if report.dry_run:
        t.add_column("live rows", justify="right")
        t.add_column("dead rows", justify="right")
        for r in report.tables:
            t.add_row(r["table"], _size(r["total_bytes"]), str(r["live_rows"]),
                      str(r["dead_rows"]))
    else:
        t.add_column("size after", justify="right")
        t.add_column("seconds", justify="right")
        for r in report.tables:
            t.add_row(r["table"], _size(r["bytes_before"]), _size(r["bytes_after"]),
                      f"{r['seconds']:.3f}")
    out.print(t)
    wal = report.wal
    if report.dry_run:
        out.print(f"wal_recycle is {'on' if wal.get('recycle_was_on') else 'off'}; "
                  f"statistics {report.statistics}")
    else:
        out.print(f"statistics: {report.statistics}; WAL: {wal.get('switches', 0)} "
                  f"switch(es), {wal.get('segments_removed')} old segment(s) removed, "
                  f"verified: {'yes' if wal.get('verified') else 'no'}; "
                  f"audited in {len(report.audit)} tenant(s); {report.seconds:.2f} s")
    for gap in report.incomplete:
        err.print("[yellow]not done[/]: ", Text(gap), sep="")
    for place in report.outside:
        out.print("out of reach: ", Text(place), sep="", highlight=False)
    if not report.dry_run:
        out.print("[green]complete[/]" if report.complete else "[red]incomplete[/]")


def register(app: typer.Typer) -> None:
    """Add ``scrub`` to ``app``."""
    app.command("scrub")(scrub)
