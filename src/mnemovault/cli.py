"""The ``mnemovault`` command line (Typer + Rich). Every command calls :class:`MemoryVault`.

Global options come before the command: ``mnemovault --data-dir DIR --tenant T recall …``.
``--json`` on a command prints machine-readable output on stdout (progress goes to stderr).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from mnemovault.config import Settings
from mnemovault.errors import MnemoError, Unavailable, ValidationError

app = typer.Typer(help="mnemovault: governed long-term memory for AI agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
kek_app = typer.Typer(help="Key-encryption keys of the PII vault.", no_args_is_help=True)
pii_app = typer.Typer(help="The PII vault: entries, shredding, export.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(kek_app, name="kek")
audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)
app.add_typer(pii_app, name="vault")
app.add_typer(audit_app, name="audit")

out = Console()
err = Console(stderr=True)

EXIT_CODES = {"validation": 2, "not_found": 3, "forbidden": 4, "unauthenticated": 4,
              "conflict": 5, "refused": 5, "unavailable": 6, "config": 7}


@dataclass
class State:
    settings: Settings


def _state(ctx: typer.Context) -> State:
    return ctx.ensure_object(State)


@app.callback()
def main_callback(
    ctx: typer.Context,
    data_dir: Annotated[Path | None, typer.Option(
        help="Embedded database directory (default: the user data dir). Ignored with "
             "DATABASE_URL.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant for local commands.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)
    settings = Settings()
    updates: dict[str, Any] = {}
    if data_dir is not None:
        updates["data_dir"] = data_dir
    if tenant is not None:
        updates["tenant"] = tenant
    ctx.obj = State(settings.model_copy(update=updates) if updates else settings)


@contextmanager
def _vault(ctx: typer.Context) -> Iterator[Any]:
    import psycopg

    from mnemovault.vault import MemoryVault

    settings = _state(ctx).settings
    try:
        with err.status("opening the database and loading the embedder…"):
            vault = MemoryVault.open(settings)
    except (psycopg.Error, OSError) as exc:
        raise Unavailable(f"database: cannot open ({type(exc).__name__}); check DATABASE_URL "
                          "or --data-dir") from None
    try:
        yield vault
    finally:
        vault.close()


def _fail(exc: MnemoError) -> None:
    err.print(f"[bold red]error[/] ({exc.code}): {exc.message}", highlight=False)
    raise typer.Exit(EXIT_CODES.get(exc.code, 1))


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=str, ensure_ascii=False, indent=2) + "\n")


# -- db -------------------------------------------------------------------------------
@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Create or migrate the schema to the latest revision."""
    from mnemovault.embed import make_embedder
    from mnemovault.store.db import Database

    settings = _state(ctx).settings
    try:
        db = Database.from_settings(settings)
        embedder = make_embedder(settings)
        before, after = db.upgrade(embedder.dimension)
        db.check_embedder(embedder.model, embedder.dimension)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"from": before, "to": after})
    else:
        out.print(f"schema at revision [bold]{after}[/] (was {before or 'empty'})")


# -- keys -----------------------------------------------------------------------------
@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="Tenant id (created if new).")],
    role: Annotated[str, typer.Option(help="owner, admin, member or service.")] = "member",
    name: Annotated[str | None, typer.Option(help="A label for the key.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create an API key. The token is printed once and never stored."""
    try:
        with _vault(ctx) as vault:
            token, key_id = vault.create_key(tenant, role, name=name)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"tenant": tenant, "role": role, "key_id": str(key_id), "token": token})
    else:
        out.print(f"key [bold]{key_id}[/] for tenant [bold]{tenant}[/], role {role}:")
        out.print(token, highlight=False, soft_wrap=True)
        err.print("[dim]store it now: it cannot be shown again[/]")


# -- kek and vault -----------------------------------------------------------------------------
@kek_app.command("rotate")
def kek_rotate(
    ctx: typer.Context,
    retire: Annotated[bool, typer.Option(
        help="Destroy the old KEK versions after rewrapping (irreversible).")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Rewrap every data key under a new KEK version (ciphertexts are not touched)."""
    try:
        with _vault(ctx) as vault:
            res = vault.rotate_kek(retire=retire)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res)
    else:
        out.print(f"KEK version {res['kek_version']} is current; rewrapped {res['rewrapped']} "
                  f"data keys in {res['tenants']} tenant(s)"
                  + (f"; destroyed versions {res['retired']}" if res["retired"] else ""))


@pii_app.command("list")
def vault_list(ctx: typer.Context,
               limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 50,
               cursor: Annotated[str | None, typer.Option(help="Last placeholder seen.")] = None,
               as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List vault entries (metadata only, never values)."""
    try:
        with _vault(ctx) as vault:
            rows = vault.vault_entries(limit=limit, cursor=cursor)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(rows)
        return
    table = Table()
    for col in ("placeholder", "kind", "created", "shredded"):
        table.add_column(col)
    for r in rows:
        table.add_row(Text(r["placeholder"]), r["kind"], str(r["created_at"])[:19],
                      str(r["shredded_at"])[:19] if r["shredded_at"] else "")
    out.print(table)


@pii_app.command("shred")
def vault_shred(ctx: typer.Context,
                placeholders: Annotated[list[str], typer.Argument(help="Placeholders.")],
                as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Crypto-shred values: every record using them shows [erased] from now on."""
    try:
        with _vault(ctx) as vault:
            done = vault.shred(placeholders, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"shredded": done})
    else:
        out.print(f"shredded {len(done)} value(s)")


@pii_app.command("export")
def vault_export(ctx: typer.Context) -> None:
    """Every live entry with its value, as JSON Lines on stdout (audited)."""
    try:
        with _vault(ctx) as vault:
            rows = vault.vault_export()
    except MnemoError as exc:
        _fail(exc)
        return
    for r in rows:
        sys.stdout.write(json.dumps(r, default=str, ensure_ascii=False) + "\n")


# -- audit -----------------------------------------------------------------------------------
@audit_app.command("verify")
def audit_verify(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(
        help="A JSON Lines export; without it, the tenant's chain in the database.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="A saved signed checkpoint.")] = None,
    public_key: Annotated[Path | None, typer.Option(
        help="The checkpoint signer's public key (vkey file).")] = None,
    allow_partial: Annotated[bool, typer.Option(
        help="Accept an export that does not start at seq 1.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every link and row hash (and, with a checkpoint, truncation and rewrites).
    Prints the first failing line and why; exits 1 on failure."""
    from mnemovault.audit.verify import verify_file

    try:
        if file is not None:
            result = verify_file(file, checkpoint, public_key, allow_partial=allow_partial)
        else:
            with _vault(ctx) as vault:
                result = vault.audit.verify(vault.principal())
    except MnemoError as exc:
        _fail(exc)
        return
    except (OSError, ValueError) as exc:
        err.print(f"[bold red]error[/]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        _emit_json(result.to_dict())
    else:
        (out if result.ok else err).print(Text(result.summary()))
    raise typer.Exit(0 if result.ok else 1)


@audit_app.command("export")
def audit_export(
    ctx: typer.Context,
    start: Annotated[int | None, typer.Option("--from", help="First seq (inclusive).")] = None,
    end: Annotated[int | None, typer.Option("--to", help="Last seq (inclusive).")] = None,
) -> None:
    """Write the tenant's chain as JSON Lines to stdout."""
    try:
        with _vault(ctx) as vault:
            for chunk in vault.audit.export(vault.principal(), start, end):
                sys.stdout.buffer.write(chunk)
    except MnemoError as exc:
        _fail(exc)


@audit_app.command("checkpoint")
def audit_checkpoint(
    ctx: typer.Context,
    sign: Annotated[bool, typer.Option(help="Sign one at the current size first.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the latest signed checkpoint (save it: it catches later truncation)."""
    try:
        with _vault(ctx) as vault:
            cp = vault.audit.checkpoint(vault.principal(), sign_now=sign)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(cp)
    else:
        sys.stdout.write(cp["note"])


@audit_app.command("proof")
def audit_proof(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="inclusion or consistency")],
    a: Annotated[int, typer.Argument(help="seq (inclusion) or first size (consistency)")],
    b: Annotated[int, typer.Argument(help="tree size (inclusion) or second size")],
) -> None:
    """An RFC 9162 inclusion or consistency proof, as JSON."""
    try:
        with _vault(ctx) as vault:
            who = vault.principal()
            if kind == "inclusion":
                _emit_json(vault.audit.inclusion(who, a, b))
            elif kind == "consistency":
                _emit_json(vault.audit.consistency(who, a, b))
            else:
                raise ValidationError("kind: must be inclusion or consistency", field="kind")
    except MnemoError as exc:
        _fail(exc)


# -- remember / recall ----------------------------------------------------------------------
@app.command()
def remember(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="What to remember.")],
    scope: Annotated[str, typer.Option(help="Scope (namespace) inside the tenant.")] = "default",
    subject: Annotated[str | None, typer.Option(help="Who the memory is about.")] = None,
    key: Annotated[str | None, typer.Option(help="Upsert key: a new version supersedes.")] = None,
    type: Annotated[str, typer.Option(help="episode, fact or procedure.")] = "episode",
    entity: Annotated[list[str] | None, typer.Option(
        help="A personal value to pseudonymise, as kind=value (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Remember one memory."""
    entities = []
    for e in entity or []:
        kind, sep, value = e.partition("=")
        if not sep:
            _fail(ValidationError("entity: must be kind=value", field="entity"))
        entities.append({"kind": kind, "value": value})
    try:
        with _vault(ctx) as vault:
            r = vault.remember(text, scope=scope, subject=subject, key=key, type=type,
                               provenance={"source": "cli"}, entities=entities)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(r.model_dump(mode="json"))
    else:
        extra = f", supersedes {r.superseded}" if r.superseded else ""
        out.print(f"remembered [bold]{r.id}[/] (version {r.version}{extra})")
        if r.placeholders:
            out.print("new vault entries: " + " ".join(r.placeholders), highlight=False)


@app.command()
def recall(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    scope: Annotated[str, typer.Option(help="Scope to search.")] = "default",
    k: Annotated[int, typer.Option("-k", help="How many results (1-100).")] = 5,
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
    reveal: Annotated[bool, typer.Option(help="Show personal values (audited).")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Recall the memories that best match a query."""
    try:
        with _vault(ctx) as vault:
            hits = vault.recall(query, scope=scope, k=k, reveal=reveal,
                                filters={"subject": subject} if subject else None)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json([h.model_dump(mode="json") for h in hits])
        return
    _print_hits(hits)


def _print_hits(hits: list[Any]) -> None:
    table = Table(show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("when")
    table.add_column("memory", overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), f"{h.score:.3f}", h.memory.created_at.strftime("%Y-%m-%d"),
                      Text(h.memory.content))  # Text: "[erased]" is not markup
    out.print(table)


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    scope: Annotated[str | None, typer.Option(help="Only this scope.")] = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Last id of the previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List memories, oldest first, one page at a time."""
    try:
        with _vault(ctx) as vault:
            page = vault.list(scope=scope, limit=limit, cursor=cursor)
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
        out.print(f"next page: --cursor {page.next_cursor}")


@app.command()
def delete(
    ctx: typer.Context,
    ids: Annotated[list[str], typer.Argument(help="Memory ids to forget.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Forget memories by id (all their versions too), after a preview."""
    try:
        with _vault(ctx) as vault:
            preview = vault.forget_preview(ids)
            if not preview:
                raise ValidationError("ids: none of these ids exists", field="ids")
            if not yes:
                for row in preview:
                    err.print(f"  {row['id']} {row['type']} {row['status']}: {row['excerpt']}",
                              highlight=False)
                if not typer.confirm(f"forget these {len(preview)} memories?", err=True):
                    raise typer.Exit(1)
            res = vault.delete(ids, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
    else:
        out.print(f"forgot {len(res.deleted)} memories (audit seq {res.audit_seq})")


# -- import -----------------------------------------------------------------------------
def _import(vault: Any, path: Path, *, scope: str, fmt: str, batch_size: int,
            quiet: bool) -> dict[str, Any]:
    from mnemovault.importers import read_file

    plan = read_file(path, default_scope=scope, fmt=fmt)
    items = plan.items
    started = time.perf_counter()
    scopes: set[str] = set()
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(), console=err,
                  disable=quiet) as progress:
        task = progress.add_task(f"importing {path.name}", total=len(items))
        for i in range(0, len(items), batch_size):
            batch = items[i : i + batch_size]
            vault.remember_many(batch, trigger="import")
            scopes.update(b.scope for b in batch)
            progress.advance(task, len(batch))
    elapsed = time.perf_counter() - started
    return {"file": str(path), "format": plan.format, "imported": len(items),
            "scopes": len(scopes), "seconds": round(elapsed, 2),
            "per_second": round(len(items) / elapsed, 1) if elapsed else None}


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="LoCoMo JSON or JSON Lines file.",
                                         exists=True, dir_okay=False)],
    scope: Annotated[str, typer.Option(help="Scope for JSON Lines records without one.")]
        = "default",
    format: Annotated[str, typer.Option(help="auto, locomo or jsonl.")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Memories per transaction.")] = 128,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Import a conversation file: every turn becomes an episode."""
    if not 1 <= batch_size <= 1000:
        _fail(ValidationError("batch-size: must be in 1..1000", field="batch_size"))
    try:
        with _vault(ctx) as vault:
            summary = _import(vault, path, scope=scope, fmt=format, batch_size=batch_size,
                              quiet=as_json)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(summary)
    else:
        out.print(f"imported [bold]{summary['imported']}[/] memories into "
                  f"{summary['scopes']} scope(s) in {summary['seconds']} s "
                  f"({summary['per_second']}/s)")


# -- serve --------------------------------------------------------------------------------
@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8077,
) -> None:
    """Run the HTTP API (docs at /docs)."""
    import uvicorn

    from mnemovault.api import create_app

    try:
        with _vault(ctx) as vault:
            err.print(f"serving on http://{host}:{port} (OpenAPI docs at /docs)")
            uvicorn.run(create_app(vault), host=host, port=port, log_level="info")
    except MnemoError as exc:
        _fail(exc)


# -- demo (the main job) ----------------------------------------------------------------------
DEMO_QUESTIONS = (
    "Which pets can Priya be around?",
    "Which market does Priya go to every Saturday?",
)


@app.command()
def demo(ctx: typer.Context,
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Import the example conversation into tenant 'demo', recall from it, show next steps."""
    state = _state(ctx)
    state.settings = state.settings.model_copy(update={"tenant": "demo"})
    example = resources.files("mnemovault.examples") / "demo_conversation.jsonl"
    report: dict[str, Any] = {"data_dir": str(state.settings.data_dir)
                              if not state.settings.database_url else None}
    try:
        with _vault(ctx) as vault, resources.as_file(example) as path:
            existing = vault.list(scope="demo", limit=1)
            if existing.items:
                report["import"] = {"skipped": "scope 'demo' already holds the example"}
            else:
                report["import"] = _import(vault, path, scope="demo", fmt="jsonl",
                                           batch_size=64, quiet=as_json)
            report["recall"] = []
            for q in DEMO_QUESTIONS:
                hits = vault.recall(q, scope="demo", k=3)
                report["recall"].append({"query": q, "hits": [
                    {"score": round(h.score, 4), "content": h.memory.content} for h in hits]})
                if not as_json:
                    out.print(f"\n[bold]recall[/] {q!r}")
                    _print_hits(hits)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(report)
        return
    imp = report["import"]
    if "imported" in imp:
        out.print(f"\nimported {imp['imported']} turns of the example conversation "
                  f"in {imp['seconds']} s")
    where = report["data_dir"] or "DATABASE_URL"
    out.print(f"""
[bold]Try next[/] (database: {where})
  mnemovault --tenant demo recall "what is Sam training for?" --scope demo
  mnemovault --tenant demo remember "Priya's birthday is in May" --scope demo --subject priya
  mnemovault import my_conversation.jsonl --scope me      # JSON Lines or LoCoMo
  mnemovault keys create --tenant demo --role owner       # an API key for the HTTP service
  mnemovault serve                                        # HTTP API on http://127.0.0.1:8077/docs
""", highlight=False)


def _register_extensions() -> None:
    """Command groups that live in their own modules (chat and governance commands)."""
    try:
        from mnemovault import cli_governance
    except ImportError:
        return
    cli_governance.register(app)


_register_extensions()


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":
    main()
