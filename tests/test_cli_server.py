"""``mnemovault server`` (issue 28): one background server per data dir that CLI commands talk
to over a unix socket (mode 0600, peer user checked, local operator); commands it does not
answer run locally as before; three processes creating one new data dir at once all
succeed; a model that cannot be loaded is a model error naming the variable."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemovault.cli import _remote, app
from mnemovault.config import Settings
from mnemovault.errors import ConfigError
from mnemovault.vault import MemoryVault

SRC = str(Path(__file__).resolve().parents[1] / "src")
runner = CliRunner()


def _mv(data_dir: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The ``mnemovault`` console script's code path (``main``: the fast path first)."""
    full = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                           *args], capture_output=True, text=True, env=full, timeout=timeout)


@pytest.fixture(scope="module")
def server(data_dir: Path, vault: MemoryVault) -> Iterator[Path]:
    res = _mv(data_dir, "server", "start", "--json")
    assert res.returncode == 0, res.stderr + res.stdout
    info = json.loads(res.stdout)
    sock = Path(info["socket"])
    yield sock
    res = _mv(data_dir, "server", "stop")
    assert res.returncode == 0, res.stderr


def _log(data_dir: Path) -> str:
    return (data_dir / "server.log").read_text(errors="replace")


def test_the_socket_is_private_and_the_server_answers_the_cli(
        server: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    mode = os.stat(server).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(_remote.server_file(server)).st_mode) == 0o600
    res = _mv(data_dir, "server", "status", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["running"] is True

    # a model that cannot be loaded here would fail a local remember/recall: the server's
    # (already loaded) answers, so these went to the server
    broken = {"MNEMOVAULT_EMBED_MODEL": "/nonexistent/model"}
    before = _log(data_dir).count("POST /v1/memories ")
    res = _mv(data_dir, "--tenant", tenant, "remember", "Ravi repairs clocks on Fridays",
              "--scope", "shop", "--json", env=broken)
    assert res.returncode == 0, res.stderr
    mid = json.loads(res.stdout)["id"]
    assert _log(data_dir).count("POST /v1/memories ") == before + 1
    assert vault.get(mid, principal=vault.principal(tenant)).content.startswith("Ravi")
    res = _mv(data_dir, "--tenant", tenant, "recall", "who fixes clocks?", "--scope", "shop",
              "--json", env=broken)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["memory"]["id"] == mid
    res = _mv(data_dir, "--tenant", tenant, "list", "--scope", "shop", "--json")
    assert res.returncode == 0 and [m["id"] for m in json.loads(res.stdout)["items"]] == [mid]
    assert "GET /v1/memories " in _log(data_dir)
    # every write governed as before: the remember has its audit row
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT row_bytes FROM audit_log WHERE operation = 'REMEMBER'"
                            ).fetchall()
    assert any(mid in json.loads(bytes(r["row_bytes"]))["memory_ids"] for r in rows)

    # the tenant header is the tenant: another tenant sees none of it
    other = f"{tenant}-other"
    res = _mv(data_dir, "--tenant", other, "list", "--scope", "shop", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["items"] == []
    # errors come back in the CLI's form and exit codes
    res = _mv(data_dir, "--tenant", tenant, "list", "--limit", "500")
    assert res.returncode == 2 and "error (validation)" in res.stderr and "limit" in res.stderr
    res = _mv(data_dir, "--tenant", tenant, "recall", "clocks", "--scope", "empty-scope")
    assert res.returncode == 0 and "no memory matches" in res.stdout


def test_commands_the_server_does_not_answer_and_opting_out_run_locally(
        server: Path, data_dir: Path, tenant: str) -> None:
    res = _mv(data_dir, "--tenant", tenant, "list", "--help")
    assert res.returncode == 0 and "--flagged" in res.stdout
    res = _mv(data_dir, "--tenant", tenant, "list", "--scope", "shop", "--json",
              env={"MNEMOVAULT_USE_SERVER": "false"})
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout)["items"], list)
    # the fast path's parser leaves anything it does not know to the full CLI
    assert _remote.parse(["list", "--bogus"]) is None
    assert _remote.parse(["--data-dir", "d", "recall", "q", "-k", "3"]) == (
        {"data_dir": "d"}, "recall", {"entity": [], "k": 3, "arg": "q"})
    assert _remote.parse(["remember", "x", "--entity", "novalue"]) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_local_user_cannot_use_the_socket(server: Path) -> None:
    """Even with the file opened up (0666), the server closes a connection whose peer is
    another user before reading a byte: the kernel's peer credentials, not a header."""
    os.chmod(server, 0o666)
    try:
        pid = os.fork()
        if pid == 0:  # the child: user nobody, only sockets, then _exit
            code = 3
            try:
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(20)
                s.connect(str(server))  # the file mode lets it connect ...
                try:  # ... and the server closes before it reads a byte
                    s.sendall(b"GET /v1/memories HTTP/1.1\r\nHost: x\r\n"
                              b"Connection: close\r\n\r\n")
                    data = s.recv(100)
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                code = 0 if data == b"" else 1
            except Exception:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # connected, got nothing back
    finally:
        os.chmod(server, 0o600)
    # this user still gets answers
    status, body = _remote.request(server, "GET", "/health")
    assert status == 200 and body


def test_three_processes_creating_one_new_data_dir_all_succeed(tmp_path: Path) -> None:
    new = tmp_path / "fresh"
    env = {**os.environ, "PYTHONPATH": SRC, "MNEMOVAULT_USE_SERVER": "false"}
    cmd = [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(new), "keys", "create",
           "--tenant", "acme", "--role", "owner", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(3)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert [rc for rc, _, _ in results] == [0, 0, 0], [e for _, _, e in results]
    tokens = {json.loads(out)["token"] for _, out, _ in results}
    assert len(tokens) == 3


def test_a_model_that_cannot_be_loaded_is_a_model_error_naming_the_variable(
        tmp_path: Path) -> None:
    res = runner.invoke(app, ["--data-dir", str(tmp_path / "m"), "remember", "x"],
                        env={"MNEMOVAULT_EMBED_MODEL": str(tmp_path / "no-such-model")})
    assert res.exit_code == 7, res.output
    assert "embedding model: MNEMOVAULT_EMBED_MODEL=" in " ".join(res.stderr.split())
    assert "database" not in res.stderr


def test_os_errors_opening_name_the_data_dir_and_the_cause(tmp_path: Path) -> None:
    from mnemovault.cli._common import _os_error

    settings = Settings(data_dir=tmp_path)
    ro = _os_error(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "kek.json")),
                   settings)
    assert isinstance(ro, ConfigError) and "cannot be written" in ro.message
    assert "MNEMOVAULT_DATA_DIR" in ro.message and ro.field == "data_dir"
    full = _os_error(OSError(errno.ENOSPC, "No space left on device"), settings)
    assert full.code == "unavailable" and "no space left" in full.message
