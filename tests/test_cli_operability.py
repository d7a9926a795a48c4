"""Operability of the command line (issue 9, fault 8): commands that do not embed never load
the embedding model; the demo's next steps paste whole at any terminal width; not-found and
declined confirmations exit with the documented codes, as the endpoints answer; commands
that only read never create a database; empty path settings mean unset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.cli import app
from mnemovault.config import Settings, default_data_dir
from mnemovault.embed import LazyEmbedder, make_embedder
from mnemovault.errors import ConfigError
from mnemovault.pii.crypto import KeyRing
from mnemovault.runtime import load_keyring
from mnemovault.vault import MemoryVault

runner = CliRunner()
HEAVY = ("torch", "sentence_transformers", "transformers")


def _cli(data_dir: Path, tenant: str, *args: str, **kw: Any) -> Any:
    return runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", tenant, *args], **kw)


# -- 1. the embedder is loaded only by commands that embed -----------------------------------
class _Fake:
    def __init__(self, model: str = "fake", dim: int = 3) -> None:
        self.model, self._dim = model, dim

    @property
    def dimension(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), self._dim), dtype=np.float32)


def test_lazy_embedder_knows_model_and_dimension_and_loads_on_first_embed() -> None:
    made: list[_Fake] = []

    def factory() -> _Fake:
        made.append(_Fake())
        return made[-1]

    e = LazyEmbedder(factory, model="fake", dimension=3)
    assert (e.model, e.dimension, e.loaded) == ("fake", 3, False)
    assert e.embed([]).shape == (0, 3) and not made  # nothing to embed: nothing loaded
    assert e.embed(["a", "b"]).shape == (2, 3) and e.loaded
    e.embed(["c"])
    assert len(made) == 1  # made once

    unknown = LazyEmbedder(factory, model="fake")  # dimension learnt from the model
    assert unknown.dimension == 3 and unknown.loaded

    with pytest.raises(ConfigError, match="dimension 3, not the 384"):
        LazyEmbedder(factory, model="fake", dimension=384).embed(["x"])
    with pytest.raises(ConfigError, match="reports 'fake'"):
        LazyEmbedder(factory, model="other", dimension=3).load()


def test_make_embedder_does_not_load_the_model_or_call_an_endpoint() -> None:
    local = make_embedder(Settings())
    assert isinstance(local, LazyEmbedder) and not local.loaded
    assert local.model == "sentence-transformers/all-MiniLM-L6-v2" and local.dimension == 384
    assert not local.loaded
    remote = make_embedder(Settings(embedder="openai", embed_model="text-embedding-3-small",
                                    embed_dimensions=256,
                                    embed_base_url="http://unreachable.invalid/v1"))
    assert (remote.model, remote.dimension, remote.loaded) == ("text-embedding-3-small", 256,
                                                               False)


DRIVER = textwrap.dedent("""
    import json, sys
    from mnemovault.cli import app
    report = []
    for args in json.loads(sys.argv[1]):
        try:
            app(args, prog_name="mnemovault")
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        report.append({"args": args, "exit": code,
                       "loaded": sorted(m for m in HEAVY if m in sys.modules)})
    with open(sys.argv[2], "w") as f:
        json.dump(report, f)
""").replace("HEAVY", repr(HEAVY))


def _drive(tmp_path: Path, commands: list[list[str]], env: dict[str, str] | None = None
           ) -> list[dict[str, Any]]:
    """Run CLI commands one after another in a fresh interpreter; after each, which of the
    heavy modules it has imported."""
    out = tmp_path / f"report-{uuid.uuid4().hex[:6]}.json"
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands), str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert out.exists(), proc.stderr
    report: list[dict[str, Any]] = json.loads(out.read_text())
    return report


def test_commands_that_do_not_embed_never_import_torch(tmp_path: Path, data_dir: Path,
                                                       tenant: str, vault: MemoryVault) -> None:
    p = vault.principal(tenant)
    mid = str(vault.remember("Noor grows tomatoes on the balcony", scope="home",
                             principal=p).id)
    base = ["--data-dir", str(data_dir), "--tenant", tenant]
    report = _drive(tmp_path, [
        [*base, "list", "--json"],
        [*base, "vault", "list", "--json"],
        [*base, "keys", "create", "--tenant", tenant, "--role", "service", "--json"],
        [*base, "pin", mid],
        [*base, "forget", "--preview", mid],
        [*base, "retention", "run", "--dry-run"],
        # the control: a command that embeds does load the model, lazily, and works
        [*base, "recall", "who grows vegetables?", "--scope", "home", "--json"],
    ])
    *light, embeds = report
    for r in light:
        assert r["exit"] == 0 and r["loaded"] == [], r
    assert embeds["exit"] == 0 and "sentence_transformers" in embeds["loaded"]


# -- 2. the demo's next steps paste whole --------------------------------------------------------
def test_demo_next_steps_are_whole_lines_at_a_narrow_terminal(data_dir: Path) -> None:
    res = runner.invoke(app, ["--data-dir", str(data_dir), "demo", "--json"])
    assert res.exit_code == 0, res.output
    commands = json.loads(res.stdout)["next"]
    assert any(len(c) > 60 for c in commands), "the test needs a command wider than 60"
    assert all(f"--data-dir {data_dir}" in c for c in commands if c.startswith("mnemovault"))
    proc = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                           "demo"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert "Try next" in proc.stdout
    for command in commands:
        assert command in lines, f"{command!r} is not one whole line:\n{proc.stdout}"


def test_next_steps_name_the_data_dir_only_when_it_is_not_the_default() -> None:
    from mnemovault.cli.serve import next_steps

    steps = [c for _, c in next_steps(Settings(data_dir=default_data_dir()), "x.jsonl")]
    assert not any("--data-dir" in c for c in steps)
    assert any(c.endswith("serve --port 8077") for c in steps)
    spaced = [c for _, c in next_steps(Settings(data_dir=Path("/tmp/my data")), "a b.jsonl")]
    assert any("--data-dir '/tmp/my data'" in c and "import 'a b.jsonl'" in c for c in spaced)


# -- 4. exit codes: not found is 3 (the endpoints' 404), declined is 5 ----------------------------
def test_not_found_exits_3_in_every_command_as_the_endpoints_answer_404(
        data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    p = vault.principal(tenant)
    mid = str(vault.remember("Ravi collects vinyl records", scope="music", principal=p).id)
    missing = str(uuid.uuid4())
    ghost = "{email:p_0123456789}"
    for args in (["delete", missing, "--yes"], ["forget", "--confirm", missing],
                 ["forget", "--preview", missing], ["pin", missing], ["unpin", missing],
                 ["vault", "shred", ghost]):
        res = _cli(data_dir, tenant, *args)
        assert res.exit_code == 3, (args, res.output)
        assert "not_found" in res.output, res.output
    token = vault.create_key(tenant, "owner")[0]
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    assert client.delete(f"/v1/memories/{missing}", headers=h).status_code == 404
    assert client.post(f"/v1/memories/{missing}/pin", headers=h).status_code == 404
    assert client.post(f"/v1/memories/{missing}/unpin", headers=h).status_code == 404
    assert client.delete(f"/v1/vault/{ghost}", headers=h).status_code == 404

    # some found, some not: the found ones are handled, the exit still says "not found"
    res = _cli(data_dir, tenant, "pin", mid, missing, "--json")
    assert res.exit_code == 3
    assert json.loads(res.stdout)["changed"] == [mid]
    res = _cli(data_dir, tenant, "delete", mid, missing, "--yes", "--json")
    assert res.exit_code == 3
    assert json.loads(res.stdout)["deleted"] == [mid]
    assert vault.list(scope="music", principal=p).items == []


def test_declining_the_delete_confirmation_exits_5_and_keeps_the_memory(
        data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    p = vault.principal(tenant)
    mid = str(vault.remember("Mina swims at dawn", scope="sport", principal=p).id)
    res = _cli(data_dir, tenant, "delete", mid, input="n\n")
    assert res.exit_code == 5, res.output
    assert "nothing was done" in res.output
    assert [str(m.id) for m in vault.list(scope="sport", principal=p).items] == [mid]
    res = _cli(data_dir, tenant, "delete", mid, input="y\n")
    assert res.exit_code == 0, res.output
    assert vault.list(scope="sport", principal=p).items == []


# -- 7. commands that only read never create a database --------------------------------------------
READERS = (["list"], ["recall", "anything"], ["delete", str(uuid.UUID(int=1)), "--yes"],
           ["forget", "--preview", "a query"], ["forget", "--confirm", str(uuid.UUID(int=1))],
           ["pin", str(uuid.UUID(int=1))], ["unpin", str(uuid.UUID(int=1))],
           ["retention", "run"], ["chat", "hello"], ["vault", "list"], ["vault", "export"],
           ["vault", "shred", "{email:p_0123456789}"])


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a[:2]))
def test_a_reader_on_a_data_dir_without_a_database_exits_7_and_creates_nothing(
        tmp_path: Path, args: list[str]) -> None:
    fresh = tmp_path / "no-database-here"
    res = runner.invoke(app, ["--data-dir", str(fresh), *args])
    assert res.exit_code == 7, res.output
    assert f"no database in {fresh}" in res.output
    assert not fresh.exists()


def test_a_writer_creates_the_database_then_readers_work(tmp_path: Path) -> None:
    fresh = tmp_path / "new"
    base = ["--data-dir", str(fresh)]
    report = _drive(tmp_path, [[*base, "db", "upgrade"], [*base, "list", "--json"],
                               [*base, "vault", "list"]])
    assert [r["exit"] for r in report] == [0, 0, 0], report
    assert all(r["loaded"] == [] for r in report), report  # not even db upgrade loads it
    assert (fresh / "pg").is_dir()


# -- 5. an empty path setting means unset -------------------------------------------------
def test_empty_path_settings_mean_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("MNEMOVAULT_KEK_FILE", "MNEMOVAULT_AUDIT_SIGNING_KEY",
                 "MNEMOVAULT_AUDIT_JSONL_DIR"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("MNEMOVAULT_DATA_DIR", "  ")
    s = Settings()
    assert s.kek_file is None and s.audit_signing_key is None and s.audit_jsonl_dir is None
    assert s.data_dir == default_data_dir()
    assert Settings(kek_file="", data_dir=tmp_path).kek_file is None
    ring = load_keyring(Settings(data_dir=tmp_path / "d"))
    assert ring.path == tmp_path / "d" / "kek.json"  # the default, not "."
    with pytest.raises(ConfigError, match="is a directory"):
        KeyRing.load(env_value=None, key_file=Path(""))
    res = runner.invoke(app, ["--data-dir", "", "list"])
    assert res.exit_code == 2 and "data-dir: must not be empty" in res.output


# -- 8. serve refuses a bad or busy port before anything starts ------------------------------
def test_serve_refuses_a_bad_port_with_exit_2_before_anything_starts(tmp_path: Path) -> None:
    fresh = tmp_path / "serve-bad-port"
    for port in ("99999", "-1", "0", "65536"):
        res = runner.invoke(app, ["--data-dir", str(fresh), "serve", "--port", port])
        assert res.exit_code == 2, (port, res.output)
        assert "port: must be in 1..65535" in res.output and "serving on" not in res.output
        assert "Traceback" not in res.output
    assert not fresh.exists()  # no database was opened, let alone created


def test_serve_on_a_busy_port_exits_6_before_opening_the_database(tmp_path: Path) -> None:
    import socket

    fresh = tmp_path / "serve-busy-port"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = runner.invoke(app, ["--data-dir", str(fresh), "serve", "--host", "127.0.0.1",
                                  "--port", str(port)])
    assert res.exit_code == 6, res.output
    assert f"127.0.0.1:{port} is already in use" in res.output and "--port" in res.output
    assert "serving on" not in res.output
    assert not fresh.exists()


# -- 9. end of input at a confirmation is a no ------------------------------------------------
def test_eof_at_the_delete_confirmation_declines_with_exit_5(
        data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    p = vault.principal(tenant)
    mid = str(vault.remember("Oona plays the cello", scope="eof", principal=p).id)
    res = _cli(data_dir, tenant, "delete", mid, input="")
    assert res.exit_code == 5, res.output
    assert "nothing was done" in res.output and "Aborted" not in res.output
    assert "forget this memory?" in res.output
    assert [str(m.id) for m in vault.list(scope="eof", principal=p).items] == [mid]
    res = _cli(data_dir, tenant, "delete", mid, input="y\n")
    assert res.exit_code == 0 and "forgot 1 memory " in res.output, res.output


# -- 10. timeline --since/--until: the one timestamp rule ---------------------------------------
def test_timeline_times_follow_the_timestamp_rule_of_every_interface(
        data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    from mnemovault.validation import TIME_RULE

    p = vault.principal(tenant)
    vault.remember("Pia learnt to sail", scope="times", principal=p)
    for args, field, rule in (
            (["--since", "1700000000"], "since", "must be an ISO 8601 timestamp"),
            (["--until", "0"], "until", "must be an ISO 8601 timestamp"),
            (["--until", "10000-01-01T00:00:00Z"], "until", TIME_RULE),
            (["--since", "10000-01-01"], "since", TIME_RULE),
            (["--since", "1800-01-01T00:00:00Z"], "since", TIME_RULE),
            (["--until", "9999-06-01T00:00:00+00:00"], "until", TIME_RULE)):
        res = _cli(data_dir, tenant, "timeline", "--scope", "times", *args)
        assert res.exit_code == 2, (args, res.output)
        assert f"{field}: {rule}" in " ".join(res.output.split()), (args, res.output)
    res = _cli(data_dir, tenant, "timeline", "--scope", "times", "--since",
               "2000-01-01T00:00:00Z", "--until", "9998-01-01", "--json")
    assert res.exit_code == 0, res.output
    assert [m["content"] for m in json.loads(res.stdout)["items"]] == ["Pia learnt to sail"]
    res = _cli(data_dir, tenant, "timeline", "--scope", "times", "--since",
               "9000-01-01T00:00:00+02:00", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["items"] == []


# -- 11. help and messages read as meant -------------------------------------------------------
def test_help_and_messages_read_as_written() -> None:
    wide = {"COLUMNS": "200"}
    shred = runner.invoke(app, ["vault", "shred", "--help"], env=wide)
    assert "shows [erased] from now on" in shred.output, shred.output
    delete = runner.invoke(app, ["delete", "--help"], env=wide)
    yes = next(line for line in delete.output.splitlines() if "--yes" in line)
    assert "<bool>" not in yes and "Do not ask for confirmation." in yes, yes
    for command in (["list"], ["recall"], ["timeline"], ["wake"], ["import"], ["demo"],
                    ["vault", "list"]):
        text = runner.invoke(app, [*command, "--help"], env=wide).output
        for line in text.splitlines():
            if any(flag in line for flag in ("--json", "--flagged", "--reveal")):
                assert "<bool>" not in line, (command, line)


def test_the_no_database_message_names_every_command_that_creates_one(tmp_path: Path) -> None:
    res = runner.invoke(app, ["--data-dir", str(tmp_path / "none"), "list"],
                        env={"COLUMNS": "400"})
    assert res.exit_code == 7
    for creator in ("remember", "import", "demo", "db upgrade", "serve", "keys create",
                    "mcp --local"):
        assert creator in res.output, (creator, res.output)


# -- issue 28: configuration errors, unknown variables, hints, --version ----------------------
def test_configuration_errors_name_the_variable_and_the_rule(tmp_path: Path) -> None:
    res = runner.invoke(app, ["--data-dir", str(tmp_path), "list"],
                        env={"MNEMOVAULT_EMBED_THREADS": "two"})
    assert res.exit_code == 7, res.output
    assert "MNEMOVAULT_EMBED_THREADS: Input should be a valid integer" in res.stderr
    res = runner.invoke(app, ["--data-dir", str(tmp_path), "list"],
                        env={"MNEMOVAULT_EMBEDDER": "ollama"})
    assert res.exit_code == 7 and "MNEMOVAULT_EMBEDDER: Input should be 'local'" in res.stderr


def test_an_unknown_mnemovault_variable_is_warned_with_the_closest_name(
        tmp_path: Path) -> None:
    from mnemovault.config import unknown_variables

    assert unknown_variables({"MNEMOVAULT_REQUIRE_REVEIW": "1", "MNEMOVAULT_TENANT": "a",
                              "OTHER": "x", "MNEMOVAULT_QQQQQQQQQQQQ": "1"}) == [
        ("MNEMOVAULT_QQQQQQQQQQQQ", None), ("MNEMOVAULT_REQUIRE_REVEIW", "REQUIRE_REVIEW")]
    res = runner.invoke(app, ["--data-dir", str(tmp_path), "list"],
                        env={"MNEMOVAULT_EMBED_THREDS": "2"})
    assert ("warning: MNEMOVAULT_EMBED_THREDS is not a mnemovault setting (ignored); did you "
            "mean MNEMOVAULT_EMBED_THREADS?") in " ".join(res.stderr.split())


def test_version(tmp_path: Path) -> None:
    from mnemovault import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"mnemovault {__version__}"


def test_printed_hints_carry_the_global_options(data_dir: Path, vault: MemoryVault,
                                                tenant: str, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    monkeypatch.setenv("REQUIRE_REVIEW", "true")
    res = _cli(data_dir, tenant, "remember", "The shed key is under the pot", "--scope", "h")
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert f"mnemovault --data-dir {data_dir} --tenant {tenant} review approve " in text
