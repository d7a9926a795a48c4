"""``mnemovault librarian``: the consolidation job (SPEC section 5; :mod:`mnemovault.librarian`)::

    mnemovault librarian run [--scope S] [--dry-run] [--json]

Merges near-duplicate episodes into facts, distils facts about each subject (extractive,
or with the chat model when ``MNEMOVAULT_CHAT_PROVIDER`` names one), fades facts nothing
used, as the local operator (owner of ``--tenant``). A rerun writes only what is missing.
A progress bar (one step a scope) goes to stderr; ``--json`` prints the result. Another run
of the tenant under way: nothing is done, exit 5. None of these commands creates a database
(exit 7 when the data dir has none).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _vault, err, out
from mnemovault.errors import Conflict, MnemoError

librarian_app = typer.Typer(help="The librarian: consolidate episodes into facts.",
                            no_args_is_help=True)


@librarian_app.command("run")
def librarian_run(
    ctx: typer.Context,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan and report; write "
                                          "nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Run the librarian over the tenant (every scope, or --scope)."""
    try:
        with _vault(ctx, create=False) as vault, Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), console=err, transient=True,
                disable=as_json) as bar:
            task = bar.add_task("librarian: scopes", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            res = vault.librarian.run(scope=scope, dry_run=dry_run, progress=progress)
    except MnemoError as exc:
        _fail(exc)
        return
    if res.locked:
        _fail(Conflict("librarian: another run of this tenant is under way; nothing was "
                       "done (retry when it ends)"))
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
        return
    verb = "would write" if dry_run else "wrote"
    n = len(res.written) if not dry_run else res.planned - res.existing
    line: dict[str, Any] = {"scopes": res.scopes, "episodes": res.episodes,
                            "merged": res.merged, "distilled": res.distilled,
                            "already there": res.existing}
    out.print(f"librarian {verb} {n} fact{'s' if n != 1 else ''} ("
              + ", ".join(f"{k} {v}" for k, v in line.items()) + ")"
              + (f"; faded {res.faded}, restored {res.restored}" if res.faded or res.restored
                 else "") + (f"; model {res.model}" if res.model else "; extractive")
              + (f"; {res.failed} not written (retry)" if res.failed else ""),
              highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``librarian`` group to ``app``."""
    app.add_typer(librarian_app, name="librarian")
