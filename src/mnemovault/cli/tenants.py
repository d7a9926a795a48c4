"""``mnemovault tenant`` (``export``, ``export-status``, ``delete``, ``cancel-delete``,
``status``, ``purge``) and ``mnemovault worker`` (the outbox worker and the purge schedule,
on their own, without the HTTP server).

The ``tenant`` commands act as the local operator (owner) of the tenant named as their
argument. ``export`` and ``delete`` need the typed confirmation ``DELETE-<tenant>``: given
with ``--confirm``, or typed at the prompt (a wrong or missing one is refused, exit 5)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from mnemovault.cli._common import (
    JSON_HELP,
    _declined,
    _emit_json,
    _fail,
    _hint,
    _timestamp,
    _vault,
    err,
    out,
)
from mnemovault.errors import MnemoError

tenant_app = typer.Typer(help="Tenant export and deletion.", no_args_is_help=True)

TenantArg = Annotated[str, typer.Argument(help="Tenant id.")]
ConfirmOption = Annotated[str | None, typer.Option(
    help="The typed confirmation, DELETE-<tenant> (asked for when not given).")]
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def _confirmation(tenant: str, confirm: str | None, what: str) -> str:
    """``--confirm``, else what the user types at the prompt (end of input: nothing done,
    exit 5)."""
    if confirm is not None:
        return confirm
    try:
        return str(typer.prompt(f"{what} tenant {tenant!r}: type DELETE-{tenant} to confirm",
                                err=True, default="", show_default=False))
    except typer.Abort:
        err.print()
        _declined()
        raise  # unreachable: _declined exits


def _print_state(state: dict[str, Any]) -> None:
    if state.get("deleted"):
        out.print(f"tenant [bold]{state['tenant']}[/] is deleted; its keys no longer work; "
                  f"purged for good after {state['delete_after']:%Y-%m-%d %H:%M} UTC "
                  f"(cancel before: {_hint('tenant cancel-delete ' + state['tenant'])})",
                  highlight=False, soft_wrap=True)
    else:
        out.print(f"tenant [bold]{state['tenant']}[/] is not deleted", highlight=False)


@tenant_app.command("export")
def export(ctx: typer.Context, tenant: TenantArg, confirm: ConfirmOption = None,
           wait: Annotated[bool, typer.Option(
               metavar="", help="Write the archive now, in this process (--no-wait: only "
                                "queue it for the worker).")] = True,
           as_json: JsonOption = False) -> None:
    """Export the whole tenant: memories, vault entries (still encrypted), the audit chain,
    its checkpoints and a manifest of SHA-256 hashes, to EXPORT_BUCKET (S3, SSE AES256) or
    the local export directory."""
    try:
        with _vault(ctx, create=False) as vault:
            typed = _confirmation(tenant, confirm, "export")
            job = vault.tenants.export(tenant, confirm=typed)
            if wait:
                with Progress(TextColumn("[progress.description]{task.description}"),
                              BarColumn(), MofNCompleteColumn(), console=err,
                              disable=as_json) as progress:
                    task = progress.add_task(f"exporting {tenant}", total=None)

                    def tick(done: int, total: int) -> None:
                        progress.update(task, completed=done, total=total)

                    vault.tenants.process_outbox(tenant=tenant, progress=tick)
            result = vault.tenants.export_status(tenant, job["job_id"])
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(result)
    else:
        out.print(f"export [bold]{result['job_id']}[/]: {result['state']} -> "
                  f"{result['destination']}", highlight=False, soft_wrap=True)
        if result["manifest_sha256"]:
            out.print(f"manifest.json sha256 {result['manifest_sha256']}", highlight=False,
                      soft_wrap=True)
        if result["error"]:
            err.print(f"last attempt failed: {result['error']}", highlight=False)
        if result["state"] == "queued" and not wait:
            err.print(f"queued: `{_hint('worker')}` (or `{_hint('serve')}`) writes it",
                      highlight=False, markup=False)
    if result["state"] == "failed" or (wait and result["state"] != "done"):
        raise typer.Exit(6)


@tenant_app.command("export-status")
def export_status(ctx: typer.Context, tenant: TenantArg,
                  job_id: Annotated[str, typer.Argument(help="The export's job id.")],
                  as_json: JsonOption = False) -> None:
    """An export job's state and progress."""
    try:
        with _vault(ctx, create=False) as vault:
            result = vault.tenants.export_status(tenant, job_id)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(result)
        return
    p = result["progress"]
    out.print(f"export {result['job_id']}: {result['state']}, {p['rows_done']}/"
              f"{p['rows_total']} rows, {p['files_done']}/{p['files_total']} files -> "
              f"{result['destination']}", highlight=False, soft_wrap=True)


@tenant_app.command("delete")
def delete(ctx: typer.Context, tenant: TenantArg, confirm: ConfirmOption = None,
           as_json: JsonOption = False) -> None:
    """Soft-delete the tenant: its API keys stop working now, and the scheduled purge
    removes every row of it after DELETE_RETENTION_DAYS (default 30) unless cancelled."""
    try:
        with _vault(ctx, create=False) as vault:
            state = vault.tenants.delete(tenant, confirm=_confirmation(tenant, confirm,
                                                                       "delete"))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(state)
    else:
        _print_state(state)


@tenant_app.command("cancel-delete")
def cancel_delete(ctx: typer.Context, tenant: TenantArg, as_json: JsonOption = False) -> None:
    """Cancel a pending deletion during its grace period; the keys work again."""
    try:
        with _vault(ctx, create=False) as vault:
            state = vault.tenants.cancel_delete(tenant)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(state)
    elif state["cancelled"]:
        out.print(f"deletion of tenant [bold]{tenant}[/] cancelled", highlight=False)
    else:
        out.print(f"tenant [bold]{tenant}[/] was not deleted: nothing to cancel",
                  highlight=False)


@tenant_app.command("status")
def status(ctx: typer.Context, tenant: TenantArg, as_json: JsonOption = False) -> None:
    """Whether the tenant is deleted, and until when it can be restored."""
    try:
        with _vault(ctx, create=False) as vault:
            state = vault.tenants.status(tenant)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(state)
    else:
        _print_state(state)


@tenant_app.command("purge")
def purge(ctx: typer.Context,
          now: Annotated[str | None, typer.Option(
              help="Purge as if it were this time (ISO 8601; default: now).")] = None,
          as_json: JsonOption = False) -> None:
    """Hard-delete every tenant whose grace period is over (what the schedule does every
    6 hours). Skipped, exit 0, when another process is purging."""
    try:
        at = _timestamp(now, "now")
        with _vault(ctx, create=False) as vault:
            result = vault.tenants.purge_expired(now=at)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(result)
    elif not result["ran"]:
        out.print("another process is purging: skipped")
    else:
        for p in result["purged"]:
            out.print(f"purged tenant [bold]{p['tenant']}[/]: {p['rows']} rows "
                      f"(system audit row {p['audit_seq']})", highlight=False)
        if not result["purged"]:
            out.print("no tenant is due for purging")
    if result["errors"]:
        raise typer.Exit(6)


def worker(ctx: typer.Context,
           once: Annotated[bool, typer.Option(
               "--once", metavar="", help="One pass (outbox, then purge) and exit.")] = False,
           as_json: JsonOption = False) -> None:
    """Run the outbox worker (tenant exports) and the purge schedule without the HTTP
    server, until Ctrl-C (``serve`` runs the same in the background)."""
    try:
        with _vault(ctx, create=False) as vault:
            if once:
                events = vault.tenants.process_outbox()
                purged = vault.tenants.purge_expired()
                report = {"events": events, "purge": purged}
                if as_json:
                    _emit_json(report)
                else:
                    out.print(f"{len(events)} outbox event(s) handled, "
                              f"{len(purged['purged'])} tenant(s) purged", highlight=False)
                return
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            with vault.tenants.background(purge_delay_seconds=0.0):
                err.print("worker running (Ctrl-C stops it)")
                try:
                    while not stop.wait(1.0):
                        pass
                except KeyboardInterrupt:
                    pass
    except MnemoError as exc:
        _fail(exc)


def register(app: typer.Typer) -> None:
    """Add ``worker`` and the ``tenant`` group to ``app``."""
    app.command()(worker)
    app.add_typer(tenant_app, name="tenant")
