"""``mnemovault chat``: chat with memory, streaming the answer to stdout::

    mnemovault chat "what do I know about Lisbon?" --scope me

Calls :meth:`~mnemovault.vault.MemoryVault.chat_stream` (as the HTTP API does), as the
local operator (owner of ``--tenant``). Chat answers from memory, so it does not create a
database: a data dir without one exits 7 (``remember`` or ``import`` first).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _vault, err
from mnemovault.errors import MnemoError


def chat(
    ctx: typer.Context,
    message: Annotated[str, typer.Argument(help="The message (in-band commands work too: "
                                           "DO_NOT_STORE:, FORGET_PREVIEW:, FORGET:, …).")],
    scope: Annotated[str, typer.Option(help="Scope to search and store in.")] = "default",
    subject: Annotated[str | None, typer.Option(help="Who the conversation is about.")]
        = None,
    k: Annotated[int | None, typer.Option("-k", help="Records to retrieve (1-20).")] = None,
    reveal: Annotated[bool, typer.Option(help="Show personal values (audited).")] = False,
    store: Annotated[bool, typer.Option(help="Store the exchange as an episode.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Chat with memory: the answer streams to stdout."""
    try:
        with _vault(ctx, create=False) as vault:
            stream = vault.chat_stream(message, scope=scope, subject=subject, k=k,
                                       reveal=reveal, store=store)
            if as_json:
                _emit_json(stream.collect().model_dump(mode="json"))
                return
            done: dict[str, Any] = {}
            for e in stream:
                if e.event == "token":
                    sys.stdout.write(e.data["text"])
                    sys.stdout.flush()
                elif e.event == "done":
                    done = e.data
            sys.stdout.write("\n")
    except MnemoError as exc:
        _fail(exc)
        return
    if done.get("stored"):
        err.print(f"[dim]stored as {done['stored']}[/]", highlight=False)
    if done.get("status") in ("refused", "invalid"):
        raise typer.Exit(5 if done["status"] == "refused" else 2)


def register(app: typer.Typer) -> None:
    """Add ``chat`` to ``app``."""
    app.command("chat")(chat)
