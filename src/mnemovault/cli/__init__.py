"""The ``mnemovault`` command line (Typer + Rich). Every command calls :class:`MemoryVault`.

Global options come before the command: ``mnemovault --data-dir DIR --tenant T recall …``.
``--json`` on a command prints machine-readable output on stdout (progress goes to stderr).

Layout: this module owns the root :data:`app`, its callback (the global options) and
:func:`main` (the ``mnemovault`` console script). :mod:`._common` holds what the commands
share: the consoles, :class:`~._common.State`, opening the vault, the error → exit code
mapping, JSON output and helpers used by more than one group. Each other module is one
command group and exposes ``register(app)``:

* :mod:`.memories`   -- ``remember``, ``recall``, ``list``, ``delete``, ``import``
* :mod:`.serve`      -- ``serve``, ``demo``
* :mod:`.governance` -- ``forget``, ``pin``, ``unpin``, ``retention run``
* :mod:`.scrub`      -- ``scrub`` (rewrite tables, retire WAL after erasures)
* :mod:`.chat`       -- ``chat``
* :mod:`.wake`       -- ``wake``, ``timeline``
* :mod:`.db`         -- ``db upgrade``
* :mod:`.keys`       -- ``keys create``, ``kek rotate``
* :mod:`.pii`        -- ``vault list|shred|export``
* :mod:`.audit`      -- ``audit verify|export|checkpoint|proof``
* :mod:`.review`     -- ``review list|approve|reject``
* :mod:`.subjects`   -- ``erase``, ``export-subject``, ``rectify``, ``reapply-erasures``,
  ``receipt verify``, ``ledger export``
* :mod:`.procedures` -- ``procedure capture|recall|show|run|feedback|version|prune``
* :mod:`.tenants`    -- ``tenant export|export-status|delete|cancel-delete|status|purge``,
  ``worker``

To add a command group: create ``cli/<group>.py`` with a module docstring, import only from
``mnemovault.cli._common`` and from ``mnemovault`` below the CLI (never from another command
module or from this package), define the commands, and a ``register(app: typer.Typer)`` that
adds them (``app.command(...)(fn)``, or ``app.add_typer(sub_app, name=...)`` for a
sub-group); then add the module to :data:`_GROUPS` below. Import heavy modules (the vault,
the embedder/torch, the HTTP API) inside the command functions so ``mnemovault --help``
stays fast. ``--help`` lists top-level commands in registration order, then groups in
registration order, so the order of :data:`_GROUPS` is the order users see.
"""

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
    mcp,
    memories,
    pii,
    procedures,
    review,
    scrub,
    serve,
    subjects,
    tenants,
    wake,
)
from mnemovault.cli._common import State, _fail
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, ValidationError

__all__ = ["app", "main"]

app = typer.Typer(help="mnemovault: governed long-term memory for AI agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


@app.callback()
def main_callback(
    ctx: typer.Context,
    data_dir: Annotated[str | None, typer.Option(
        metavar="DIR",
        help="Embedded database directory (default: the user data dir). Ignored with "
             "DATABASE_URL.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant for local commands.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)
    if data_dir is not None and not data_dir.strip():
        # `--data-dir "$DIR"` with DIR unset: never fall back to "." or the default dir
        _fail(ValidationError("data-dir: must not be empty", field="data_dir"))
    try:
        settings = Settings()
    except PydanticValidationError as exc:
        e = exc.errors()[0]
        name = ".".join(str(p) for p in e["loc"]) or "settings"
        _fail(ConfigError(f"{name}: {e['msg']} (check the MNEMOVAULT_* environment)",
                          field=name))
        return
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = Path(data_dir)
    if tenant is not None:
        updates["tenant"] = tenant
    ctx.obj = State(settings.model_copy(update=updates) if updates else settings)


# Registration order is the order of ``mnemovault --help``.
_GROUPS = (db, keys, pii, audit, memories, serve, governance, scrub, chat, wake, review, mcp,
           tenants, procedures, subjects)
for _group in _GROUPS:
    _group.register(app)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()
