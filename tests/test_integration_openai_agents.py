"""``mnemovault.integrations.openai_agents.MnemovaultSession`` against the real
``openai-agents`` package (extra ``mnemovault[openai-agents]``; skipped without it): the
``Session`` protocol's four methods, pseudonymised items, ``clear_session`` as a governed
erase whose ``last_receipt`` the offline ``mnemovault receipt verify`` accepts, and one
user's session shredded while another's values stay readable."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents.memory.session",
                    reason="the openai-agents extra is not installed: pip install "
                           "'mnemovault[openai-agents]'")

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings

from mnemovault import AsyncMemoryVault, MemoryVault
from mnemovault.integrations.openai_agents import MnemovaultSession


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_items_round_trip_pseudonymised(vault: MemoryVault, tenant: str) -> None:
    s = MnemovaultSession(vault, "conv-1", subject="gus", principal=vault.principal(tenant))
    assert isinstance(s, SessionABC) and s.session_id == "conv-1"

    async def main() -> tuple[Any, ...]:
        await s.add_items([_user("Hi, I'm Gus, mail me at gus.k@example.org"),
                           {"role": "assistant", "content": "Hello Gus!"}])
        await s.add_items([_user("What's the weather?")])
        everything = await s.get_items()
        latest = await s.get_items(limit=2)
        popped = await s.pop_item()
        after = await s.get_items()
        return everything, latest, popped, after

    everything, latest, popped, after = asyncio.run(main())
    assert [i["role"] for i in everything] == ["user", "assistant", "user"]
    assert "gus.k@example.org" not in json.dumps(everything)
    assert "{email:p_" in everything[0]["content"]
    assert latest == everything[1:]
    assert popped == _user("What's the weather?")
    assert after == everything[:2]
    with vault.db.transaction(tenant) as conn:
        n = conn.execute("SELECT count(*) AS n FROM memories WHERE content LIKE %s",
                         ("%weather%",)).fetchone()["n"]
    assert n == 0  # the popped item is gone from the database


def test_session_settings_limit(vault: MemoryVault, tenant: str) -> None:
    s = MnemovaultSession(AsyncMemoryVault(vault), "conv-lim",
                          principal=vault.principal(tenant),
                          session_settings=SessionSettings(limit=1))

    async def main() -> list[Any]:
        await s.add_items([_user("one"), _user("two")])
        return await s.get_items()

    assert asyncio.run(main()) == [_user("two")]


def test_clear_session_is_a_verifiable_erase_of_one_user(vault: MemoryVault, tenant: str,
                                                         tmp_path: Path) -> None:
    who = vault.principal(tenant)
    hal = MnemovaultSession(vault, "conv-hal", subject="hal", principal=who)
    ivy = MnemovaultSession(vault, "conv-ivy", subject="ivy", principal=who)

    async def main() -> tuple[Any, ...]:
        await hal.add_items([_user("I'm Hal, hal.z@example.org")])
        await ivy.add_items([_user("I'm Ivy, ivy.q@example.org")])
        hal_items = await hal.get_items()
        await hal.clear_session()
        return hal_items, await hal.get_items(), await ivy.get_items()

    hal_items, hal_after, ivy_items = asyncio.run(main())
    assert hal_after == [] and len(ivy_items) == 1
    receipt = hal.last_receipt
    assert isinstance(receipt, dict) and receipt["counts"]["memories"] == 1
    # Hal's value is crypto-shredded; Ivy's (another user) still resolves
    hal_ph = hal_items[0]["content"].split(", ")[1]
    ivy_ph = ivy_items[0]["content"].split(", ")[1]
    shown = vault.placeholder_outputs([hal_ph, ivy_ph], reveal=True, principal=who)
    assert shown[hal_ph] == "[erased]" and shown[ivy_ph] == "ivy.q@example.org"

    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(receipt))
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    env.pop("DATABASE_URL", None)
    ok = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir",
                         str(vault.settings.data_dir), "receipt", "verify", str(path),
                         "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["valid"] is True
    receipt["counts"]["memories"] = 0  # a tampered receipt fails
    path.write_text(json.dumps(receipt))
    bad = subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir",
                          str(vault.settings.data_dir), "receipt", "verify", str(path)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2, (bad.stdout, bad.stderr)
