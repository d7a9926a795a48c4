"""KEK rotation across processes while writes run (issue 29, item 1).

1. ``kek rotate --retire`` in a subprocess killed (SIGKILL) at each of its steps while a
   writer in this process writes memories with e-mail addresses throughout: after every
   kill, every value written so far reveals for the owner, the key file holds every
   version the database uses and ``MemoryVault.open`` works; a last run finishes the
   rotation (one version left, in the file and the database) and the JSON Lines mirror
   has every audit row, those of the killed runs too.
2. Black box: a real ``mnemovault serve`` started before a CLI ``kek rotate --retire``,
   a client writing over HTTP during it: no 5xx, every value reveals, ``serve`` restarts
   (its embedder an OpenAI-compatible endpoint in this process: no torch to load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import mnemovault
from mnemovault.config import Settings
from mnemovault.pii.vault import render
from mnemovault.vault import MemoryVault
from tests.servers import serve

SRC = str(Path(mnemovault.__file__).resolve().parents[1])
REPO = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "MNEMOVAULT_EMBED_THREADS": "1",
           **extra}
    env["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [env.get("PYTHONPATH")])])
    env.pop("DATABASE_URL", None)
    return env


def _file_versions(path: Path) -> tuple[int, set[int]]:
    body = json.loads(path.read_text())
    return int(body["current"]), {int(v) for v in body["keys"]}


def _versions_in_use(url: str) -> set[int]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT kek_version FROM pii_deks UNION "
                                           "SELECT kek_version FROM pii_tenant_keys")}


# -- 1. SIGKILL at each step -----------------------------------------------------------
# The rotation runs as the CLI does it, in a fresh interpreter that SIGKILLs itself at
# POINT: "replace-N" just before the N-th rename of a key file (its temp file written),
# "replaced-N" just after it; "rewrap-N" in the N-th DEK rewrap (a tenant's transaction
# open); "committed-N" after the N-th tenant's transaction committed (before its JSON
# Lines mirror is written); "retire" after the final check, before the key file is
# rewritten without the old versions.
DRIVER = textwrap.dedent("""
    import os, signal, sys
    from mnemovault.cli import app
    from mnemovault.pii import crypto, rotation
    from mnemovault.store import pii as store

    point = sys.argv[1]
    calls = {}

    def tick(name, when=""):
        calls[name] = calls.get(name, 0) + 1
        if point == f"{when or name}-{calls[name]}":
            os.kill(os.getpid(), signal.SIGKILL)

    real_replace = os.replace
    def replace(a, b):  # of a key file only (not the embedded server's handles file)
        if not str(b).endswith("kek.json"):
            return real_replace(a, b)
        tick("replace")
        real_replace(a, b)
        calls["replace"] -= 1
        tick("replace", "replaced")
    os.replace = replace

    real_rewrap = store.rewrap_dek
    def rewrap(*args):
        tick("rewrap")
        return real_rewrap(*args)
    store.rewrap_dek = rewrap

    real_after = rotation._after_commit
    def after(rt, tenant):
        tick("committed")
        return real_after(rt, tenant)
    rotation._after_commit = after

    real_retire = crypto.KeyRing.retire
    def retire(self, versions):
        if point == "retire":
            os.kill(os.getpid(), signal.SIGKILL)
        return real_retire(self, versions)
    crypto.KeyRing.retire = retire

    app(["--data-dir", sys.argv[2], "kek", "rotate", "--retire", "--json"],
        prog_name="mnemovault")
""")

KILL_POINTS = ["replace-1", "replaced-1", "rewrap-40", "committed-1",
               "retire", "replace-2", "replaced-2"]


class Writer:
    """Remembers one memory with a new e-mail address after another, round robin over
    ``tenants``, until stopped; keeps what was written and every error."""

    def __init__(self, vault: MemoryVault, tenants: list[str]) -> None:
        self.vault, self.tenants = vault, tenants
        self.written: list[tuple[str, str, str]] = []  # (tenant, memory id, email)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            t = self.tenants[i % len(self.tenants)]
            email = f"w{i}.{uuid.uuid4().hex[:8]}@example.org"
            try:
                r = self.vault.remember(f"note {i}: write to {email}", scope="s",
                                        principal=self.vault.principal(t))
                self.written.append((t, str(r.id), email))
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
            i += 1
            self._stop.wait(0.05)  # a steady stream, not a flood of rows to check

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for(self, n: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.written) < n:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"the writer wrote {len(self.written)}"
            time.sleep(0.05)


def _all_reveal(vault: MemoryVault, tenants: list[str],
                written: list[tuple[str, str, str]]) -> None:
    """Every memory written shows its address when revealed: each one's stored text with
    its placeholders replaced by the tenant's vault export (every value decrypted, in one
    transaction per tenant) is the text written; and every 25th memory is read back with
    ``reveal`` one by one (the path a caller takes)."""
    texts: dict[str, str] = {}
    values: dict[str, str] = {}
    for t in tenants:
        who = vault.principal(t)
        values |= {e["placeholder"]: e["value"] for e in vault.vault_export(principal=who)}
        cursor = None
        while True:
            page = vault.list(scope="s", limit=100, cursor=cursor, principal=who)
            texts |= {str(m.id): m.content for m in page.items}
            if not page.next_cursor:
                break
            cursor = page.next_cursor
    for i, (t, mid, email) in enumerate(written):
        assert render(texts[mid], values).endswith(f"write to {email}"), (mid, texts[mid])
        if i % 25 == 0:
            got = vault.get(mid, principal=vault.principal(t), reveal=True).content
            assert got.endswith(email), (mid, got)


def _all_decrypt(vault: MemoryVault, tenants: list[str],
                 written: list[tuple[str, str, str]]) -> None:
    """Every value written so far decrypts: each tenant's vault export (one transaction
    that opens every live value) holds all its addresses."""
    before = list(written)  # committed before the exports start
    for t in tenants:
        values = {e["value"] for e in vault.vault_export(principal=vault.principal(t))}
        missing = [email for wt, _, email in before if wt == t and email not in values]
        assert not missing, (t, missing[:3])


def test_a_rotation_killed_at_each_step_with_writes_running_loses_nothing(
        vault: MemoryVault, settings: Settings, data_dir: Path, tenant: str) -> None:
    tenants = [tenant, f"{tenant}-b", f"{tenant}-c"]
    for t in tenants[1:]:
        vault.ensure_tenant(t)
    key_file = vault.keyring.path
    assert key_file is not None
    with Writer(vault, tenants) as writer:
        writer.wait_for(60)  # enough DEKs per tenant for "rewrap-40"
        for point in KILL_POINTS:
            n = len(writer.written)
            proc = subprocess.run([sys.executable, "-c", DRIVER, point, str(data_dir)],
                                  capture_output=True, text=True, timeout=120, env=_env(),
                                  cwd=REPO)
            assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr)
            writer.wait_for(n + 3)  # writes went on during and after the kill
            _, in_file = _file_versions(key_file)
            in_use = _versions_in_use(vault.db.url)
            assert in_use <= in_file, (point, in_use, in_file)
            _all_decrypt(vault, tenants, writer.written)
            MemoryVault.open(settings).close()  # the key ring check at start passes
        n = len(writer.written)
        proc = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir",
                               str(data_dir), "kek", "rotate", "--retire", "--json"],
                              capture_output=True, text=True, timeout=120, env=_env(),
                              cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)
        writer.wait_for(n + 3)
    assert not writer.errors, writer.errors[:3]
    assert _file_versions(key_file) == (res["kek_version"], {res["kek_version"]})
    # the runs killed before a rename left temp copies of the keys: gone with the retire
    assert sorted(p.name for p in key_file.parent.glob(".kek.json.*")) == []
    assert _versions_in_use(vault.db.url) == {res["kek_version"]}
    _all_reveal(vault, tenants, writer.written)
    # every audit row reached the JSON Lines mirror, those of the killed runs too
    for t in tenants:
        with vault.db.transaction(t) as conn:
            seqs = [r["seq"] for r in conn.execute(
                "SELECT seq FROM audit_log WHERE tenant_id = %s ORDER BY seq", (t,))]
            rotations = conn.execute(
                "SELECT count(*) AS n FROM audit_log WHERE tenant_id = %s "
                "AND operation = 'KEK_ROTATE'", (t,)).fetchone()["n"]
        mirror = Path(settings.data_dir) / "audit" / f"{t}.jsonl"
        assert [json.loads(line)["seq"] for line in mirror.read_text().splitlines()] == seqs
        assert rotations >= 2
        assert vault.audit.verify(vault.principal(t)).ok


# -- 2. black box: a real serve, a CLI rotation, writes over HTTP -----------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _embeddings_app() -> Any:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint with 8-dimensional vectors of the
    texts' hashes: the servers of the black-box test need no torch (the embedder is not
    what it tests, and loading it twice would be most of its run time)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        data = []
        for i, text in enumerate(body["input"]):
            digest = hashlib.sha256(text.encode()).digest()
            data.append({"index": i, "embedding": [b / 255 + 0.01 for b in digest[:8]]})
        return JSONResponse({"data": data, "model": body["model"]})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def embed_env() -> Iterator[dict[str, str]]:
    with serve(_embeddings_app()) as url:
        yield {"MNEMOVAULT_EMBEDDER": "openai", "MNEMOVAULT_EMBED_MODEL": "hash-8",
               "MNEMOVAULT_EMBED_DIMENSIONS": "8", "MNEMOVAULT_EMBED_BASE_URL": f"{url}/v1",
               "MNEMOVAULT_EMBED_API_KEY": "sk-test"}


def _cli(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                           *args], capture_output=True, text=True, timeout=120,
                          env=_env(**env), cwd=REPO)


STOPPED = (0, 128 + signal.SIGTERM)  # serve's exits on SIGTERM (not a death by signal)


class Serve:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / f"serve-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir), "serve",
                 "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=_env(**env), cwd=REPO)
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, f"serve exited:\n{self.tail()}"
            assert time.monotonic() < deadline, f"serve not healthy:\n{self.tail()}"
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    parent = Path(tempfile.mkdtemp(prefix="mv-kek-live-"))
    os.chmod(parent, 0o755)  # as root, PostgreSQL runs as another user and must get in
    d = parent / "data"
    try:
        yield d
    finally:
        pid_file = d / "pg" / "postmaster.pid"
        if pid_file.exists():  # a failed test must not leave its server behind
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        shutil.rmtree(parent, ignore_errors=True)


def test_serve_started_before_a_cli_rotation_keeps_answering(
        fresh_dir: Path, embed_env: dict[str, str]) -> None:
    made = _cli(fresh_dir, embed_env, "keys", "create", "--tenant", "acme", "--role", "owner",
                "--json")
    assert made.returncode == 0, made.stderr
    auth = {"Authorization": f"Bearer {json.loads(made.stdout)['token']}"}
    server = Serve(fresh_dir, embed_env)
    written: list[tuple[str, str]] = []
    statuses: list[int] = []
    stop = threading.Event()

    def write() -> None:
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as client:
            i = 0
            while not stop.is_set():
                email = f"live{i}.{uuid.uuid4().hex[:8]}@example.org"
                r = client.post("/v1/memories", json={"content": f"mail {email} today",
                                                      "scope": "s"})
                statuses.append(r.status_code)
                if r.status_code == 201 or r.status_code == 200:
                    written.append((r.json()["id"], email))
                if i % 4 == 0 and written:  # reads and reveals while it rotates
                    mid, _ = written[len(written) // 2]
                    statuses.append(client.get(f"/v1/memories/{mid}",
                                               params={"reveal": "true"}).status_code)
                    statuses.append(client.post("/v1/recall", json={
                        "query": "mail today", "scope": "s", "k": 3,
                        "reveal": True}).status_code)
                i += 1

    try:
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 30
        while len(written) < 10:
            assert time.monotonic() < deadline and writer.is_alive(), statuses[-5:]
            time.sleep(0.1)
        rotated = _cli(fresh_dir, embed_env, "kek", "rotate", "--retire", "--json")
        during = len(written)
        deadline = time.monotonic() + 30
        while len(written) < during + 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        writer.join(30)
        assert rotated.returncode == 0, rotated.stderr
        res = json.loads(rotated.stdout)
        assert res["retired"] == [1] and res["kek_version"] == 2
        assert all(s < 500 for s in statuses), sorted(set(statuses))
        assert set(statuses) <= {200, 201}, sorted(set(statuses))
        assert len(written) >= during + 10, "the writer stalled after the rotation"
        _reveal_all(server.url, auth, written)
        assert _file_versions(fresh_dir / "kek.json") == (2, {2})
        assert server.stop() in STOPPED, server.tail()
        server = Serve(fresh_dir, embed_env)  # starts cleanly: the key ring check passes
        _reveal_all(server.url, auth, written)
        assert server.stop() in STOPPED, server.tail()
    finally:
        stop.set()
        server.stop()


def _reveal_all(url: str, auth: dict[str, str], written: list[tuple[str, str]]) -> None:
    with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        for mid, email in written:
            r = client.get(f"/v1/memories/{mid}", params={"reveal": "true"})
            assert r.status_code == 200, (mid, r.status_code, r.text)
            assert r.json()["content"] == f"mail {email} today"
