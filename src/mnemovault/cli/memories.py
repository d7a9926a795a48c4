"""Top-level memory commands: ``remember``, ``recall``, ``list``, ``delete`` and ``import``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from mnemovault.cli._common import (
    EXIT_CODES,
    JSON_HELP,
    _confirm,
    _declined,
    _emit_json,
    _fail,
    _hint,
    _import,
    _not_found,
    _plural,
    _print_hits,
    _read_import,
    _vault,
    err,
    out,
)
from mnemovault.errors import MnemoError, NotFound, ValidationError


def remember(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="What to remember.")],
    scope: Annotated[str, typer.Option(help="Scope (namespace) inside the tenant.")] = "default",
    subject: Annotated[str | None, typer.Option(help="Who the memory is about.")] = None,
    key: Annotated[str | None, typer.Option(help="Upsert key: a new version supersedes.")] = None,
    type: Annotated[str, typer.Option(help="episode, fact or procedure.")] = "episode",
    entity: Annotated[list[str] | None, typer.Option(
        help="A personal value to pseudonymise, as kind=value (repeatable).")] = None,
    valid_from: Annotated[str | None, typer.Option(
        "--valid-from", help="When it became true (ISO 8601; default now): a keyed "
        "version's place on its key's timeline.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Remember one memory."""
    entities = []
    for e in entity or []:
        kind, sep, value = e.partition("=")
        if not sep:
            _fail(ValidationError("entity: must be kind=value", field="entity"))
        entities.append({"kind": kind, "value": value})
    try:
        with _vault(ctx, embeds=True) as vault:
            r = vault.remember(text, scope=scope, subject=subject, key=key, type=type,
                               provenance={"source": "cli"}, entities=entities,
                               valid_from=valid_from)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(r.model_dump(mode="json"))
    else:
        extra = f", supersedes {r.superseded}" if r.superseded else ""
        out.print(f"remembered [bold]{r.id}[/] (version {r.version}{extra})")
        if r.status == "superseded":
            out.print(f"dated before the key's current version: kept as history, valid "
                      f"{r.valid_from.isoformat() if r.valid_from else '?'} to "
                      f"{r.valid_to.isoformat() if r.valid_to else 'now'}", highlight=False)
        if r.status == "pending_review":
            out.print("held for review (REQUIRE_REVIEW): not recalled until approved with "
                      f"`{_hint(f'review approve {r.id}')}`", markup=False, highlight=False)
        if r.placeholders:
            out.print("new vault entries: " + " ".join(r.placeholders), highlight=False)


def recall(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    scope: Annotated[str, typer.Option(help="Scope to search.")] = "default",
    k: Annotated[int, typer.Option("-k", help="How many results (1-100).")] = 5,
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
    reveal: Annotated[bool, typer.Option(metavar="", help="Show personal values (audited).")]
    = False,
    as_of: Annotated[str | None, typer.Option(
        "--as-of", help="What was true at this time (ISO 8601) instead of now.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Recall the memories that best match a query (now, or --as-of a past time)."""
    try:
        with _vault(ctx, create=False, embeds=True) as vault:
            hits = vault.recall(query, scope=scope, k=k, reveal=reveal, as_of=as_of,
                                filters={"subject": subject} if subject else None)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json([h.model_dump(mode="json") for h in hits])
        return
    _print_hits(hits)


def list_cmd(
    ctx: typer.Context,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Last id of the previous page.")] = None,
    flagged: Annotated[bool, typer.Option(
        "--flagged", metavar="", help="Only memories the injection sanitiser flagged.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List memories, oldest first, one page at a time."""
    try:
        with _vault(ctx, create=False) as vault:
            page = vault.list(scope=scope, limit=limit, cursor=cursor, flagged=flagged)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(page.model_dump(mode="json"))
        return
    table = Table()
    for col in ("id", "scope", "type", "content"):
        table.add_column(col, overflow="fold")
    for m in page.items:
        table.add_row(str(m.id), Text(m.scope), m.type, Text(m.content[:120]))
    out.print(table)
    if page.next_cursor:
        out.print(f"next page: --cursor {page.next_cursor}", soft_wrap=True, highlight=False)


def delete(
    ctx: typer.Context,
    ids: Annotated[list[str], typer.Argument(help="Memory ids to forget.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", metavar="",
                                            help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Forget memories by id (all their versions too), after a preview.

    Exit 3 if an id does not exist (the others are forgotten), 5 if you answer no."""
    try:
        with _vault(ctx, create=False) as vault:
            preview = vault.forget_preview(ids)
            if not preview:
                raise NotFound("ids: no memory with any of these ids", field="ids")
            if not yes:
                for row in preview:
                    err.print(f"  {row['id']} {row['type']} {row['status']}: ",
                              Text(row["excerpt"]), sep="", highlight=False)
                n = len(preview)
                if not _confirm(f"forget {'this memory' if n == 1 else f'these {n} memories'}?"):
                    _declined()
            res = vault.delete(ids, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
    else:
        out.print(f"forgot {_plural(len(res.deleted), 'memory', 'memories')} "
                  f"(audit seq {res.audit_seq})")
    _not_found(res.not_found, "memory with id", "ids")


def import_cmd(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(
        help="JSON Lines (one record a line), a JSON record or array of records, or LoCoMo.",
        exists=True, dir_okay=False)],
    scope: Annotated[str, typer.Option(
        help="Scope for the records that name none (a record's own scope wins).")]
        = "default",
    force_scope: Annotated[str | None, typer.Option(
        help="Scope for every record, whatever the file says.")] = None,
    format: Annotated[str, typer.Option(help="auto, jsonl, json or locomo.")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Memories per transaction (1-1000).")]
        = 128,
    skip: Annotated[int, typer.Option(
        help="Records at the start of the file to leave out.")] = 0,
    all_or_nothing: Annotated[bool, typer.Option(
        "--all-or-nothing", metavar="",
        help="One transaction for the whole file: any refused record stores nothing.")]
        = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Import a conversation file: every record (or LoCoMo turn) becomes an episode.

    A record is {"text", "subject"?, "scope"?, "timestamp"? (ISO 8601), "source_id"?}.
    Records whose source_id is stored already in their scope are skipped, so running an
    import again (or after it was interrupted) stores only what is missing. A record the
    capture guard refuses is left out and named (line and detector, never its text); the
    rest is stored and the exit status is 5. Each batch is one transaction (one
    transaction for all with --all-or-nothing)."""
    if not 1 <= batch_size <= 1000:
        _fail(ValidationError("batch-size: must be in 1..1000", field="batch_size"))
    if skip < 0:
        _fail(ValidationError("skip: must be 0 or more", field="skip"))
    try:
        plan = _read_import(path, scope=scope, force_scope=force_scope, fmt=format)
        with _vault(ctx) as vault:
            summary = _import(vault, plan, path, batch_size=batch_size, quiet=as_json,
                              skip=skip, all_or_nothing=all_or_nothing)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(summary)
    else:
        _print_import(summary)
    if summary["refused"]:
        raise typer.Exit(EXIT_CODES["refused"])


def _print_import(summary: dict[str, Any]) -> None:
    n = summary["imported"]
    if n:
        scopes = ", ".join(f"{s} ({c})" for s, c in summary["scopes"].items())
        where = "scope" if len(summary["scopes"]) == 1 else "scopes"
        out.print(f"imported [bold]{n}[/] {'memory' if n == 1 else 'memories'} into {where} ",
                  Text(scopes), f" in {summary['seconds']} s ({summary['per_second']}/s)",
                  sep="", highlight=False, soft_wrap=True)
    else:
        out.print("imported nothing new", highlight=False)
    if summary["already_stored"]:
        out.print(f"skipped {_plural(summary['already_stored'], 'record', 'records')} "
                  "stored already (same source_id in the same scope)", highlight=False)
    for r in summary["refused"]:
        err.print(f"refused {r['record']}: the capture guard's detector {r['detector']!r} "
                  f"found {r['kind']} in {r['field']} (severity {r['severity']}); not stored",
                  markup=False, highlight=False, soft_wrap=True)
    if summary["refused"]:
        err.print(f"{_plural(len(summary['refused']), 'record was', 'records were')} refused "
                  "(exit status 5); the others were stored", highlight=False)


def flagged_cmd(
    ctx: typer.Context,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Last id of the previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the memories the injection sanitiser flagged (imported or tool-supplied text
    with phrasing aimed at a model), for a person to review: ``list --flagged``."""
    list_cmd(ctx, scope=scope, limit=limit, cursor=cursor, flagged=True, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add ``remember``, ``recall``, ``list``, ``flagged``, ``delete`` and ``import``."""
    app.command()(remember)
    app.command()(recall)
    app.command("list")(list_cmd)
    app.command("flagged")(flagged_cmd)
    app.command()(delete)
    app.command("import")(import_cmd)
