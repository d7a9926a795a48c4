"""Every Python and shell code block of README.md and docs/ runs, so an example that stops
working fails the suite (which blocks, and how one opts out: tests/docs_blocks.py and
docs/contributing.md).

Cheap by construction: every block uses the session's one embedded PostgreSQL and its
one loaded embedder (tests/conftest.py), in a tenant of its own (``MNEMOVAULT_TENANT``),
so blocks never see each other's rows and may run in any order. A Python block is
executed in this process; ``MemoryVault.open()`` in it opens the session's data dir. A
shell block runs under ``bash -e -o pipefail`` in a temporary directory (holding links to
the repository's top-level folders, so ``src/...`` and ``docs/...`` paths work as from a
clone's root) where ``mnemovault`` is a small shim that hands its arguments, standard
input, working directory and environment to this process, which runs the CLI in-process
(Typer's runner) against the same database: no process start, no model load per command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemovault.config import Settings
from mnemovault.embed.view import ViewEmbedder
from mnemovault.vault import MemoryVault
from tests.docs_blocks import ROOT, Block, MarkerError, all_blocks, blocks, pages

BLOCKS = all_blocks()
BLOCK_TIMEOUT = 180  # seconds for one shell block
LINKED = ("src", "docs", "bench", "scripts", "tests", "pyproject.toml")

SHIM = """#!{python} -S
# the docs tests' `mnemovault`: runs the command in the test process (tests/test_docs_examples.py)
import json, os, socket, sys
data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["MV_DOCS_SOCKET"])
s.sendall(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
                       "stdin": data.decode("utf-8", "replace")}}).encode())
s.shutdown(socket.SHUT_WR)
buf = b""
while chunk := s.recv(65536):
    buf += chunk
r = json.loads(buf)
sys.stdout.write(r["stdout"]); sys.stdout.flush()
sys.stderr.write(r["stderr"]); sys.stderr.flush()
sys.exit(r["code"])
"""


def test_every_page_is_collected() -> None:
    """A new docs page is picked up by the glob, and its markers parse (a typo in one is an
    error, never a silently skipped or run block)."""
    found = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert "README.md" in found and "docs/cli.md" in found
    assert "docs/integrations/langgraph.md" in found
    for page in pages():
        blocks(page)  # raises MarkerError on a malformed marker
    ran = [b for b in BLOCKS if b.skip is None]
    assert len(ran) >= 20, [b.id for b in ran]  # a floor: the collector finds them


def test_readme_links_resolve() -> None:
    """The README is not part of the site (``mkdocs build --strict`` checks the pages'
    links): each of its relative links names a file or folder of the repository."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)
               if not t.startswith(("http://", "https://", "#", "mailto:"))]
    assert targets, "the README links to the docs"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


def test_marker_forms(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("<!-- docs-test: skip needs a server -->\n```bash\ncurl x\n```\n\n"
                    "<!-- docs-test: requires nosuchmodule -->\n\n```python\nprint(1)\n```\n"
                    "```json\n{}\n```\n```sh\necho hi\n```\n")
    got = [(b.line, b.language, b.skip, b.requires) for b in blocks(page)]
    assert got == [(2, "bash", "needs a server", []), (8, "python", None, ["nosuchmodule"]),
                   (14, "bash", None, [])]
    page.write_text("<!-- docs-test: skip-page design notes -->\n```python\nprint(1)\n```\n")
    assert [b.skip for b in blocks(page)] == ["design notes"]
    for bad in ("<!-- docs-test: skip -->", "<!-- docs-test: skipp x -->",
                "<!-- docs-test skip x -->"):
        page.write_text(f"{bad}\n```python\nprint(1)\n```\n")
        with pytest.raises(MarkerError):
            blocks(page)


def test_unlisted_pages_join_the_nav(tmp_path: Path) -> None:
    """scripts/docs_nav.py (the mkdocs hook): a page `nav` does not name is appended to the
    configured section under its title; listed pages and `_` pages are left alone."""
    import importlib.util as iu
    from types import SimpleNamespace

    spec = iu.spec_from_file_location("docs_nav", ROOT / "scripts" / "docs_nav.py")
    assert spec is not None and spec.loader is not None
    docs_nav = iu.module_from_spec(spec)
    spec.loader.exec_module(docs_nav)
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "new-page.md").write_text("intro\n\n# The new page\n")
    (tmp_path / "_draft.md").write_text("# Draft\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B\n")
    nav = [{"Home": "a.md"}, {"Features": [{"B": "sub/b.md"}]}]
    config = SimpleNamespace(nav=nav, docs_dir=str(tmp_path),
                             extra={"unlisted_pages_section": "Features"})
    docs_nav.on_config(config)
    assert config.nav == [{"Home": "a.md"},
                          {"Features": [{"B": "sub/b.md"}, {"The new page": "new-page.md"}]}]
    config = SimpleNamespace(nav=[{"Home": "a.md"}], docs_dir=str(tmp_path), extra={})
    docs_nav.on_config(config)  # no such section: one is made at the end
    assert config.nav[-1] == {"More": [{"The new page": "new-page.md"}, {"B": "sub/b.md"}]}


# ------------------------------------------------------------------------- running blocks


@pytest.fixture(scope="module")
def shared_embedder(vault: MemoryVault) -> Any:
    embedder = vault.rt.embedder
    while isinstance(embedder, ViewEmbedder):
        embedder = embedder.inner
    return embedder


@pytest.fixture
def block_env(vault: MemoryVault, settings: Settings, shared_embedder: Any,
              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The session's database and embedder, a tenant of the block's own, a working
    directory that looks like a clone's root."""
    tenant = f"docs-{uuid.uuid4().hex[:10]}"
    vault.ensure_tenant(tenant)
    monkeypatch.setattr("mnemovault.runtime.make_embedder", lambda _settings: shared_embedder)
    monkeypatch.setenv("MNEMOVAULT_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("MNEMOVAULT_TENANT", tenant)
    monkeypatch.setenv("MNEMOVAULT_USE_SERVER", "false")
    home = tmp_path / "home"  # a `~/...` path in a block never reaches the real home
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if settings.database_url:
        monkeypatch.setenv("DATABASE_URL", settings.database_url)
    work = tmp_path / "clone"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    monkeypatch.chdir(work)
    yield {"tenant": tenant, "cwd": str(work)}


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block(block: Block, request: pytest.FixtureRequest) -> None:
    if block.skip is not None:
        pytest.skip(f"docs-test: skip {block.skip}")
    for module in block.requires:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"docs-test: requires {module} (not installed)")
    request.getfixturevalue("block_env")
    if block.language == "python":
        _run_python(block)
    else:
        _run_bash(block, Path(os.getcwd()))


def test_a_failing_example_fails(block_env: dict[str, str], vault: MemoryVault) -> None:
    """The runner is not a formality: a failing command or a raising line fails the test,
    and a shell block's `mnemovault` writes into the session's database, in the block's
    own tenant only."""
    page, work = ROOT / "docs" / "cli.md", Path(block_env["cwd"])
    with pytest.raises(AssertionError, match="exited 2"):
        _run_bash(Block(page, 1, "bash", "mnemovault no-such-command\n"), work)
    with pytest.raises(AssertionError, match="exited 1"):
        _run_bash(Block(page, 1, "bash", "mnemovault list --scope s --json | false\n"), work)
    with pytest.raises(ZeroDivisionError):
        _run_python(Block(page, 1, "python", "x = 1\n1 / 0\n"))
    _run_bash(Block(page, 1, "bash", 'mnemovault remember "Ada likes tea" --scope s --json '
                    "| jq -r .id > id.txt\n"), work)
    stored = (work / "id.txt").read_text().strip()
    mine = vault.list(scope="s", principal=vault.principal(block_env["tenant"])).items
    assert [str(m.id) for m in mine] == [stored]
    assert stored not in {str(m.id) for m in vault.list(scope="s").items}  # not "default"


def _run_python(block: Block) -> None:
    # the code as if at the block's own line, so a traceback points into the page
    code = compile("\n" * (block.line) + block.code, str(block.page), "exec")
    exec(code, {"__name__": "__docs__", "__file__": str(block.page)})


def _run_bash(block: Block, work: Path) -> None:
    from typer.testing import CliRunner

    from mnemovault.cli import app

    bin_dir = work.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "mnemovault"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    sock_path = work.parent / "cli.sock"  # short enough: pytest's tmp_path is under /tmp
    sock_path.unlink(missing_ok=True)
    script = work.parent / "block.sh"
    script.write_text(block.code)
    env = {**os.environ, "MV_DOCS_SOCKET": str(sock_path),
           "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ.get('PATH', '')}"}
    runner = CliRunner()
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as server:
        server.bind(str(sock_path))
        server.listen(4)
        server.settimeout(0.1)
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", str(script)], cwd=work,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        out_reader = _Drain(proc)
        import time

        deadline = time.monotonic() + BLOCK_TIMEOUT
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"{block.id}: still running after {BLOCK_TIMEOUT} s\n"
                            + out_reader.text())
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(None)
                _serve_one(conn, runner, app)
        output = out_reader.text()
    print(output)
    assert proc.returncode == 0, (
        f"{block.id}: the block exited {proc.returncode}; its output:\n{output}")


class _Drain:
    """Reads a process's output in a thread so a chatty block never blocks on a full pipe."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        import threading

        self.chunks: list[bytes] = []
        self.proc = proc
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.chunks.append(line)

    def text(self) -> str:
        self.thread.join(timeout=5)
        return b"".join(self.chunks).decode("utf-8", "replace")


def _serve_one(conn: socket.socket, runner: Any, app: Any) -> None:
    buf = b""
    while chunk := conn.recv(65536):
        buf += chunk
    req = json.loads(buf)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        result = runner.invoke(app, req["argv"], input=req["stdin"] or None)
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(traceback.format_exception(result.exception))
        reply = {"stdout": result.stdout, "stderr": stderr, "code": result.exit_code}
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    conn.sendall(json.dumps(reply).encode())
