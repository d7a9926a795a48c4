"""``mnemovault vault``: the PII vault (``vault list``, ``vault shred``, ``vault export``).

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

from mnemovault.cli._common import _emit_json, _fail, _not_found, _vault, out
from mnemovault.errors import MnemoError

pii_app = typer.Typer(help="The PII vault: entries, shredding, export.", no_args_is_help=True)


@pii_app.command("list")
def vault_list(ctx: typer.Context,
               limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 50,
               cursor: Annotated[str | None, typer.Option(help="Last placeholder seen.")] = None,
               as_json: Annotated[bool, typer.Option("--json", metavar="")] = False) -> None:
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
                as_json: Annotated[bool, typer.Option("--json", metavar="")] = False) -> None:
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


def register(app: typer.Typer) -> None:
    """Add the ``vault`` group to ``app``."""
    app.add_typer(pii_app, name="vault")
