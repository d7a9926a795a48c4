"""``mnemovault vault``: the PII vault (``vault list``, ``vault shred``, ``vault export``);
``mnemovault pii watch``: the PII watch (:mod:`mnemovault.pii.watch`).

None of them creates a database (exit 7 when the data dir has none); ``vault shred`` of a
placeholder with no live entry (unknown, or shredded already) exits 3, as
``DELETE /v1/vault/{placeholder}`` answers 404."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _not_found, _vault, err, out
from mnemovault.errors import MnemoError

pii_app = typer.Typer(help="The PII vault: entries, shredding, export.", no_args_is_help=True)


@pii_app.command("list")
def vault_list(ctx: typer.Context,
               limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 50,
               cursor: Annotated[str | None, typer.Option(help="Last placeholder seen.")] = None,
               as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """List vault entries (metadata only, never values)."""
    try:
        with _vault(ctx, create=False) as vault:
            rows = vault.vault_entries(limit=limit, cursor=cursor)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(rows)
        return
    table = Table()
    for col in ("placeholder", "kind", "created", "shredded"):
        table.add_column(col)
    for r in rows:
        table.add_row(Text(r["placeholder"]), r["kind"], str(r["created_at"])[:19],
                      str(r["shredded_at"])[:19] if r["shredded_at"] else "")
    out.print(table)


@pii_app.command("shred")
def vault_shred(ctx: typer.Context,
                placeholders: Annotated[list[str], typer.Argument(help="Placeholders.")],
                as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    r"""Crypto-shred values: every record using them shows \[erased] from now on."""
    try:
        with _vault(ctx, create=False) as vault:
            done = vault.shred(placeholders, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"shredded": done})
    else:
        out.print(f"shredded {len(done)} value(s)")
    _not_found([p for p in dict.fromkeys(placeholders) if p not in done],
               "live vault entry for", "placeholders")


@pii_app.command("export")
def vault_export(ctx: typer.Context) -> None:
    """Every live entry with its value, as JSON Lines on stdout (audited)."""
    try:
        with _vault(ctx, create=False) as vault:
            rows = vault.vault_export()
    except MnemoError as exc:
        _fail(exc)
        return
    for r in rows:
        sys.stdout.write(json.dumps(r, default=str, ensure_ascii=False) + "\n")


watch_app = typer.Typer(help="Personal-data maintenance: the PII watch.",
                        no_args_is_help=True)


@watch_app.command("watch")
def pii_watch(ctx: typer.Context,
              dry_run: Annotated[bool, typer.Option(
                  "--dry-run", help="Report what would be rewritten; write nothing.")] = False,
              full: Annotated[bool, typer.Option(
                  "--full", help="Open every record of the tenant, not only those whose "
                                 "keyed terms match a new value.")] = False,
              batch: Annotated[int, typer.Option(min=1, max=10_000,
                                                 help="Records per transaction.")] = 200,
              settle_seconds: Annotated[float | None, typer.Option(
                  min=0, help="Override MNEMOVAULT_PII_WATCH_SETTLE_SECONDS.")] = None,
              as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Rewrite records stored before a value they hold became known (a name passed as an
    entity today, in plain text last month) with its placeholder; re-embedded, re-indexed,
    audited. Incremental: only values not covered by an earlier run are looked for."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    try:
        with _vault(ctx, create=False) as vault, Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), console=err, disable=as_json) as progress:
            task = progress.add_task("pii watch: candidate records", total=None)

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            report = vault.pii_watch.run(dry_run=dry_run, full=full, batch=batch,
                                     settle_seconds=settle_seconds, progress=step,
                                     trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    result = report.to_dict()
    if as_json:
        _emit_json(result)
        return
    verb = "would rewrite" if dry_run else "rewrote"
    out.print(f"{report.values} new value(s), {report.candidates} candidate record(s), "
              f"{verb} {len(report.rewritten)}; {len(report.deferred)} deferred, "
              f"{report.values_done} value(s) covered ({report.ms:.0f} ms)")


def register(app: typer.Typer) -> None:
    """Add the ``vault`` and ``pii`` groups to ``app``."""
    app.add_typer(pii_app, name="vault")
    app.add_typer(watch_app, name="pii")
