"""The embedded PostgreSQL stops with the last process that uses it (issue 9, fault 3).

Each test runs ``python -m mnemovault.cli --data-dir <fresh dir> serve`` as a subprocess,
waits for ``GET /health``, ends it with a signal and then reads ``/proc`` (not the code
under test) for PostgreSQL processes of that directory. The local embedder loads in a few
seconds, so the real server is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from mnemovault.store import embedded

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(),
                                reason="reads /proc (Linux)")

START_STALL = 60.0  # no CPU used by serve for this long while not healthy: it is stuck
START_CAP = 1800.0  # and never longer than this, however loaded the machine
REPO = Path(__file__).resolve().parents[1]


def postgres_of(data_dir: Path) -> list[int]:
    """PIDs of processes whose command line or working directory names ``data_dir``,
    other than this test process and its servers (which are not PostgreSQL)."""
    target = str(data_dir)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                cwd = ""
        except OSError:
            continue
        if comm != "postgres":
            continue
        if cwd.startswith(target) or any(target in a.decode(errors="replace") for a in args):
            found.append(int(entry.name))
    return sorted(found)


def wait_gone(data_dir: Path, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := postgres_of(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def handles(data_dir: Path) -> list[int]:
    path = data_dir / "pg" / embedded.HANDLES_FILE
    text = path.read_text().strip() if path.exists() else ""
    return list(json.loads(text)) if text else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``mnemovault serve`` subprocess."""

    started: ClassVar[list[Server]] = []

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.log = data_dir.parent / f"{data_dir.name}-serve-{self.port}.log"
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "MNEMOVAULT_EMBED_THREADS": "1"}
        env.pop("DATABASE_URL", None)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                 "serve", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                env=env)
        Server.started.append(self)

    def _cpu(self) -> float:
        """CPU seconds used so far by serve and its children (a start under way uses CPU:
        initdb, migrations, loading the model)."""
        import psutil

        try:
            proc = psutil.Process(self.proc.pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def wait_healthy(self) -> float:
        """Wait until serve answers /health: as long as it is alive and making progress
        (using CPU), not a fixed time a loaded machine misses (issue 28 item 10); fail when
        it exits, or has used no CPU for START_STALL seconds, or after START_CAP."""
        started = time.monotonic()
        cpu, progressed = self._cpu(), started
        while time.monotonic() - started < START_CAP:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code \
                        == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            now_cpu = self._cpu()
            if now_cpu > cpu + 0.01:
                cpu, progressed = now_cpu, time.monotonic()
            elif time.monotonic() - progressed > START_STALL:
                pytest.fail(f"serve not healthy and idle (no CPU used) for {START_STALL} s:"
                            f"\n{self.tail()}")
            time.sleep(0.3)
        pytest.fail(f"serve not healthy after {START_CAP} s:\n{self.tail()}")

    def signal(self, sig: int, timeout: float = 30.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture
def data_dir() -> Iterator[Path]:
    parent = Path(tempfile.mkdtemp(prefix="mv-life-"))
    os.chmod(parent, 0o755)  # as root, PostgreSQL runs as 'pgserver' and must get in
    d = parent / "data"
    try:
        yield d
    finally:
        while Server.started:
            s = Server.started.pop()
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        _stop_leftovers(d)
        shutil.rmtree(parent, ignore_errors=True)


def _stop_leftovers(data_dir: Path) -> None:
    """A failed test must not leave a server behind: fast shutdown of its postmaster."""
    pid_file = data_dir / "pg" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        if pid in postgres_of(data_dir):
            os.kill(pid, signal.SIGINT)
    except (OSError, ValueError, IndexError):
        pass
    wait_gone(data_dir)


def test_sigterm_stops_the_embedded_server(data_dir: Path) -> None:
    server = Server(data_dir)
    server.wait_healthy()
    assert postgres_of(data_dir), "the server should run while serve does"
    assert handles(data_dir) == [server.proc.pid]
    code = server.signal(signal.SIGTERM)
    assert code in (0, 128 + signal.SIGTERM), server.tail()  # an exit, not a signal death
    assert wait_gone(data_dir, 5.0) == [], "PostgreSQL outlived serve after SIGTERM"
    assert handles(data_dir) == []


def test_sigint_stops_the_embedded_server(data_dir: Path) -> None:
    server = Server(data_dir)
    server.wait_healthy()
    server.signal(signal.SIGINT)
    assert wait_gone(data_dir, 5.0) == [], "PostgreSQL outlived serve after SIGINT"


def test_after_sigkill_the_next_start_recovers_and_stops(data_dir: Path) -> None:
    first = Server(data_dir)
    first.wait_healthy()
    assert first.signal(signal.SIGKILL) == -signal.SIGKILL
    # the orphan case: nothing stopped PostgreSQL, and the dead PID is still listed
    assert handles(data_dir) == [first.proc.pid]
    second = Server(data_dir)
    second.wait_healthy()
    assert handles(data_dir) == [second.proc.pid], "the dead PID was not pruned"
    second.signal(signal.SIGTERM)
    assert wait_gone(data_dir, 5.0) == [], "PostgreSQL outlived serve after a SIGKILL+restart"


def test_a_postmaster_crash_then_a_cli_command_then_stop_leaves_no_server(
        data_dir: Path) -> None:
    """Issue 29 items 3 and 9: the postmaster dies under a running serve; a CLI command
    starts a new one (and leaves it to serve, the last user); serve's stop must stop that
    new one, and exit without a traceback (psutil.NoSuchProcess)."""
    server = Server(data_dir)
    server.wait_healthy()
    pid_file = data_dir / "pg" / "postmaster.pid"
    old = int(pid_file.read_text().splitlines()[0])
    os.kill(old, signal.SIGKILL)
    assert wait_gone(data_dir) == []  # its backends follow it
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    env.pop("DATABASE_URL", None)
    r = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                        "db", "info"], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=START_CAP, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    new = int(pid_file.read_text().splitlines()[0])
    assert new != old and new in postgres_of(data_dir)  # the CLI's server, left running
    assert handles(data_dir) == [server.proc.pid]
    server.signal(signal.SIGTERM)
    assert wait_gone(data_dir, 10.0) == [], "the server the CLI started outlived serve"
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and "NoSuchProcess" not in log, server.tail()


_SUBREAPER_CHILD = """
import ctypes, sys, time
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: like PID 1
from mnemovault.store.embedded import start_embedded
start_embedded(sys.argv[1])
print("UP", flush=True)
time.sleep(600)
"""


def test_a_dead_postmaster_does_not_hold_up_or_break_the_exit(data_dir: Path) -> None:
    """Issue 29 item 9: the process is the postmaster's parent (as PID 1 in a container
    is), so a killed postmaster stays a zombie: pgserver took it for a running server,
    waited 60 s for pg_ctl stop, then killed it (and could raise psutil.NoSuchProcess)."""
    data_dir.mkdir(parents=True)
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    err = data_dir.parent / "child.err"
    with err.open("wb") as errors:
        child = subprocess.Popen([sys.executable, "-c", _SUBREAPER_CHILD, str(data_dir)],
                                 stdout=subprocess.PIPE, stderr=errors, text=True, cwd=REPO,
                                 env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "UP"
        pid = int((data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)
        time.sleep(1.0)
        t0 = time.monotonic()
        child.send_signal(signal.SIGTERM)
        child.wait(90)
        took = time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    text = err.read_text(errors="replace")
    assert "Traceback" not in text and "NoSuchProcess" not in text, text[-2000:]
    assert took < 20, f"exit took {took:.0f} s"
    assert wait_gone(data_dir) == []


def test_a_stale_postmaster_pid_of_a_reused_pid_is_handled(data_dir: Path) -> None:
    """Everything killed (as when a container stops hard), and the PID in postmaster.pid
    belongs to another process when the directory is opened again."""
    first = Server(data_dir)
    first.wait_healthy()
    first.signal(signal.SIGKILL)
    for pid in postgres_of(data_dir):
        with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
            os.kill(pid, signal.SIGKILL)
    assert wait_gone(data_dir) == []
    pid_file = data_dir / "pg" / "postmaster.pid"
    # outlives any wait for the server (a loaded machine may take minutes; killed below)
    with subprocess.Popen(["sleep", "3600"]) as stranger:
        try:
            lines = pid_file.read_text().splitlines()
            pid_file.write_text("\n".join([str(stranger.pid), *lines[1:]]) + "\n")
            second = Server(data_dir)
            second.wait_healthy()
            second.signal(signal.SIGTERM)
            assert wait_gone(data_dir, 5.0) == []
            assert stranger.poll() is None, "the stranger holding the old PID was touched"
        finally:
            stranger.kill()


def test_prune_drops_dead_and_reused_pids(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    pgdata.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    with subprocess.Popen(["sleep", "60"]) as reused, subprocess.Popen(["sleep", "60"]) as live:
        try:
            (pgdata / embedded.HANDLES_FILE).write_text(
                json.dumps([dead.pid, reused.pid, live.pid, os.getpid()]))
            (pgdata / embedded.STARTS_FILE).write_text(json.dumps(
                {str(reused.pid): time.time() - 3600}))  # recorded for an older process
            gone = embedded.prune_handles(pgdata, add=live.pid)
            assert sorted(gone) == sorted([dead.pid, reused.pid])
            assert handles(tmp_path) == [live.pid, os.getpid()]
            starts = json.loads((pgdata / embedded.STARTS_FILE).read_text())
            assert set(starts) == {str(live.pid)}
        finally:
            reused.kill()
            live.kill()


def test_sigterm_runs_cleanup_in_any_process_that_started_the_server(tmp_path: Path) -> None:
    """The handlers are installed by start_embedded; here without a server."""
    marker = tmp_path / "cleaned"
    code = (
        "import atexit, os, signal, time\n"
        "from mnemovault.store.embedded import install_exit_signal_handlers\n"
        "assert 'SIGTERM' in install_exit_signal_handlers()\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr.decode()
    assert marker.read_text() == "yes"
