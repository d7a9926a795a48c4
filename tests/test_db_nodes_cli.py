"""``mnemovault db add-node`` / ``remove-node`` / ``rebalance-status`` where there is no
Citus cluster: each refuses with the reason and its exit code, changing nothing (the Citus
side is tests/citus/test_citus_nodes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemovault.cli import app
from mnemovault.vault import MemoryVault
from tests.citus.conftest import CITUS

runner = CliRunner()


def test_without_a_database_url_the_node_commands_say_what_to_set(tmp_path: Path) -> None:
    for args in (["db", "add-node", "127.0.0.1", "5433"],
                 ["db", "remove-node", "127.0.0.1", "5433"],
                 ["db", "rebalance-status", "1"]):
        res = runner.invoke(app, ["--data-dir", str(tmp_path), *args],
                            env={"DATABASE_URL": None})
        assert res.exit_code == 7, (args, res.output)
        assert "DATABASE_URL" in res.output
    assert not (tmp_path / "pg").exists()  # no embedded database made for it


def test_on_plain_postgresql_there_are_no_nodes(vault: MemoryVault, tmp_path: Path) -> None:
    if CITUS:
        pytest.skip("a Citus coordinator: tests/citus/test_citus_nodes.py covers it")
    env = {"DATABASE_URL": vault.db.url}
    for args in (["db", "add-node", "127.0.0.1", "5433", "--json"],
                 ["db", "remove-node", "127.0.0.1", "5433"]):
        res = runner.invoke(app, ["--data-dir", str(tmp_path), *args], env=env)
        assert res.exit_code == 7, (args, res.output)
        assert "no citus extension" in res.output


def test_an_unknown_transfer_mode_is_refused_before_anything_is_done(
        vault: MemoryVault, tmp_path: Path) -> None:
    res = runner.invoke(app, ["--data-dir", str(tmp_path), "db", "add-node", "127.0.0.1",
                              "5433", "--mode", "fast"], env={"DATABASE_URL": vault.db.url})
    assert res.exit_code == 2, res.output
    assert "mode: must be one of auto, force_logical, block_writes" in res.output
