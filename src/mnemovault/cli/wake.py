"""``mnemovault wake`` (an agent's waking state as one fenced context pack) and
``mnemovault timeline`` (a subject's memories in time order)."""

from __future__ import annotations

from typing import Annotated

import typer

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _plural, _timestamp, _vault, out
from mnemovault.errors import MnemoError


def wake(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option(help="Scope to wake in.")] = "default",
    subject: Annotated[str | None, typer.Option(help="The subject (default: the scope).")]
    = None,
    budget: Annotated[int, typer.Option(help="Token budget (100-32000; tokens ~ chars/4).")]
    = 1000,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Print the waking state: pinned records, the most used facts and the most recent
    records, fenced as data (never instructions), within a token budget."""
    try:
        with _vault(ctx, create=False) as vault:
            state = vault.wake(scope=scope, subject=subject, budget=budget)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(state.model_dump(mode="json"))
        return
    print(state.pack)
    records = _plural(len(state.records), "record", "records")
    out.print(f"[dim]{records}, ~{state.tokens}/{state.budget} tokens"
              + (f", {state.left_out} left out" if state.left_out else "") + "[/]",
              highlight=False)


def timeline(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option(help="Scope.")] = "default",
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="<ISO 8601>", help="From this time (inclusive), e.g. 2024-05-01T12:00:00Z.")]
    = None,
    until: Annotated[str | None, typer.Option(
        metavar="<ISO 8601>", help="Up to this time (exclusive).")]
    = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List memories oldest first by creation time (archived ones included)."""
    try:
        start, end = _timestamp(since, "since"), _timestamp(until, "until")
        with _vault(ctx, create=False) as vault:
            page = vault.timeline(scope=scope, subject=subject, since=start, until=end,
                                  limit=limit, cursor=cursor)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(page.model_dump(mode="json"))
        return
    for m in page.items:
        out.print(f"{m.created_at:%Y-%m-%d %H:%M}  {m.id}  {m.content[:100]}",
                  highlight=False, soft_wrap=True)
    if page.next_cursor:
        out.print(f"[dim]more: --cursor {page.next_cursor}[/]", highlight=False,
                  soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``wake`` and ``timeline`` to ``app``."""
    app.command("wake")(wake)
    app.command("timeline")(timeline)
