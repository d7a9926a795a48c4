"""``mnemovault review``: the review gate's queue (SPEC section 8)::

    mnemovault review list [--scope S] [--limit N] [--cursor ID] [--json]
    mnemovault review approve ID [--comment "checked with the team"] [--json]
    mnemovault review reject ID [--comment "…"] [--json]

With ``REQUIRE_REVIEW=true`` new memories, procedures and versions wait here, not recalled,
until approved. The commands act as the local operator (owner of ``--tenant``); each
decision is audited (reviewer ``local`` from the CLI) with the comment. The local operator
is one actor: it approves what keys captured, but its own captures (library, CLI) only
with ``REVIEW_SELF_APPROVAL=true`` (separation of duties; refused: exit 4). An id that is
not in the tenant exits 3; one that is not pending (decided already) exits 5. None of these
commands creates a database (exit 7 when the data dir has none).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _vault, err, out
from mnemovault.errors import MnemoError

review_app = typer.Typer(help="The review queue: approve or reject held memories.",
                         no_args_is_help=True)

Comment = Annotated[str | None, typer.Option(help="A note for the audit row.")]
AsJson = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


@review_app.command("list")
def review_list(
    ctx: typer.Context,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Last id of the previous page.")] = None,
    as_json: AsJson = False,
) -> None:
    """List the items pending review, oldest first (one page; --cursor for the next)."""
    try:
        with _vault(ctx, create=False) as vault:
            page = vault.review.list(scope=scope, limit=limit, cursor=cursor)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(page.model_dump(mode="json"))
        return
    if not page.items:
        err.print("nothing is pending review", highlight=False)
        return
    table = Table(show_lines=False)
    for col in ("id", "type", "scope", "created", "content"):
        table.add_column(col, overflow="fold")
    for m in page.items:
        table.add_row(str(m.id), m.type, Text(m.scope), m.created_at.strftime("%Y-%m-%d %H:%M"),
                      Text(m.content[:200]))
    out.print(table)
    if page.next_cursor:
        err.print(f"more: --cursor {page.next_cursor}", highlight=False)


def _decide(ctx: typer.Context, action: str, memory_id: str, comment: str | None,
            as_json: bool) -> None:
    try:
        with _vault(ctx, create=False) as vault:
            fn: Any = getattr(vault.review, action)
            res = fn(memory_id, comment=comment)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
        return
    extra = ""
    if res.deleted:
        extra = f"; deleted {len(res.deleted)} memor{'y' if len(res.deleted) == 1 else 'ies'}"
    if res.restored:
        extra += f"; version {res.restored} is live again"
    out.print(f"{res.decision} {res.id} (now {res.status}{extra}; audit #{res.audit_seq})",
              highlight=False)


@review_app.command("approve")
def review_approve(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The pending item's id.")],
    comment: Comment = None,
    as_json: AsJson = False,
) -> None:
    """Approve a pending item: it is recalled from now on."""
    _decide(ctx, "approve", memory_id, comment, as_json)


@review_app.command("reject")
def review_reject(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="The pending item's id.")],
    comment: Comment = None,
    as_json: AsJson = False,
) -> None:
    """Reject a pending item: it is deleted (a rejected version is kept as history)."""
    _decide(ctx, "reject", memory_id, comment, as_json)


def register(app: typer.Typer) -> None:
    """Add the ``review`` group to ``app``."""
    app.add_typer(review_app, name="review")
