"""The root Typer :data:`app`: its callback (the global options) and the command groups.
:mod:`mnemovault.cli` (the package) holds the ``mnemovault`` console script, which first
tries the server fast path (:mod:`._remote`) and only then imports this module."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError as PydanticValidationError

from mnemovault.cli import (
    audit,
    chat,
    db,
    governance,
    keys,
    librarian,
    mcp,
    memories,
    pii,
    procedures,
    review,
    scrub,
    serve,
    server,
    subjects,
    tenants,
    wake,
)
from mnemovault.cli._common import State, _fail, _given_globals, err
from mnemovault.config import Settings, env_name, unknown_variables
from mnemovault.errors import ConfigError, ValidationError

__all__ = ["app"]

app = typer.Typer(help="mnemovault: governed long-term memory for AI agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


def _print_version(value: bool) -> None:
    if value:
        from mnemovault import __version__

        typer.echo(f"mnemovault {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    ctx: typer.Context,
    data_dir: Annotated[str | None, typer.Option(
        metavar="DIR",
        help="Embedded database directory (default: the user data dir). Ignored with "
             "DATABASE_URL.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant for local commands.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", metavar="", is_eager=True, callback=_print_version,
        help="Print the version and exit.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)
    if data_dir is not None and not data_dir.strip():
        # `--data-dir "$DIR"` with DIR unset: never fall back to "." or the default dir
        _fail(ValidationError("data-dir: must not be empty", field="data_dir"))
    for name, close in unknown_variables(dict(os.environ)):
        err.print(f"warning: {name} is not a mnemovault setting (ignored)"
                  + (f"; did you mean {close}?" if close else ""), highlight=False,
                  markup=False, soft_wrap=True)
    try:
        settings = Settings()
    except PydanticValidationError as exc:
        e = exc.errors()[0]
        field = ".".join(str(p) for p in e["loc"]) or "settings"
        var = env_name(field)
        rule = e["msg"].removeprefix("Value error, ")
        _fail(ConfigError(f"{var}: {rule} (the environment variable {var}, setting "
                          f"{field!r})", field=field))
        return
    given = []
    if data_dir is not None:
        given += ["--data-dir", data_dir]
    if tenant is not None:
        given += ["--tenant", tenant]
    _given_globals(given)
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = Path(data_dir)
    if tenant is not None:
        updates["tenant"] = tenant
    ctx.obj = State(settings.model_copy(update=updates) if updates else settings)


# Registration order is the order of ``mnemovault --help``.
_GROUPS = (db, keys, pii, audit, memories, serve, server, governance, scrub, chat, wake,
           review, librarian, mcp, tenants, procedures, subjects)
for _group in _GROUPS:
    _group.register(app)

