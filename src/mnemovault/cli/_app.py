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
import typer.core
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



_METAVARS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "datetime": "DATETIME",
             "file": "FILE", "directory": "DIR", "path": "PATH", "bool": ""}


def _option_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """A flag takes no value, so it shows no type; a value shows a conventional metavar
    (TEXT, INTEGER, [a|b], TEXT... for a repeatable option) rather than the annotation."""
    if self.metavar is not None:
        return self.metavar or None
    if self.is_flag or self.count:
        return None
    label = typer.core.TyperOption.display_type(self, ctx).strip("<>")
    many = label.startswith("list[")
    label = label.removeprefix("list[").removesuffix("]")
    if "|" in label:
        return f"[{label}]" + ("..." if many else "")
    label = _METAVARS.get(label, label.upper())
    return (label + "...") if many and label else (label or None)


def _argument_usage(self: typer.core.TyperArgument) -> str:
    name = (self.metavar or self.name or "").upper()
    return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")


# Typer 0.2x renders every parameter's Python type in `--help` (`<bool>` beside each flag,
# `<list[str]>`, `{query}` in the usage line): the help shows the conventional metavars
# instead (tests/test_cli_help.py fails if a Typer upgrade brings the annotations back).
typer.core.TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
typer.core.TyperArgument.display_type_rich = (  # type: ignore[method-assign]
    lambda self, ctx: None)
typer.core.TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]

_GLOBAL_OPTIONS = {"--data-dir": "--data-dir DIR", "--tenant": "--tenant T",
                   "--verbose": "--verbose", "-v": "-v"}


class _RootGroup(typer.core.TyperGroup):
    """The root group: a global option given after the command (``mnemovault list --tenant
    t1``) is refused with where it goes, not only "No such option"."""

    def invoke(self, ctx: Any) -> Any:
        from typer._click.exceptions import NoSuchOption

        try:
            return super().invoke(ctx)
        except NoSuchOption as exc:
            given = _GLOBAL_OPTIONS.get(exc.option_name)
            if given is not None and exc.ctx is not None:
                prog = exc.ctx.find_root().command_path
                rest = exc.ctx.command_path[len(prog):].strip()
                exc.message = (f"No such option: {exc.option_name} here. {exc.option_name} "
                               "is a global option: it goes before the command, as in "
                               f"`{prog} {given} {rest}`")
                exc.possibilities = None
            raise


# markdown: help text reflows (a docstring's line breaks are not the terminal's) and
# ``code`` renders as code rather than as literal backticks
app = typer.Typer(help="mnemovault: governed long-term memory for AI agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown", cls=_RootGroup)


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

