"""``mnemovault mcp``: the MCP server over stdio, for agent clients that spawn it.

The caller is the API key in ``MNEMOVAULT_API_KEY``, authenticated like a bearer token on
the HTTP API (and again on every tool call, so a revoked key stops working), with the
same permissions and the same scope and subject limits. Without the variable the command
refuses to start (exit 4), unless ``--local`` is given: then the caller is the local
operator of ``--tenant`` with ``--role`` (default ``member``: read, write, forget). Why
the flag: whoever can start this command can already use the data dir as its operator, so
``--local`` grants nothing new, but an agent client should not be handed an owner's
powers (erasure, every tenant-wide permission) by leaving a variable unset; naming the
role keeps that a decision.

Only protocol messages go to stdout. Everything else (the status line, logs, the output
of the embedded PostgreSQL it may start, a model loading) goes to stderr: stdout is
pointed at stderr while the vault opens (so the database server, a child process, never
holds the protocol pipe), and the SDK's stdio transport does the same while it serves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated, cast

import typer

from mnemovault.cli._common import _fail, _state, _vault
from mnemovault.errors import MnemoError, Unauthenticated, ValidationError

KEY_ENV = "MNEMOVAULT_API_KEY"


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 (and ``sys.stdout``) at stderr for the block, so nothing
    printed there, by this process or by a child it starts, reaches the protocol pipe."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def mcp(
    ctx: typer.Context,
    local: Annotated[bool, typer.Option(
        "--local", help=f"Without {KEY_ENV}: act as the local operator of --tenant.")] = False,
    role: Annotated[str, typer.Option(
        help="With --local: owner, admin, member or service.")] = "member",
) -> None:
    """Run the MCP server over stdio (tools: remember, recall, forget, pin, unpin,
    erase_value, timeline, wake, procedure_capture, procedure_recall, procedure_run,
    procedure_feedback). The caller is the API key in MNEMOVAULT_API_KEY."""
    from mnemovault.auth import ROLES, Role
    from mnemovault.embed import preload
    from mnemovault.mcp.server import build_server

    token = os.environ.get(KEY_ENV, "").strip()
    try:
        if local and token:
            raise ValidationError(f"local: give either --local or {KEY_ENV}, not both",
                                  field="local")
        if not local and not token:
            raise Unauthenticated(f"{KEY_ENV}: not set; set it to an API key ('mnemovault "
                                  "keys create --tenant T --role member'), or pass --local "
                                  "to act as the local operator")
        if role not in ROLES:
            raise ValidationError(f"role: must be one of {', '.join(ROLES)}", field="role")
        with ExitStack() as stack:
            with _stdout_to_stderr():
                vault = stack.enter_context(_vault(ctx, create=local))
                preload(vault.embedder)  # so the first call is not the slow one
                if local:
                    operator = vault.principal(_state(ctx).settings.tenant,
                                               cast(Role, role))
                    server = build_server(vault, lambda _ctx: operator)
                else:
                    try:  # refuse a bad key now, not at the first call
                        vault.authenticate(token)
                    except Unauthenticated as exc:
                        raise Unauthenticated(
                            f"{KEY_ENV}: {exc.message.removeprefix('authorization: ')}"
                        ) from None
                    server = build_server(vault, lambda _ctx: vault.authenticate(token))
            server.run("stdio")
    except MnemoError as exc:
        _fail(exc)


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to ``app``."""
    app.command()(mcp)

