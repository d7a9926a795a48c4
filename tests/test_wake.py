"""Wake (the waking state in one fenced pack, within a token budget) and timeline (time
order, keyset pages) on the library and HTTP."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.chat.context import RULE
from mnemovault.errors import ValidationError
from mnemovault.recall.wake import tokens
from mnemovault.vault import MemoryVault

T0 = datetime(2024, 3, 1, tzinfo=UTC)


@pytest.fixture
def filled(vault: MemoryVault, tenant: str) -> dict[str, list]:
    who = vault.principal(tenant)
    days = [5, 1, 9, 3, 7, 2, 8, 4, 6, 0]  # written out of time order
    ids = {}
    for d in days:
        r = vault.remember(f"Noor episode of day {d}: " + "words " * 20, scope="noor",
                           subject="noor", created_at=T0 + timedelta(days=d), principal=who)
        ids[d] = r.id
    fact = vault.remember("Noor is a keen climber", scope="noor", subject="noor",
                          type="fact", created_at=T0, principal=who).id
    vault.remember("Other subject", scope="noor", subject="omar", principal=who)
    vault.pin([ids[0]], principal=who)  # the oldest episode, pinned
    return {"ids": [ids[d] for d in sorted(days)], "pinned": [ids[0]], "fact": [fact]}


def test_wake_orders_pinned_facts_recent_and_fences_them(vault: MemoryVault, tenant: str,
                                                         filled: dict[str, list]) -> None:
    state = vault.wake(scope="noor", subject="noor", budget=32_000,
                       principal=vault.principal(tenant))
    got = [m.id for m in state.records]
    assert got[0] == filled["pinned"][0] and got[1] == filled["fact"][0]
    assert got[2:] == list(reversed(filled["ids"][1:]))  # newest first after those
    assert all(m.subject == "noor" for m in state.records)
    assert state.pack.startswith(RULE)
    nonces = set(re.findall(r"<<<RECORD (\w+) id=", state.pack))
    assert len(nonces) == 1
    assert state.pack.count("<<<RECORD ") == state.pack.count("<<<END RECORD ") == len(got)


@pytest.mark.parametrize("budget", [100, 120, 300])
def test_wake_respects_the_budget(vault: MemoryVault, tenant: str, filled: dict[str, list],
                                  budget: int) -> None:
    state = vault.wake(scope="noor", subject="noor", budget=budget,
                       principal=vault.principal(tenant))
    assert tokens(state.pack) == state.tokens <= budget
    assert state.left_out == 11 - len(state.records)
    # what fits keeps the priority order of the full pack (a record too large for what is
    # left is skipped, and smaller ones after it still go in)
    full = [m.id for m in vault.wake(scope="noor", subject="noor", budget=32_000,
                                     principal=vault.principal(tenant)).records]
    got = [m.id for m in state.records]
    assert got == [i for i in full if i in set(got)]


def test_wake_validates(vault: MemoryVault, tenant: str) -> None:
    with pytest.raises(ValidationError) as err:
        vault.wake(scope="noor", budget=10, principal=vault.principal(tenant))
    assert err.value.field == "budget"


def test_timeline_pages_are_complete_and_ordered(vault: MemoryVault, tenant: str,
                                                 filled: dict[str, list]) -> None:
    who = vault.principal(tenant)
    seen, cursor = [], None
    while True:
        page = vault.timeline(scope="noor", subject="noor", limit=3, cursor=cursor,
                              principal=who)
        seen += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    times = [(m.created_at, m.id) for m in seen]
    assert times == sorted(times) and len(seen) == 11
    assert [m.id for m in seen if m.type == "episode"] == filled["ids"]
    window = vault.timeline(scope="noor", subject="noor", since=T0 + timedelta(days=2),
                            until=T0 + timedelta(days=5), principal=who)
    assert [m.id for m in window.items] == filled["ids"][2:5]
    with pytest.raises(ValidationError) as err:
        vault.timeline(scope="noor", cursor="not-a-cursor", principal=who)
    assert err.value.field == "cursor"


def test_wake_and_timeline_over_http(vault: MemoryVault, tenant: str,
                                     filled: dict[str, list]) -> None:
    client = TestClient(create_app(vault))
    h = {"Authorization": "Bearer " + vault.create_key(tenant, "service")[0]}
    r = client.get("/v1/wake", headers=h, params={"scope": "noor", "subject": "noor",
                                                 "budget": 400})
    assert r.status_code == 200, r.text
    assert r.json()["pack"].startswith(RULE) and r.json()["tokens"] <= 400
    r = client.get("/v1/timeline", headers=h, params={"scope": "noor", "subject": "omar"})
    assert [m["content"] for m in r.json()["items"]] == ["Other subject"]
    assert client.get("/v1/wake", params={"scope": "noor"}).status_code == 401
    r = client.get("/v1/timeline", headers=h, params={"scope": "noor", "cursor": "zz"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "cursor"
