"""Governance commands: ``forget`` (preview or confirm), ``pin``, ``unpin`` and the
``retention`` group (``retention run``)::

    mnemovault forget --preview "the trip to Lisbon" --scope me   # what would go
    mnemovault forget --preview 0190…                             # by id: versions, facts
    mnemovault forget --confirm 0190… 0190…                       # delete exactly these
    mnemovault pin 0190…        |  mnemovault unpin 0190…
    mnemovault retention run [--dry-run] [--all-tenants]

Every command calls :class:`~mnemovault.vault.MemoryVault` (the same functions as the HTTP
API), as the local operator (owner of ``--tenant``). An id that does not exist exits 3 (the
others are still handled), as the endpoints answer 404; none of these commands creates a
database (exit 7 when the data dir has none).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _not_found, _vault, err, out
from mnemovault.errors import MnemoError, ValidationError


def _ids_or_query(targets: list[str]) -> tuple[list[Any], str | None]:
    from mnemovault.governance.commands import parse_ids

    text = " ".join(targets).strip()
    parsed = parse_ids(text)
    if parsed.malformed:
        n = parsed.malformed[0]
        raise ValidationError(f"targets: argument {n} is not a valid memory id (a UUID)",
                              field="targets")
    if parsed.ids and parsed.words:
        raise ValidationError("targets: give either memory ids or a query, not both",
                              field="targets")
    if parsed.ids:
        return list(parsed.ids), None
    if not text:
        raise ValidationError("targets: give memory ids or a query", field="targets")
    return [], text


def forget(
    ctx: typer.Context,
    targets: Annotated[list[str], typer.Argument(help="Memory ids, or a query (in words).")],
    preview: Annotated[bool, typer.Option("--preview", help="Show what would be forgotten; "
                                          "delete nothing.")] = False,
    confirm: Annotated[bool, typer.Option("--confirm", help="Forget exactly these ids "
                                          "(a query only with ALLOW_SEMANTIC_FORGET=true).")]
        = False,
    scope: Annotated[str | None, typer.Option(help="Only this scope (required with a query; "
                                              "default 'default' then).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Forget memories with their versions, derived facts, graph and unused vault values."""
    try:
        if preview == confirm:
            raise ValidationError("preview: give exactly one of --preview and --confirm",
                                  field="preview")
        ids, query = _ids_or_query(targets)
        if query is not None and scope is None:
            scope = "default"
        with _vault(ctx, create=False) as vault:
            if preview:
                rows = vault.forget_preview(ids or None, query=query, scope=scope)
            else:
                res = vault.forget(ids or None, query=query, scope=scope, trigger="cli")
    except MnemoError as exc:
        if exc.details.get("candidates"):
            err.print("top candidates: " + " ".join(exc.details["candidates"]),
                      highlight=False)
        _fail(exc)
        return
    if preview:
        named = {str(r["id"]) for r in rows if r["reason"] == "named"}
        missing = [i for i in ids if str(i) not in named]
        if as_json:
            _emit_json(rows)
        elif not rows:
            out.print("nothing would be forgotten", highlight=False)
        else:
            for r in rows:
                flags = ", ".join([r["type"], *(["archived"] if r["archived"] else []),
                                   *([r["reason"]] if r["reason"] != "named" else [])])
                text = (" ".join(r["excerpt"].split()) if r["excerpt"] is not None
                        else f"(text withheld: {r['withheld']})")
                out.print(f"{r['id']} ({flags}): {text}",
                          highlight=False, markup=False)
            out.print(f"{len(rows)} memories would be forgotten; nothing was deleted",
                      highlight=False)
        _not_found(missing, "memory with id", "targets")
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
        _not_found(res.not_found, "memory with id", "targets")
        return
    out.print(f"forgot {len(res.deleted)} memories ({len(res.derived)} derived), "
              f"shredded {len(res.shredded)} vault values, removed "
              f"{res.graph_nodes_removed} graph nodes and {res.graph_edges_removed} edges"
              + (f"; {len(res.not_found)} ids not found" if res.not_found else "")
              + (f" (audit seq {res.audit_seq})" if res.audit_seq else ""),
              highlight=False)
    _not_found(res.not_found, "memory with id", "targets")


def _pin(ctx: typer.Context, ids: list[str], scope: str | None, as_json: bool,
         pinned: bool) -> None:
    try:
        with _vault(ctx, create=False) as vault:
            fn = vault.pin if pinned else vault.unpin
            res = fn(ids, scope=scope, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
    else:
        verb = "pinned" if pinned else "unpinned"
        out.print(f"{verb} {len(res.changed)} memories"
                  + (f"; {len(res.not_found)} ids not found" if res.not_found else ""),
                  highlight=False)
    _not_found(res.not_found, "memory with id", "ids")


def pin(
    ctx: typer.Context,
    ids: Annotated[list[str], typer.Argument(help="Memory ids.")],
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Pin memories: retention never archives or deletes them."""
    _pin(ctx, ids, scope, as_json, True)


def unpin(
    ctx: typer.Context,
    ids: Annotated[list[str], typer.Argument(help="Memory ids.")],
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Unpin memories: back to normal retention."""
    _pin(ctx, ids, scope, as_json, False)


def retention_run(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be archived; "
                                          "change nothing.")] = False,
    all_tenants: Annotated[bool, typer.Option("--all-tenants", help="Every tenant, not only "
                                              "--tenant.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Run the retention job: archive low-scoring unpinned memories (and forget unused ones
    when MNEMOVAULT_RETENTION_DELETE_UNUSED_DAYS is set). Schedule it with cron."""
    try:
        with _vault(ctx, create=False) as vault:
            results = (vault.run_retention_all(dry_run=dry_run) if all_tenants
                       else [vault.run_retention(dry_run=dry_run)])
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json([r.model_dump(mode="json") for r in results])
        return
    for r in results:
        verb = "would archive" if r.dry_run else "archived"
        out.print(f"tenant {r.tenant}: {verb} {len(r.archived)} memories, "
                  f"forgot {len(r.deleted)}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``forget``, ``pin``, ``unpin`` and the ``retention`` group to ``app``."""
    app.command("forget")(forget)
    app.command("pin")(pin)
    app.command("unpin")(unpin)
    retention_app = typer.Typer(help="Retention: archive low-value memories.",
                                no_args_is_help=True)
    retention_app.command("run")(retention_run)
    app.add_typer(retention_app, name="retention")
