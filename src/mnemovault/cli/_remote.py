"""The CLI's fast path: commands answered by a running ``mnemovault server`` over its unix
socket, before Typer, the vault, the database driver or the model are imported.

Only the standard library is imported until there is something to print (Rich then, as
the local commands print). :func:`run` answers ``list``, ``recall`` and ``remember`` when a
server for the same data dir (or ``DATABASE_URL``) answers on :func:`socket_path`; for any
other command, any option it does not know (``--help`` included), no server, or
``MNEMOVAULT_USE_SERVER=false`` it returns None and the full CLI runs the command locally,
exactly as without a server.

The server side (socket, peer check, local operator) is :mod:`mnemovault.cli.server`; the
design is in docs/server.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

EXIT_CODES = {"validation": 2, "not_found": 3, "forbidden": 4, "unauthenticated": 4,
              "conflict": 5, "refused": 5, "unavailable": 6, "config": 7}
"""The CLI's exit status of each error code (docs/cli.md: exit codes)."""

TENANT_HEADER = "x-mnemovault-tenant"
"""Which tenant a local-operator request over the socket acts for (``--tenant``)."""

MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_FALSE = {"0", "false", "no", "off"}


def data_dir_of(given: str | None) -> Path:
    """The data dir a command uses: ``--data-dir``, else ``MNEMOVAULT_DATA_DIR``, else the
    user data dir (as :class:`mnemovault.config.Settings` resolves it, without importing
    it)."""
    if given:
        return Path(given).expanduser().resolve()
    env = os.environ.get("MNEMOVAULT_DATA_DIR", "")
    if env.strip():
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("mnemovault", appauthor=False)).resolve()


def database_url_of() -> str | None:
    """``DATABASE_URL`` as the settings read it (unset or empty: the embedded database)."""
    for name, value in os.environ.items():
        if name.upper() == "DATABASE_URL" and value:
            return value
    return None


def socket_path(data_dir: Path, database_url: str | None = None) -> Path:
    """Where the server of ``data_dir`` (or, with ``database_url``, of that database)
    listens: ``<data dir>/server.sock`` (``server-<hash>.sock`` for a ``DATABASE_URL``, so
    servers of two databases never share one). A path too long for a unix socket moves to
    ``$TMPDIR/mnemovault-<uid>/<hash>.sock`` (that directory is made 0700)."""
    data_dir = Path(data_dir).expanduser().resolve()
    target = f"url:{database_url}" if database_url else f"dir:{data_dir}"
    digest = hashlib.sha256(target.encode()).hexdigest()[:16]
    name = f"server-{digest}.sock" if database_url else "server.sock"
    path = data_dir / name
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    base = Path(os.environ.get("TMPDIR") or "/tmp") / f"mnemovault-{os.getuid()}"
    return base / f"{digest}.sock"


def server_file(sock: Path) -> Path:
    """The server's record next to its socket (pid, socket, data dir), mode 0600."""
    return sock.with_suffix(".json")


class NoServer(Exception):
    """Nothing answers on the socket: run the command locally."""


def request(sock: Path, method: str, path: str, *, tenant: str | None = None,
            body: Any = None, timeout: float = 600.0) -> tuple[int, Any]:
    """One HTTP/1.1 request to the server on ``sock`` (``Connection: close``): (status,
    decoded JSON body). A few lines of the standard library's ``socket``: ``http.client``
    alone costs more to import than the request takes.

    Raises:
        NoServer: no socket, or nobody listening on it (a stale one), or the server closed
            the connection without a word (the peer check: not this user's server).
        OSError: the server went away after the request was sent.
        ValueError: the answer is not HTTP with a JSON body.
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        try:
            conn.connect(str(sock))
        except (FileNotFoundError, ConnectionRefusedError, PermissionError,
                NotADirectoryError):
            raise NoServer from None
        data = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", "Host: localhost", "Connection: close",
                "Accept: application/json", f"Content-Length: {len(data)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        if tenant is not None:
            head.append(f"{TENANT_HEADER}: {tenant}")
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    finally:
        conn.close()
    raw = b"".join(chunks)
    if not raw:
        raise NoServer
    header, _, payload = raw.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {k.strip().lower(): v.strip()
              for k, _, v in (line.partition(":") for line in lines[1:])}
    if fields.get("transfer-encoding", "").lower() == "chunked":
        payload = _unchunk(payload)
    return status, json.loads(payload) if payload else None


def _unchunk(payload: bytes) -> bytes:
    out, rest = [], payload
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2:]
    return b"".join(out)


# -- argument parsing (the subset the fast path answers; anything else: the full CLI) ----
_GLOBAL = {"--data-dir": "data_dir", "--tenant": "tenant"}
_COMMANDS: dict[str, tuple[dict[str, str], set[str], bool]] = {
    # command: (options taking a value -> name, flags, takes one positional argument)
    "list": ({"--scope": "scope", "--limit": "limit", "--cursor": "cursor"},
             {"--flagged", "--json"}, False),
    "recall": ({"--scope": "scope", "-k": "k", "--subject": "subject", "--as-of": "as_of"},
               {"--reveal", "--json"}, True),
    "remember": ({"--scope": "scope", "--subject": "subject", "--key": "key",
                  "--type": "type", "--entity": "entity", "--valid-from": "valid_from"},
                 {"--json"}, True),
}
_INTS = {"limit", "k"}


def parse(argv: list[str]) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
    """(global options, command, its options) for a command line the fast path answers,
    else None."""
    glob: dict[str, Any] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        if name in ("-v", "--verbose") and not eq:
            i += 1
            continue
        if name not in _GLOBAL:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        glob[_GLOBAL[name]] = value
        i += 1
    if i >= len(argv) or argv[i] not in _COMMANDS:
        return None
    command = argv[i]
    valued, flags, positional = _COMMANDS[command]
    opts: dict[str, Any] = {"entity": []}
    args: list[str] = []
    i += 1
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and token != "-":
            name, eq, value = token.partition("=")
            if name in flags and not eq:
                opts[name.lstrip("-")] = True
            elif name in valued:
                if not eq:
                    if i + 1 >= len(argv):
                        return None
                    value = argv[i + 1]
                    i += 1
                key = valued[name]
                if key == "entity":
                    if "=" not in value:
                        return None  # the full CLI says what is wrong
                    opts["entity"].append(value)
                elif key in _INTS:
                    try:
                        opts[key] = int(value)
                    except ValueError:
                        return None
                else:
                    opts[key] = value
            else:
                return None  # --help, a typo, an option of another command
        else:
            args.append(token)
        i += 1
    if len(args) != (1 if positional else 0):
        return None
    if args:
        opts["arg"] = args[0]
    return glob, command, opts


# -- the commands ----------------------------------------------------------------------------
def run(argv: list[str]) -> int | None:
    """Answer ``argv`` through a running server: the exit status, or None when the command
    is to run locally (module docstring)."""
    if os.environ.get("MNEMOVAULT_USE_SERVER", "").strip().lower() in _FALSE:
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    glob, command, opts = parsed
    data_dir = glob.get("data_dir")
    if data_dir is not None and not data_dir.strip():
        return None  # the full CLI refuses an empty --data-dir
    sock = socket_path(data_dir_of(data_dir), database_url_of())
    tenant = glob.get("tenant") or os.environ.get("MNEMOVAULT_TENANT") or "default"
    try:
        if command == "list":
            return _list(sock, tenant, opts)
        if command == "recall":
            return _recall(sock, tenant, opts)
        return _remember(sock, tenant, opts, glob)
    except NoServer:
        return None
    except OSError as exc:
        return _error({"code": "unavailable", "message": f"server: the server on {sock} went "
                       f"away during the request ({type(exc).__name__}); whether it was "
                       "done is unknown: check with `mnemovault list`"})


def stdout_console() -> Any:
    """The console commands print their results on. Piped or redirected output is not
    wrapped at 80 columns (an id or a value split over two lines cannot be read back by a
    script): without a terminal (and without ``COLUMNS``) lines are as long as they need."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 1 << 16
    return console


def _error(body: dict[str, Any]) -> int:
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True).print(f"[bold red]error[/] ({body.get('code')}): ",
                               Text(str(body.get("message"))), sep="", highlight=False,
                               soft_wrap=True)
    return EXIT_CODES.get(str(body.get("code")), 1)


def _answer(status: int, body: Any) -> Any:
    if status >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        raise _Failed(err or {"code": "unavailable", "message": f"server: HTTP {status}"})
    return body


class _Failed(Exception):
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def _list(sock: Path, tenant: str, o: dict[str, Any]) -> int:
    query: dict[str, Any] = {"limit": o.get("limit", 20)}
    if o.get("scope") is not None:
        query["scope"] = o["scope"]
    if o.get("cursor") is not None:
        query["cursor"] = o["cursor"]
    if o.get("flagged"):
        query["flagged"] = "true"
    try:
        page = _answer(*request(sock, "GET", "/v1/memories?" + urlencode(query),
                                tenant=tenant))
    except _Failed as exc:
        return _error(exc.body)
    if o.get("json"):
        _emit_json(page)
        return 0
    from rich.table import Table
    from rich.text import Text

    out = stdout_console()
    table = Table()
    for col in ("id", "scope", "type", "content"):
        table.add_column(col, overflow="fold")
    for m in page["items"]:
        table.add_row(str(m["id"]), Text(m["scope"]), m["type"], Text(m["content"][:120]))
    out.print(table)
    if page.get("next_cursor"):
        out.print(f"next page: --cursor {page['next_cursor']}", soft_wrap=True,
                  highlight=False)
    return 0


def _recall(sock: Path, tenant: str, o: dict[str, Any]) -> int:
    body: dict[str, Any] = {"query": o["arg"], "scope": o.get("scope", "default"),
                            "k": o.get("k", 5), "reveal": bool(o.get("reveal"))}
    if o.get("subject"):
        body["filters"] = {"subject": o["subject"]}
    if o.get("as_of"):
        body["as_of"] = o["as_of"]
    try:
        hits = _answer(*request(sock, "POST", "/v1/recall", tenant=tenant, body=body))["hits"]
    except _Failed as exc:
        return _error(exc.body)
    if o.get("json"):
        _emit_json(hits)
        return 0
    print_hits(hits)
    return 0


def print_hits(hits: list[dict[str, Any]]) -> None:
    """Recall hits (as JSON) as the local ``recall`` prints them; no hits: a sentence."""
    from rich.table import Table
    from rich.text import Text

    out = stdout_console()
    if not hits:
        out.print("no memory matches (nothing to show)", highlight=False)
        return
    table = Table(show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("when")
    table.add_column("memory", overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), f"{h['score']:.3f}", str(h["memory"]["created_at"])[:10],
                      Text(h["memory"]["content"]))
    out.print(table)


def hint(glob: dict[str, Any], command: str) -> str:
    """``mnemovault`` with the global options given, then ``command`` (as the full CLI's
    hints: pasted, it acts on the same data dir and tenant)."""
    import shlex

    parts = ["mnemovault"]
    for name, key in _GLOBAL.items():
        if glob.get(key) is not None:
            parts += [name, shlex.quote(glob[key])]
    return " ".join([*parts, command])


def _remember(sock: Path, tenant: str, o: dict[str, Any], glob: dict[str, Any]) -> int:
    entities = []
    for e in o.get("entity") or []:
        kind, _, value = e.partition("=")
        entities.append({"kind": kind, "value": value})
    body: dict[str, Any] = {"content": o["arg"], "scope": o.get("scope", "default"),
                            "type": o.get("type", "episode"),
                            "provenance": {"source": "cli"}, "entities": entities}
    for name in ("subject", "key", "valid_from"):
        if o.get(name) is not None:
            body[name] = o[name]
    try:
        r = _answer(*request(sock, "POST", "/v1/memories", tenant=tenant, body=body))
    except _Failed as exc:
        return _error(exc.body)
    if o.get("json"):
        _emit_json(r)
        return 0

    out = stdout_console()
    extra = f", supersedes {r['superseded']}" if r.get("superseded") else ""
    out.print(f"remembered [bold]{r['id']}[/] (version {r['version']}{extra})")
    if r.get("status") == "superseded":
        out.print(f"dated before the key's current version: kept as history, valid "
                  f"{r.get('valid_from')} to {r.get('valid_to') or 'now'}", highlight=False)
    if r.get("status") == "pending_review":
        out.print("held for review (REQUIRE_REVIEW): not recalled until approved with "
                  f"`{hint(glob, 'review approve ' + str(r['id']))}`", markup=False,
                  highlight=False)
    if r.get("placeholders"):
        out.print("new vault entries: " + " ".join(r["placeholders"]), highlight=False)
    return 0
