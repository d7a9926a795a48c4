"""``mnemovault server start|stop|status``: one server in the background for a data dir (or
``DATABASE_URL``), which CLI commands talk to over its unix socket instead of starting their
own database and model (:mod:`mnemovault.cli._remote`; the socket's rules are in
:mod:`mnemovault.api.local` and docs/server.md).

``server run`` is the server itself, in the foreground (``start`` runs it detached, its
output in ``<data dir>/server.log``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from mnemovault.cli._common import (
    JSON_HELP,
    _emit_json,
    _fail,
    _log_config,
    _state,
    _vault,
    err,
    out,
)
from mnemovault.cli._remote import NoServer, request, server_file, socket_path
from mnemovault.config import Settings
from mnemovault.errors import MnemoError, Unavailable

server_app = typer.Typer(help="A background server the CLI talks to (answers at once).",
                         no_args_is_help=True)


def _socket(settings: Settings) -> Path:
    return socket_path(Path(settings.data_dir), settings.database_url)


def _target(settings: Settings) -> str:
    if settings.database_url:
        return "DATABASE_URL"
    return str(Path(settings.data_dir).expanduser().resolve())


def _health(sock: Path, timeout: float = 5.0) -> dict[str, Any] | None:
    """The server's ``/health`` on ``sock``, or None when nothing answers there."""
    try:
        status, body = request(sock, "GET", "/health", timeout=timeout)
    except (NoServer, OSError, ValueError):
        return None
    return body if status == 200 and isinstance(body, dict) else None


def _record(sock: Path) -> dict[str, Any]:
    try:
        data = json.loads(server_file(sock).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@server_app.command()
def start(
    ctx: typer.Context,
    wait: Annotated[float, typer.Option(
        help="Seconds to wait for the server to answer (it loads the model first).")] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Start a server in the background for this data dir (or DATABASE_URL); CLI commands
    then talk to it. Already running: says so (exit 0). Exit 6 if it does not come up."""
    settings = _state(ctx).settings
    sock = _socket(settings)
    health = _health(sock)
    if health is None:
        data_dir = Path(settings.data_dir).expanduser().resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir / "server.log"
        cmd = [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir)]
        if settings.tenant != Settings.model_fields["tenant"].default:
            cmd += ["--tenant", settings.tenant]
        cmd += ["server", "run"]
        started = time.monotonic()
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=log, start_new_session=True)
        except OSError as exc:
            _fail(Unavailable(f"server: cannot start ({exc.strerror or exc}); see {log_path}"))
            return
        with err.status("starting the server (opening the database, loading the model)…"):
            while health is None:
                if proc.poll() is not None:
                    _fail(Unavailable(f"server: it exited with status {proc.returncode} "
                                      f"before answering; see {log_path}"))
                if time.monotonic() - started > wait:
                    _fail(Unavailable(f"server: not answering after {wait:g} s (pid "
                                      f"{proc.pid} still starting?); see {log_path}"))
                time.sleep(0.2)
                health = _health(sock)
        seconds = round(time.monotonic() - started, 2)
        state = "started"
    else:
        seconds, state = 0.0, "running"
    rec = _record(sock)
    report = {"state": state, "pid": rec.get("pid"), "socket": str(sock),
              "database": _target(settings), "seconds": seconds}
    if as_json:
        _emit_json(report)
        return
    verb = f"started in {seconds} s" if state == "started" else "already running"
    out.print(f"server {verb} (pid {report['pid']}) for {report['database']}; socket "
              f"{sock}", soft_wrap=True, highlight=False)


@server_app.command()
def status(ctx: typer.Context,
           as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Whether a server runs for this data dir (or DATABASE_URL): exit 0 if so, 6 if not."""
    settings = _state(ctx).settings
    sock = _socket(settings)
    health = _health(sock)
    rec = _record(sock) if health is not None else {}
    report = {"running": health is not None, "pid": rec.get("pid"), "socket": str(sock),
              "database": _target(settings), "started_at": rec.get("started_at"),
              "health": health}
    if as_json:
        _emit_json(report)
    elif health is None:
        out.print(f"no server runs for {report['database']}", soft_wrap=True, highlight=False)
    else:
        out.print(f"server running (pid {report['pid']}, since {report['started_at']}) for "
                  f"{report['database']}; socket {sock}", soft_wrap=True, highlight=False)
    if health is None:
        raise typer.Exit(6)


@server_app.command()
def stop(ctx: typer.Context,
         wait: Annotated[float, typer.Option(help="Seconds to wait for it to exit.")] = 60.0,
         ) -> None:
    """Stop the server of this data dir (or DATABASE_URL). None running: says so (exit 0).
    Exit 6 if it does not exit within --wait."""
    settings = _state(ctx).settings
    sock = _socket(settings)
    rec = _record(sock)
    pid = rec.get("pid")
    if _health(sock) is None or not isinstance(pid, int) or not _alive(pid):
        out.print(f"no server runs for {_target(settings)}", soft_wrap=True, highlight=False)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    with err.status("stopping the server…"):
        while _alive(pid):
            if time.monotonic() > deadline:
                _fail(Unavailable(f"server: pid {pid} still runs {wait:g} s after SIGTERM"))
            time.sleep(0.1)
    out.print(f"server stopped (pid {pid})", highlight=False)


@server_app.command("run", hidden=True)
def run(ctx: typer.Context) -> None:
    """Run the server in the foreground (``server start`` runs this detached)."""
    import uvicorn

    from mnemovault.api import create_app
    from mnemovault.api.local import LocalOperator, bind_socket, peer_check, remove_socket
    from mnemovault.embed import preload

    settings = _state(ctx).settings
    sock_path = _socket(settings)
    try:
        with _vault(ctx) as vault:
            started = time.perf_counter()
            preload(vault.embedder)
            err.print(f"loaded the model in {time.perf_counter() - started:.1f} s")
            sock = bind_socket(sock_path)
            record = server_file(sock_path)
            try:
                old = os.umask(0o177)
                try:
                    record.write_text(json.dumps({
                        "pid": os.getpid(), "socket": str(sock_path),
                        "database": _target(settings),
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
                finally:
                    os.umask(old)
                config = uvicorn.Config(LocalOperator(create_app(vault)), log_level="info",
                                        access_log=False, log_config=_log_config(),
                                        lifespan="off")
                config.load()
                config.http_protocol_class = peer_check(config.http_protocol_class)
                err.print(f"serving the local operator on {sock_path}")
                with vault.tenants.background():
                    uvicorn.Server(config).run(sockets=[sock])
            finally:
                sock.close()
                remove_socket(sock_path)
                remove_socket(record)
    except MnemoError as exc:
        _fail(exc)


def register(app: typer.Typer) -> None:
    """Add the ``server`` group."""
    app.add_typer(server_app, name="server")
