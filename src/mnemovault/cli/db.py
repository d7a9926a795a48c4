"""``mnemovault db``: database administration (``db upgrade``)."""

from __future__ import annotations

from typing import Annotated

import typer

from mnemovault.cli._common import _emit_json, _fail, _state, out
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
        db.check_embedder(embedder.model, embedder.dimension)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"from": before, "to": after})
    else:
        out.print(f"schema at revision [bold]{after}[/] (was {before or 'empty'})")


def register(app: typer.Typer) -> None:
    """Add the ``db`` group to ``app``."""
    app.add_typer(db_app, name="db")
