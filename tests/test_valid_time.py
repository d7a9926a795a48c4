"""Supersession with valid time (issue 23, item 2): a keyed fact that contradicts the
current one supersedes it with ``valid_from`` / ``valid_to``; recall answers now by default
and ``as_of`` a past time on every surface (:mod:`mnemovault.memories.valid_time`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from mnemovault import AsyncMemoryVault
from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.cli import app as cli_app
from mnemovault.errors import ValidationError
from mnemovault.mcp.server import build_server
from mnemovault.vault import MemoryVault
from tests.dbcheck import scratch_database

T0 = datetime(2024, 1, 1, tzinfo=UTC)
Q = "where does Ada live"
PARIS, BERLIN, LYON = "Ada lives in Paris", "Ada lives in Berlin", "Ada lives in Lyon"


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def contents(vault: MemoryVault, who: Principal, *, as_of: Any = None, k: int = 10,
             scope: str = "s") -> list[str]:
    return [h.memory.content for h in
            vault.recall(Q, scope=scope, k=k, principal=who, as_of=as_of, touch=False)]


def city(vault: MemoryVault, who: Principal, text: str, at: datetime | None, *,
         scope: str = "s", key: str = "city") -> Any:
    return vault.remember(text, scope=scope, subject="ada", key=key, valid_from=at,
                          principal=who)


@pytest.fixture
def moved(vault: MemoryVault, tenant: str) -> tuple[Principal, Any, Any]:
    """Ada lived in Paris from day 0, in Berlin from day 100 (in that order of arrival)."""
    who = vault.principal(tenant)
    return who, city(vault, who, PARIS, day(0)), city(vault, who, BERLIN, day(100))


def test_the_old_fact_ends_where_the_new_one_begins(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, a, b = moved
    old, new = vault.get(a.id, principal=who), vault.get(b.id, principal=who)
    assert (old.status, new.status) == ("superseded", "active")
    assert old.valid_from == day(0) and new.valid_from == day(100)
    assert old.valid_to == new.valid_from and new.valid_to is None
    assert b.superseded == a.id and (b.valid_from, b.valid_to) == (day(100), None)
    # both stay listed for the subject (with their intervals), nothing was deleted
    listed = vault.list(scope="s", include_superseded=True, principal=who).items
    assert {(m.content, m.valid_from, m.valid_to) for m in listed} == {
        (PARIS, day(0), day(100)), (BERLIN, day(100), None)}


def test_recall_now_returns_only_the_current_fact(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, _ = moved
    assert contents(vault, who) == [BERLIN]


def test_as_of_returns_what_was_true_then(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, _ = moved
    assert contents(vault, who, as_of=day(50)) == [PARIS]
    assert contents(vault, who, as_of=day(100)) == [BERLIN]  # [from, to): the boundary
    assert contents(vault, who, as_of=day(99) + timedelta(hours=23)) == [PARIS]
    assert contents(vault, who, as_of=datetime.now(UTC)) == [BERLIN]
    assert contents(vault, who, as_of=day(-1)) == []  # before both: neither
    assert contents(vault, who, as_of=day(50).isoformat()) == [PARIS]  # ISO text too


def test_unkeyed_memories_count_from_their_creation(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember("Ada said she lives near a river", scope="s", created_at=day(10),
                   principal=who)
    assert contents(vault, who, as_of=day(5)) == []
    assert contents(vault, who, as_of=day(10)) == ["Ada said she lives near a river"]
    assert contents(vault, who) == ["Ada said she lives near a river"]


def test_an_out_of_order_statement_becomes_history(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    """Rule 2 of :mod:`mnemovault.memories.valid_time`: Lyon, dated day 50, arrives after
    Berlin (day 100): it takes [50, 100) from Paris and never becomes current."""
    who, _, b = moved
    c = city(vault, who, LYON, day(50))
    assert (c.status, c.valid_from, c.valid_to, c.superseded) == (
        "superseded", day(50), day(100), None)
    rows = {m.content: m for m in vault.list(scope="s", include_superseded=True,
                                             principal=who).items}
    assert (rows[PARIS].valid_from, rows[PARIS].valid_to) == (day(0), day(50))
    assert (rows[LYON].valid_from, rows[LYON].valid_to, rows[LYON].status) == (
        day(50), day(100), "superseded")
    assert (rows[BERLIN].valid_to, rows[BERLIN].status) == (None, "active")
    assert contents(vault, who) == [BERLIN]
    assert [contents(vault, who, as_of=day(d)) for d in (10, 60, 120)] == [
        [PARIS], [LYON], [BERLIN]]
    # a statement dated before every version ends where the first one starts
    d = city(vault, who, "Ada lives in Rome", day(-30))
    assert (d.status, d.valid_to) == ("superseded", day(0))
    assert contents(vault, who, as_of=day(-10)) == ["Ada lives in Rome"]
    # a later-dated statement still supersedes the current one, at its own time
    e = city(vault, who, "Ada lives in Oslo", day(200))
    assert e.status == "active" and vault.get(b.id, principal=who).valid_to == day(200)
    # the intervals never overlap and leave no gap
    spans = sorted((m.valid_from, m.valid_to) for m in vault.list(
        scope="s", include_superseded=True, principal=who).items)
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(spans))
    assert spans[-1][1] is None


def test_an_equal_time_statement_wins_over_the_older_one(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, b = moved
    c = city(vault, who, LYON, day(100))  # the same moment as Berlin: the later write wins
    assert c.status == "active" and c.superseded == b.id
    old = vault.get(b.id, principal=who)
    assert old.valid_from == old.valid_to == day(100)  # an empty interval: never alone
    assert contents(vault, who, as_of=day(100)) == [LYON]


def test_a_future_valid_from_is_refused(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    with pytest.raises(ValidationError) as exc:
        city(vault, who, PARIS, datetime.now(UTC) + timedelta(days=1))
    assert exc.value.field == "valid_from"
    assert vault.list(scope="s", principal=who).items == []


def test_occurred_at_is_the_same_field(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember_many([{"content": PARIS, "scope": "s", "key": "city",
                              "occurred_at": day(3).isoformat()}], principal=who)[0]
    assert r.valid_from == day(3)


def test_rectify_creates_a_version(vault: MemoryVault,
                                   moved: tuple[Principal, Any, Any]) -> None:
    who, a, b = moved
    before = datetime.now(UTC)
    out = vault.subjects.rectify(b.id, "Ada lives in Hamburg", principal=who)
    assert out.id == b.id and out.history is not None and out.valid_from is not None
    assert out.valid_from >= before
    cur, hist = vault.get(b.id, principal=who), vault.get(out.history, principal=who)
    assert (cur.status, cur.valid_from, cur.valid_to) == ("active", out.valid_from, None)
    assert (hist.status, hist.valid_from, hist.valid_to) == (
        "superseded", day(100), out.valid_from)
    assert hist.parent_id == b.id and hist.version == b.version == cur.version - 1
    # the inaccurate text is kept nowhere: the history holds the corrected text too
    everything = vault.list(scope="s", include_superseded=True, principal=who).items
    assert BERLIN not in {m.content for m in everything}
    assert contents(vault, who) == ["Ada lives in Hamburg"]
    assert contents(vault, who, as_of=day(150)) == ["Ada lives in Hamburg"]
    assert contents(vault, who, as_of=day(50)) == [PARIS]
    # the subject export holds every version with its interval
    doc = vault.subjects.export("ada", scope="s", principal=who)
    spans = {(m["content"], m["valid_from"] is not None, m["valid_to"] is None)
             for m in doc["memories"]}
    assert spans == {(PARIS, True, False), ("Ada lives in Hamburg", True, False),
                     ("Ada lives in Hamburg", True, True)}
    assert {str(a.id), str(b.id), str(out.history)} == {m["id"] for m in doc["memories"]}


def test_forget_of_a_keyed_memory_takes_every_version(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, a, b = moved
    c = city(vault, who, LYON, day(50))  # a historical version
    out = vault.subjects.rectify(b.id, "Ada lives in Hamburg", principal=who)
    res = vault.forget([a.id], principal=who)
    assert set(res.deleted) == {a.id, b.id, c.id, out.history}
    assert vault.list(scope="s", include_superseded=True, principal=who).items == []
    assert contents(vault, who, as_of=day(50)) == []


def test_another_tenant_sees_nothing(vault: MemoryVault,
                                     moved: tuple[Principal, Any, Any]) -> None:
    other = vault.principal(f"{moved[0].tenant}-other")
    vault.ensure_tenant(other.tenant)
    assert contents(vault, other, as_of=day(50)) == []
    assert contents(vault, other) == []


def test_review_gate_places_an_approved_version_by_its_time(
        vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, b = moved
    old = vault.settings
    vault.settings = old.model_copy(update={"require_review": True,
                                            "review_self_approval": True})
    try:
        p = city(vault, who, LYON, day(50))  # held; dated before the current version
        assert p.status == "pending_review"
        assert contents(vault, who, as_of=day(60)) == [PARIS]  # not placed until approved
        d = vault.review.approve(p.id, principal=who)
        assert d.status == "superseded" and d.superseded == []
    finally:
        vault.settings = old
    assert contents(vault, who) == [BERLIN]
    assert contents(vault, who, as_of=day(60)) == [LYON]
    assert vault.get(b.id, principal=who).status == "active"


# -- the other surfaces pass as_of through ---------------------------------------------------
def test_async_recall_as_of(vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, _ = moved
    mv = AsyncMemoryVault(vault)

    async def main() -> tuple[list[str], list[str]]:
        now = await mv.recall(Q, scope="s", principal=who, touch=False)
        then = await mv.recall(Q, scope="s", principal=who, touch=False, as_of=day(50))
        return [h.memory.content for h in now], [h.memory.content for h in then]

    assert anyio.run(main) == ([BERLIN], [PARIS])


def test_http_recall_as_of(vault: MemoryVault, moved: tuple[Principal, Any, Any]) -> None:
    who, _, _ = moved
    token, _ = vault.create_key(who.tenant, "member")
    with TestClient(create_app(vault)) as client:
        auth = {"Authorization": f"Bearer {token}"}

        def hits(**kw: Any) -> list[str]:
            params = kw.pop("params", None)
            r = client.post("/v1/recall", json={"query": Q, "scope": "s", **kw},
                            params=params, headers=auth)
            assert r.status_code == 200, r.text
            return [h["memory"]["content"] for h in r.json()["hits"]]

        assert hits() == [BERLIN]
        assert hits(as_of=day(50).isoformat()) == [PARIS]
        assert hits(params={"as_of": day(50).isoformat()}) == [PARIS]
        assert hits(as_of=day(-1).isoformat()) == []
        bad = client.post("/v1/recall", json={"query": Q, "scope": "s", "as_of": "soon"},
                          headers=auth)
        assert bad.status_code == 422 and "as_of" in bad.text
        r = client.post("/v1/memories", headers=auth, json={
            "content": LYON, "scope": "s", "subject": "ada", "key": "city",
            "valid_from": day(50).isoformat()})
        assert r.status_code == 201 and r.json()["status"] == "superseded"
        got = client.get(f"/v1/memories/{r.json()['id']}", headers=auth).json()
        assert (datetime.fromisoformat(got["valid_from"]),
                datetime.fromisoformat(got["valid_to"])) == (day(50), day(100))


def test_cli_recall_as_of(vault: MemoryVault, moved: tuple[Principal, Any, Any],
                          data_dir: Path) -> None:
    who, _, _ = moved
    runner = CliRunner()

    def cli(*args: str) -> Any:
        res = runner.invoke(cli_app, ["--data-dir", str(data_dir), "--tenant", who.tenant,
                                      *args], env={"MNEMOVAULT_USE_SERVER": "false"})
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    now = cli("recall", Q, "--scope", "s", "--json")
    then = cli("recall", Q, "--scope", "s", "--as-of", day(50).isoformat(), "--json")
    assert [h["memory"]["content"] for h in now] == [BERLIN]
    assert [h["memory"]["content"] for h in then] == [PARIS]
    r = cli("remember", LYON, "--scope", "s", "--subject", "ada", "--key", "city",
            "--valid-from", day(50).isoformat(), "--json")
    assert r["status"] == "superseded"
    again = cli("recall", Q, "--scope", "s", "--as-of", day(60).isoformat(), "--json")
    assert [h["memory"]["content"] for h in again] == [LYON]


@pytest.fixture(scope="module")
def portal() -> Iterator[anyio.from_thread.BlockingPortal]:
    with anyio.from_thread.start_blocking_portal() as p:
        yield p


def test_mcp_recall_as_of(vault: MemoryVault, moved: tuple[Principal, Any, Any],
                          portal: anyio.from_thread.BlockingPortal) -> None:
    who, _, _ = moved
    server = build_server(vault, lambda ctx: who)
    with portal.wrap_async_context_manager(Client(server, read_timeout_seconds=120)) as client:
        def call(tool: str, **arguments: Any) -> dict[str, Any]:
            res = portal.call(client.call_tool, tool, arguments)
            assert not res.is_error, res.content
            assert res.structured_content is not None
            return res.structured_content

        def hits(**kw: Any) -> list[str]:
            return [h["content"] for h in call("recall", query=Q, scope="s", **kw)["hits"]]

        assert hits() == [BERLIN]
        assert hits(as_of=day(50).isoformat()) == [PARIS]
        out = call("recall", query=Q, scope="s", as_of=day(50).isoformat())["hits"][0]
        assert out["valid_to"] is not None and datetime.fromisoformat(out["valid_to"]) == day(100)
        r = call("remember", content=LYON, scope="s", subject="ada", key="city",
                 valid_from=day(50).isoformat())
        assert r["status"] == "superseded"
        assert hits(as_of=day(60).isoformat()) == [LYON]


# -- migration 0019's backfill -----------------------------------------------------------------
def test_the_backfill_bounds_every_superseded_version(vault: MemoryVault) -> None:
    """A database at 0016 with a key's three versions (one an import dated before its
    predecessor), a displaced proposal, a superseded procedure version and an unkeyed memory:
    after 0017 every row is valid from its creation, each superseded version ends where its
    successor begins (the earliest later start; never before its own), the proposal's
    interval is empty."""
    import uuid

    import psycopg
    from alembic import command

    from mnemovault.store.db import Database

    with scratch_database(vault.db.url, "mv_valid") as url:
        cfg = Database(url).alembic_config(vault.embedder.dimension)
        command.upgrade(cfg, "0016_stat_deltas")
        vec = "[" + ",".join(["0.05"] * vault.embedder.dimension) + "]"
        ids = {n: uuid.uuid4() for n in ("v1", "v2", "v3", "prop", "p1", "p2", "free")}
        rows = [  # name, key, status, version, created day, updated day, parent, provenance
            ("v1", "k", "superseded", 1, 0, 10, None, "{}"),
            ("v2", "k", "superseded", 2, 10, 20, "v1", "{}"),
            ("prop", "k", "superseded", 3, 15, 16, "v2", '{"review": "displaced"}'),
            ("v3", "k", "active", 4, 5, 20, "v2", "{}"),  # an import dated before v2
            ("p1", None, "superseded", 1, 0, 30, None, "{}"),
            ("p2", None, "active", 2, 30, 30, "p1", "{}"),
            ("free", None, "active", 1, 3, 3, None, "{}")]
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('old')")
            for n, key, status, version, made, upd, parent, prov in rows:
                conn.execute(
                    "INSERT INTO memories (tenant_id, id, scope, type, content, embedding, key, "
                    "status, version, created_at, updated_at, parent_id, provenance, tsv, "
                    "tsv_length) VALUES ('old', %s, 's', 'episode', %s, %s, %s, %s, %s, %s, "
                    "%s, %s, %s::jsonb, ''::tsvector, 0)",
                    (ids[n], n, vec, key, status, version, day(made), day(upd),
                     ids[parent] if parent else None, prov))
        command.upgrade(cfg, "0019_valid_time")
        with psycopg.connect(url) as conn:
            got = {r[0]: (r[1], r[2]) for r in conn.execute(
                "SELECT content, valid_from, valid_to FROM memories")}
            index = conn.execute("SELECT indexdef FROM pg_indexes "
                                 "WHERE indexname = 'memories_valid_time'").fetchone()
        # v3's import date (day 5) cuts v1 short: the intervals never overlap
        assert got == {"v1": (day(0), day(5)), "v2": (day(10), day(10)),
                       "prop": (day(15), day(15)), "v3": (day(5), None),
                       "p1": (day(0), day(30)), "p2": (day(30), None),
                       "free": (day(3), None)}
        assert index is not None and "(tenant_id, scope, valid_from)" in index[0]
