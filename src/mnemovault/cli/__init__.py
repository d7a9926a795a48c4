"""The ``mnemovault`` command line (Typer + Rich). Every command calls :class:`MemoryVault`.

Global options come before the command: ``mnemovault --data-dir DIR --tenant T recall …``.
``--json`` on a command prints machine-readable output on stdout (progress goes to stderr).

Layout: this package's ``__init__`` holds :func:`main` (the ``mnemovault`` console script)
and nothing heavy: a command a running ``mnemovault server`` can answer (``list``,
``recall``, ``remember``) goes to it over its unix socket (:mod:`._remote`, standard library
only) before Typer or the vault is imported; everything else runs here. :mod:`._app` owns
the root :data:`app` and its callback (the global options); ``mnemovault.cli.app`` is it,
imported on first use. :mod:`._common` holds what the commands
share: the consoles, :class:`~._common.State`, opening the vault, the error → exit code
mapping, JSON output and helpers used by more than one group. Each other module is one
command group and exposes ``register(app)``:

* :mod:`.memories`   -- ``remember``, ``recall``, ``list``, ``delete``, ``import``
* :mod:`.serve`      -- ``serve``, ``demo``
* :mod:`.server`     -- ``server start|stop|status`` (a background server on a socket)
* :mod:`.governance` -- ``forget``, ``pin``, ``unpin``, ``retention run``
* :mod:`.scrub`      -- ``scrub`` (rewrite tables, retire WAL after erasures)
* :mod:`.chat`       -- ``chat``
* :mod:`.wake`       -- ``wake``, ``timeline``
* :mod:`.db`         -- ``db upgrade``
* :mod:`.keys`       -- ``keys create``, ``kek rotate``
* :mod:`.pii`        -- ``vault list|shred|export``
* :mod:`.audit`      -- ``audit verify|export|checkpoint|proof``
* :mod:`.review`     -- ``review list|approve|reject``
* :mod:`.librarian`  -- ``librarian run``
* :mod:`.subjects`   -- ``erase``, ``export-subject``, ``rectify``, ``reapply-erasures``,
  ``receipt verify``, ``ledger export``
* :mod:`.procedures` -- ``procedure capture|recall|show|run|feedback|version|prune``
* :mod:`.tenants`    -- ``tenant export|export-status|delete|cancel-delete|status|purge``,
  ``worker``

To add a command group: create ``cli/<group>.py`` with a module docstring, import only from
``mnemovault.cli._common`` and from ``mnemovault`` below the CLI (never from another command
module, :mod:`._app` or this package), define the commands, and a
``register(app: typer.Typer)`` that adds them (``app.command(...)(fn)``, or
``app.add_typer(sub_app, name=...)`` for a sub-group); then add the module to ``_GROUPS``
in :mod:`._app`. Import heavy modules (the vault,
the embedder/torch, the HTTP API) inside the command functions so ``mnemovault --help``
stays fast. ``--help`` lists top-level commands in registration order, then groups in
registration order, so the order of ``_GROUPS`` is the order users see.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["app", "main"]


def main() -> None:
    """The ``mnemovault`` console script."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from mnemovault.cli import _remote

    status = _remote.run(sys.argv[1:])
    if status is not None:
        sys.stdout.flush()
        raise SystemExit(status)
    from mnemovault.cli._app import app

    app()


def __getattr__(name: str) -> Any:
    if name == "app":
        from mnemovault.cli._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
