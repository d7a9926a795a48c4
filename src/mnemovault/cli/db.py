"""``mnemovault db``: database administration (``db upgrade``, ``db info``,
``db reindex-terms``, ``db seal``, and on Citus ``db add-node`` / ``db remove-node`` /
``db rebalance-status``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mnemovault.cli._common import (
    JSON_HELP,
    _emit_json,
    _fail,
    _require_database,
    _state,
    _vault,
    err,
    out,
)
from mnemovault.errors import ConfigError, MnemoError

db_app = typer.Typer(help="Database administration.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context,
               as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Create or migrate the schema to the latest revision."""
    from mnemovault.embed import make_embedder
    from mnemovault.store.db import Database

    settings = _state(ctx).settings
    try:
        db = Database.from_settings(settings)
        embedder = make_embedder(settings)
        before, after = db.upgrade(embedder.dimension)
        db.check_embedder(embedder.model, embedder.dimension,
                          text_view=settings.embed_text_view)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"from": before, "to": after})
    else:
        out.print(f"schema at revision [bold]{after}[/] (was {before or 'empty'})")


@db_app.command("info")
def db_info(ctx: typer.Context,
            as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Show the schema revision, the erasure ledger (where it is; what this start found and
    re-erased, and the latest re-erase per tenant) and the topology: plain PostgreSQL, or
    the Citus nodes, the distributed tables (shard count, co-location) and the reference
    tables."""
    from mnemovault.store import citus

    settings = _state(ctx).settings
    try:
        _require_database(settings)
        with _vault(ctx, create=False) as vault:  # opening compares the erasure ledger
            db = vault.db
            revision = db.current_revision()
            info = {"revision": revision, **citus.topology(db.url),
                    "ledger": vault.subjects.ledger_status()}
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(info)
        return
    out.print(f"schema at revision [bold]{revision or 'empty'}[/], PostgreSQL "
              f"{info['server_version']}")
    _print_ledger(info["ledger"])
    if not info["citus"]:
        out.print("plain PostgreSQL (no Citus): one server holds every tenant")
        return
    from rich.table import Table

    out.print(f"Citus {info['version']}: {len(info['nodes'])} nodes, "
              f"{len(info['distributed'])} distributed tables"
              f"{' co-located with memories' if info['colocated'] else ' (NOT co-located)'}, "
              f"{len(info['reference'])} reference tables")
    nodes = Table("node", "host", "port", "role", "placements")
    for n in info["nodes"]:
        nodes.add_row(str(n["id"]), n["host"], str(n["port"]), n["role"],
                      str(n["placements"]))
    out.print(nodes)
    tables = Table("table", "kind", "shards", "co-location group")
    for d in info["distributed"]:
        tables.add_row(d["table"], "distributed by tenant_id", str(d["shards"]),
                       str(d["colocation"]))
    for t in info["reference"]:
        tables.add_row(t, "reference", "1", "")
    for t in info["local"]:
        tables.add_row(t, "local (coordinator)", "", "")
    out.print(tables)


_MODE_HELP = ("how shards move: auto (logical replication; needs wal_level = logical), "
              "force_logical, or block_writes (writes to a moving shard wait)")


def _owner_url(ctx: typer.Context) -> tuple[str, str]:
    from mnemovault.store.db import Database

    settings = _state(ctx).settings
    if not settings.database_url:
        raise ConfigError("DATABASE_URL: nodes are a Citus cluster's; set DATABASE_URL to "
                          "the coordinator (as a superuser for add-node/remove-node)")
    db = Database.from_settings(settings)
    return db.url, db.app_role


def _progress(as_json: bool) -> Any:
    def show(status: dict[str, Any]) -> None:
        if as_json:
            return
        tasks = ", ".join(f"{n} {s}" for s, n in sorted(status["tasks"].items()))
        err.print(f"rebalance job {status['job_id']}: {status['state']} ({tasks})",
                  highlight=False)
        for e in status["errors"]:
            err.print(f"  retrying after: {e}", highlight=False, soft_wrap=True)
    return show


@db_app.command("add-node")
def db_add_node(
        ctx: typer.Context, host: str, port: int,
        node_url: Annotated[str | None, typer.Option(
            "--node-url", help="connect to the node with this URL to prepare it (default: "
            "DATABASE_URL with the node's host and port)")] = None,
        rebalance: Annotated[bool, typer.Option(
            "--rebalance/--no-rebalance", help="start moving shards to the node")] = True,
        wait: Annotated[bool, typer.Option(
            "--wait/--no-wait", help="wait for the rebalance, showing its progress")] = False,
        mode: Annotated[str, typer.Option("--mode", help=_MODE_HELP)] = "auto",
        as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Add a Citus worker: prepare it (extensions, roles, the schema's owner and grants,
    the tenant signing key), add it (citus_add_node), check every worker, and start the
    rebalance (a background job; --wait follows it to the end)."""
    from mnemovault.store import citus_nodes

    try:
        url, app_role = _owner_url(ctx)
        res = citus_nodes.add_node(url, host, port, app_role, node=node_url,
                                   rebalance=rebalance, mode=mode)
        if wait and res["job_id"] is not None:
            res["rebalance"] = citus_nodes.wait_rebalance(url, res["job_id"],
                                                          progress=_progress(as_json))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res)
        return
    out.print(f"node {res['node_id']} {host}:{port} "
              f"{'added' if res['added'] else 'already in the cluster'}; prepared: "
              f"{', '.join(res['prepared']) or 'nothing to do'}", highlight=False)
    if res["job_id"] is None:
        out.print("no rebalance started" + ("" if not rebalance else " (nothing to move)"))
    elif "rebalance" in res:
        out.print(f"rebalance job {res['job_id']} finished: "
                  f"{res['rebalance']['tasks'].get('done', 0)} tasks", highlight=False)
    else:
        out.print(f"rebalance job {res['job_id']} started ({mode}); follow it with "
                  f"`mnemovault db rebalance-status {res['job_id']}`", highlight=False)


@db_app.command("remove-node")
def db_remove_node(
        ctx: typer.Context, host: str, port: int,
        mode: Annotated[str, typer.Option("--mode", help=_MODE_HELP)] = "auto",
        as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Remove a Citus worker: no new shards there, move its shards to the other workers
    (waits, showing progress), then citus_remove_node."""
    from mnemovault.store import citus_nodes

    try:
        url, _ = _owner_url(ctx)
        res = citus_nodes.remove_node(url, host, port, mode=mode,
                                      progress=_progress(as_json))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res)
    else:
        out.print(f"node {res['node_id']} {host}:{port} drained ({res['moved']} moves) and "
                  "removed", highlight=False)


@db_app.command("rebalance-status")
def db_rebalance_status(
        ctx: typer.Context, job_id: int,
        wait: Annotated[bool, typer.Option("--wait/--no-wait")] = False,
        as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Show (or --wait for) a rebalance job started by add-node."""
    from mnemovault.store import citus_nodes

    try:
        url, _ = _owner_url(ctx)
        status = (citus_nodes.wait_rebalance(url, job_id, progress=_progress(as_json))
                  if wait else citus_nodes.rebalance_status(url, job_id))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(status)
    else:
        _progress(False)(status)


def _print_ledger(led: dict[str, Any]) -> None:
    if not led.get("enabled"):
        out.print("erasure ledger file: off (MNEMOVAULT_LEDGER_FILE=false)")
        return
    out.print(f"erasure ledger: {led['dir']}", highlight=False, soft_wrap=True)
    if led.get("inside_data_dir"):
        out.print("  WARNING: inside the data directory (a copy of it rolls the ledger back)")
    if led.get("legacy_dir"):
        out.print(f"  an earlier version's ledger is still in {led['legacy_dir']}",
                  highlight=False, soft_wrap=True)
    start = led.get("start") or {}
    behind = [t for t in start.get("tenants", []) if t["state"] == "behind"]
    out.print(f"  this start: {start.get('checked', 0)} tenant files compared in "
              f"{start.get('ms', 0)} ms; " + (f"{len(behind)} behind the ledger, re-erased"
                                              if behind else "the database is level"))
    for t in start.get("tenants", []):
        r = t.get("reapplied") or {}
        out.print(f"  tenant {t['tenant']}: {t['state']}; {t['lost']} entries the database "
                  f"lacked, {t['unverified']} unverified; removed "
                  f"{len(r.get('removed', []))} memories, {len(r.get('runs_removed', []))} "
                  f"runs, shredded {len(r.get('shredded', []))} values (REAPPLY seq "
                  f"{r.get('audit_seq')})", highlight=False)
        for p in t.get("problems", []):
            out.print(f"    {p}", highlight=False)
    for r in led.get("last_reapply", []):
        out.print(f"  tenant {r['tenant']}: last re-erase {r['at']} (audit seq "
                  f"{r['audit_seq']}, {'at a start' if r['restore'] else 'reapply-erasures'}"
                  f"): {r['memories']} memories, {r['procedure_runs']} runs, "
                  f"{r['placeholders']} values", highlight=False)


@db_app.command("seal")
def db_seal(ctx: typer.Context, batch: Annotated[int, typer.Option(min=1, max=10000)] = 500,
            as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Seal the records written before content encryption (issue 21: memories' content,
    keys and provenance, procedures' texts, runs' provenance) under their owners' content
    keys, in place, in committed batches (resumable: run it again after an interruption),
    with a progress bar; then delete rows under destroyed keys. Every start does the same
    before serving; this runs it on its own."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from mnemovault.cli._common import err
    from mnemovault.subjects import keys as content_keys

    settings = _state(ctx).settings
    token = content_keys.DEFER_SEAL.set(True)
    try:
        _require_database(settings)
        with _vault(ctx, create=False) as vault, Progress(
                SpinnerColumn(), TextColumn("{task.description}"), console=err,
                disable=as_json) as progress:
            task = progress.add_task("sealing records: 0", total=None)
            done = {"n": 0}

            def step(tenant: str, n: int) -> None:
                done["n"] += n
                progress.update(task, description=f"sealing records: {done['n']} "
                                                  f"(tenant {tenant})")

            sealed = content_keys.seal_existing(vault.rt, batch=batch, progress=step)
            swept = content_keys.sweep(vault.rt)
    except MnemoError as exc:
        _fail(exc)
        return
    finally:
        content_keys.DEFER_SEAL.reset(token)
    res = {"sealed": sealed, "busy": sealed is None, "removed_under_destroyed_keys":
           swept.removed}
    if as_json:
        _emit_json(res)
    elif sealed is None:
        out.print("another process is sealing this database now; nothing done")
    else:
        out.print(f"sealed {sealed} records; removed {swept.removed} under destroyed keys")


@db_app.command("reindex-terms")
def db_reindex_terms(ctx: typer.Context,
                     batch: Annotated[int, typer.Option(min=1, max=10_000,
                                                        help="rows per transaction")] = 500,
                     as_json: Annotated[bool, typer.Option(
                         "--json", help=JSON_HELP)] = False) -> None:
    """Rewrite the lexical terms of memories stored before migration 0014 (plain lexemes)
    as keyed hashes, in committed batches (resumable: run it again after a stop). Every
    start does the same before serving; this shows a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    try:
        with _vault(ctx, create=False, reindex=False) as vault, Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(),
                MofNCompleteColumn(), console=err, disable=as_json) as progress:
            task = progress.add_task("re-indexing lexical terms", total=None)

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            report = vault.lexical.reindex(batch=batch, progress=step)
            left = sum(vault.lexical.pending().values())
    except MnemoError as exc:
        _fail(exc)
        return
    result = {"rows": report.total, "tenants": report.rows, "batches": report.batches,
              "ms": report.ms, "left": left}
    if as_json:
        _emit_json(result)
    else:
        out.print(f"re-indexed {report.total} rows in {report.batches} batches "
                  f"({report.ms:.0f} ms); {left} left")


def register(app: typer.Typer) -> None:
    """Add the ``db`` group to ``app``."""
    app.add_typer(db_app, name="db")
