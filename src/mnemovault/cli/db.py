"""``mnemovault db``: database administration (``db upgrade``, ``db info``)."""

from __future__ import annotations

from typing import Annotated

import typer

from mnemovault.cli._common import _emit_json, _fail, _require_database, _state, out
from mnemovault.errors import MnemoError

db_app = typer.Typer(help="Database administration.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Create or migrate the schema to the latest revision."""
    from mnemovault.embed import make_embedder
    from mnemovault.store.db import Database

    settings = _state(ctx).settings
    try:
        db = Database.from_settings(settings)
        embedder = make_embedder(settings)
        before, after = db.upgrade(embedder.dimension)
        db.check_embedder(embedder.model, embedder.dimension,
                          text_view=settings.embed_text_view)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"from": before, "to": after})
    else:
        out.print(f"schema at revision [bold]{after}[/] (was {before or 'empty'})")


@db_app.command("info")
def db_info(ctx: typer.Context,
            as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show the schema revision and the topology: plain PostgreSQL, or the Citus nodes, the
    distributed tables (shard count, co-location) and the reference tables."""
    from mnemovault.store import citus
    from mnemovault.store.db import Database

    settings = _state(ctx).settings
    try:
        _require_database(settings)
        db = Database.from_settings(settings)
        revision = db.current_revision()
        info = {"revision": revision, **citus.topology(db.url)}
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(info)
        return
    out.print(f"schema at revision [bold]{revision or 'empty'}[/], PostgreSQL "
              f"{info['server_version']}")
    if not info["citus"]:
        out.print("plain PostgreSQL (no Citus): one server holds every tenant")
        return
    from rich.table import Table

    out.print(f"Citus {info['version']}: {len(info['nodes'])} nodes, "
              f"{len(info['distributed'])} distributed tables"
              f"{' co-located with memories' if info['colocated'] else ' (NOT co-located)'}, "
              f"{len(info['reference'])} reference tables")
    nodes = Table("node", "host", "port", "role", "placements")
    for n in info["nodes"]:
        nodes.add_row(str(n["id"]), n["host"], str(n["port"]), n["role"],
                      str(n["placements"]))
    out.print(nodes)
    tables = Table("table", "kind", "shards", "co-location group")
    for d in info["distributed"]:
        tables.add_row(d["table"], "distributed by tenant_id", str(d["shards"]),
                       str(d["colocation"]))
    for t in info["reference"]:
        tables.add_row(t, "reference", "1", "")
    for t in info["local"]:
        tables.add_row(t, "local (coordinator)", "", "")
    out.print(tables)


def register(app: typer.Typer) -> None:
    """Add the ``db`` group to ``app``."""
    app.add_typer(db_app, name="db")
