"""``mnemovault serve`` (the HTTP API) and ``mnemovault demo`` (import the bundled example
conversation into tenant ``demo`` and recall from it)."""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mnemovault.cli._common import (
    JSON_HELP,
    _emit_json,
    _fail,
    _import,
    _log_config,
    _print_hits,
    _read_import,
    _state,
    _vault,
    err,
    out,
)
from mnemovault.config import Settings, default_data_dir
from mnemovault.errors import MnemoError, Unavailable, ValidationError


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (1-65535).")] = 8077,
) -> None:
    """Run the HTTP API (docs at /docs).

    Exit 2 for a port outside 1-65535, 6 when the port is taken (checked before the
    database is opened)."""
    try:
        check_listen(host, port)
    except MnemoError as exc:
        _fail(exc)
        return

    import uvicorn

    from mnemovault.api import create_app
    from mnemovault.embed import preload

    try:
        with _vault(ctx) as vault:
            with err.status("loading the embedder…"):
                preload(vault.embedder)  # so the first request is not the slow one
            err.print(f"serving on http://{host}:{port} (OpenAPI docs at /docs)")
            with vault.tenants.background():  # outbox worker (exports), tenant purge
                # uvicorn's access log prints raw paths and query strings, where a subject
                # can be: off; the edge logs the route template instead (mnemovault.api.edge)
                uvicorn.run(create_app(vault), host=host, port=port, log_level="info",
                            access_log=False, log_config=_log_config())
    except MnemoError as exc:
        _fail(exc)


def check_listen(host: str, port: int) -> None:
    """Refuse, before anything starts, a port out of range or one that cannot be listened
    on at ``host`` (taken by another process, a host that is not this machine's): a bind
    test, released at once (``SO_REUSEADDR``, as uvicorn binds, so a port in TIME_WAIT is
    free).

    Raises:
        ValidationError: ``port`` outside 1..65535, or ``host`` not an address (exit 2).
        Unavailable: the port is in use, or the address cannot be bound (exit 6).
    """
    import errno
    import socket

    if not 1 <= port <= 65535:
        raise ValidationError("port: must be in 1..65535", field="port")
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError):
        raise ValidationError(f"host: cannot resolve {host!r} to an address",
                              field="host") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise Unavailable(f"port: {host}:{port} is already in use (another server "
                                  "is listening there); pick another --port",
                                  field="port") from None
            raise Unavailable(f"host: cannot listen on {host}:{port} ({exc.strerror})",
                              field="host") from None


DEMO_QUESTIONS = (
    "Which pets can Priya be around?",
    "Which market does Priya go to every Saturday?",
)


def next_steps(settings: Settings, example: str) -> list[tuple[str, str]]:
    """The demo's "try next" commands, as ``(comment, command)`` pairs: each command runs
    as printed, in a shell, against the database the demo used (``--data-dir`` is named
    when it is not the default one), and ``example`` is the path of a file that exists."""
    import shutil
    import sys

    steps: list[tuple[str, str]] = []
    if shutil.which("mnemovault") is None:
        activate = Path(sys.executable).parent / "activate"
        if activate.is_file():
            steps.append(("put mnemovault on your PATH", f". {shlex.quote(str(activate))}"))
    mv = "mnemovault"
    if not settings.database_url:
        data_dir = Path(settings.data_dir).expanduser().resolve()
        if data_dir != default_data_dir().expanduser().resolve():
            mv += f" --data-dir {shlex.quote(str(data_dir))}"
    steps += [
        ("recall from the example conversation",
         f'{mv} --tenant demo recall "what is Sam training for?" --scope demo'),
        ("remember something new",
         f"{mv} --tenant demo remember \"Priya's birthday is in May\" --scope demo "
         "--subject priya"),
        ("import a conversation (JSON Lines, a JSON array of records, or LoCoMo)",
         f"{mv} import {shlex.quote(example)} --force-scope me"),
        ("an API key for the HTTP service (copy the token)",
         f"{mv} keys create --tenant demo --role owner"),
        ("the HTTP API, docs at http://127.0.0.1:8077/docs (8077 busy? pick another --port)",
         f"{mv} serve --port 8077"),
    ]
    return steps


def demo(ctx: typer.Context,
         as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """Import the example conversation into tenant 'demo', recall from it, show next steps."""
    state = _state(ctx)
    state.settings = state.settings.model_copy(update={"tenant": "demo"})
    example = resources.files("mnemovault.examples") / "demo_conversation.jsonl"
    report: dict[str, Any] = {"data_dir": str(state.settings.data_dir)
                              if not state.settings.database_url else None}
    try:
        with _vault(ctx, embeds=True) as vault, resources.as_file(example) as path:
            existing = vault.list(scope="demo", limit=1)
            if existing.items:
                report["import"] = {"skipped": "scope 'demo' already holds the example"}
            else:
                plan = _read_import(path, scope="demo", force_scope=None, fmt="jsonl")
                report["import"] = _import(vault, plan, path, batch_size=64, quiet=as_json)
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
    # the packaged file (site-packages, or a clone's src/); a zipped package has no path
    steps = next_steps(state.settings, str(example) if isinstance(example, Path)
                       else "my_conversation.jsonl")
    report["next"] = [command for _, command in steps]
    if as_json:
        _emit_json(report)
        return
    imp = report["import"]
    if "imported" in imp:
        out.print(f"\nimported {imp['imported']} turns of the example conversation "
                  f"in {imp['seconds']} s")
    else:
        out.print("\nthe example conversation was imported by an earlier run (not again)")
    where = report["data_dir"] or "DATABASE_URL"
    out.print(f"\n[bold]Try next[/] (database: {escape(where)})", highlight=False,
              soft_wrap=True)
    # one command a line, never wrapped (Rich would break a long line at the terminal's
    # width, and a command broken in two does not paste): soft_wrap leaves that to the
    # terminal, which wraps for display only
    for comment, command in steps:
        out.print(f"  # {comment}", markup=False, highlight=False, soft_wrap=True,
                  style="dim")
        out.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``demo`` to ``app``."""
    app.command()(serve)
    app.command()(demo)
