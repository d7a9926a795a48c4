"""Nodes that come and go (issue 26), on a live cluster: a worker without the tenant signing
key is repaired the first time the app meets it (or the error names the fix); a node is
added with :func:`citus_nodes.add_node` and the shards rebalanced to it while several
tenants write and recall, then drained and removed under the same load, then added again
with the CLI (so the rest of the session runs on four nodes): every operation succeeds or
fails cleanly as retryable, no tenant ever sees another's memory, and a tenant moved to
the new node is purged with 0 rows left on any node and without two-phase commit.

The add/remove tests need a node outside the cluster: ``MNEMOVAULT_TEST_CITUS_NEW_NODE=
host:port`` (``../shared/citus/cluster.sh node DIR PORT`` starts one; ``.ci/run`` does);
they are skipped without it. Run with a small ``citus.shard_count`` (``.ci/run`` uses 8)
to keep each rebalance short: a shard group's move costs 9-10 s on a loaded 2-core box."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from mnemovault.errors import MnemoError, Unavailable
from mnemovault.store import citus_nodes
from mnemovault.vault import MemoryVault
from tests.citus.test_citus import _node_url, _prepared

pytestmark = pytest.mark.citus

NEW_NODE = os.environ.get("MNEMOVAULT_TEST_CITUS_NEW_NODE") or None
needs_node = pytest.mark.skipif(NEW_NODE is None, reason="set MNEMOVAULT_TEST_CITUS_NEW_NODE="
                                "host:port (a node outside the cluster: cluster.sh node)")
RETRYABLE = {"unavailable", "conflict"}


def _new_node() -> tuple[str, int]:
    assert NEW_NODE is not None
    host, port = NEW_NODE.rsplit(":", 1)
    return host, int(port)


def _nodes(url: str) -> list[tuple[str, int]]:
    """Every node of the cluster, the coordinator first."""
    with psycopg.connect(url) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node ORDER BY groupid, nodeport")]


def _port_of(url: str, tenant: str) -> int:
    with psycopg.connect(url) as conn:
        (port,) = conn.execute(
            "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n "
            "ON n.groupid = p.groupid WHERE p.shardid = "
            "get_shard_id_for_distribution_column('memories', %s::text)", (tenant,)).fetchone()
    return int(port)


def _rows_on_every_node(url: str, tenant: str,
                        extra: list[tuple[str, int]] = ()) -> dict[str, int]:  # type: ignore[assignment]
    """``node:table -> rows`` of ``tenant`` in every table with a ``tenant_id`` column on
    every node (the shards and the coordinator's own tables), read on each node directly
    as the owner; only the non-zero ones."""
    found: dict[str, int] = {}
    for host, port in {*_nodes(url), *extra}:
        with psycopg.connect(_node_url(url, host, port)) as conn:
            conn.execute("SET citus.override_table_visibility = off")
            # the node's own tables: its shards (and any plain table), not the Citus
            # tables' shells, whose reads are distributed queries (the coordinator's hold
            # no rows of their own: truncated when distributed; checked below)
            tables = [r[0] for r in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_attribute a "
                "ON a.attrelid = c.oid WHERE a.attname = 'tenant_id' AND NOT a.attisdropped "
                "AND c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace "
                "AND NOT EXISTS (SELECT 1 FROM pg_dist_partition d "
                "  WHERE d.logicalrelid = c.oid)")]
            shells = conn.execute(
                "SELECT count(*) FROM pg_dist_partition d JOIN pg_class c "
                "ON c.oid = d.logicalrelid WHERE pg_relation_size(c.oid) > 0 "
                "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
                "  AND a.attname = 'tenant_id')").fetchone()[0]
            if shells:
                found[f"{port}:shells with local rows"] = int(shells)
            for t in tables:
                n = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE tenant_id = %s").format(
                    sql.SQL(t)), (tenant,)).fetchone()[0]
                if n:
                    found[f"{port}:{t}"] = int(n)
    return found


# -- the app meets a worker without the signing key --------------------------------------
def _drop_key_on(url: str, port: int) -> None:
    host = next(h for h, p in _nodes(url) if p == port)
    with psycopg.connect(_node_url(url, host, port), autocommit=True) as w:
        w.execute("SET citus.enable_ddl_propagation = off")
        w.execute("DROP TABLE mv_tenant_key")


def test_a_worker_without_the_signing_key_is_repaired_when_the_app_meets_it(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember("before the key went missing", scope="s", principal=who)
    port = _port_of(vault.db.url, tenant)
    _drop_key_on(vault.db.url, port)
    problems = citus_nodes.check_workers(vault.db.url)
    assert any(f":{port} has no tenant signing key" in p for p in problems), problems
    with pytest.raises(Unavailable, match="copied to every worker now") as info:
        vault.remember("while the key is missing", scope="s", principal=who)
    assert info.value.code == "unavailable"
    assert "UndefinedTable" not in info.value.message
    assert citus_nodes.check_workers(vault.db.url) == []
    vault.remember("after the repair", scope="s", principal=who)  # the retry works
    hits = vault.recall("the key", scope="s", principal=who)
    assert sorted(h.memory.content for h in hits) == ["after the repair",
                                                      "before the key went missing"]


def test_a_worker_without_the_key_that_cannot_be_repaired_names_the_fix(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    who = vault.principal(tenant)
    port = _port_of(vault.db.url, tenant)
    _drop_key_on(vault.db.url, port)

    def refused(url: str, role: str) -> None:
        raise Unavailable("citus: copying the tenant signing key to the workers failed: x")

    monkeypatch.setattr(citus_nodes, "repair_tenant_key", refused)
    try:
        with pytest.raises(Unavailable, match=r"mnemovault db add-node HOST PORT") as info:
            vault.recall("anything", scope="s", principal=who)
        assert "UndefinedTable" not in info.value.message
    finally:
        monkeypatch.undo()
        citus_nodes.repair_tenant_key(vault.db.url, vault.db.app_role)
    assert citus_nodes.check_workers(vault.db.url) == []
    assert vault.recall("anything", scope="s", principal=who) == []


# -- the tenant purge commits on one node at a time ---------------------------------------
def test_the_purge_of_a_tenant_on_another_worker_than_the_system_tenant_uses_no_2pc(
        vault: MemoryVault) -> None:
    from mnemovault.store.tenants import SYSTEM_TENANT

    url = vault.db.url
    system_port = _port_of(url, SYSTEM_TENANT)  # where its shard is, rows or not
    t = next(c for c in (f"p{uuid.uuid4().hex[:8]}" for _ in range(200))
             if _port_of(url, c) != system_port)
    vault.ensure_tenant(t)
    vault.remember(f"a note of tenant {t} (bob@example.org)", scope="s",
                   principal=vault.principal(t))
    assert _rows_on_every_node(url, t)
    now = datetime.now(UTC)
    vault.tenants.delete(t, confirm=f"DELETE-{t}", now=now)
    before = _prepared(url, recover=True)
    res = vault.tenants.purge_expired(now=now + timedelta(days=31))
    assert t in [p["tenant"] for p in res["purged"]] and not res["errors"], res
    assert _prepared(url) == before, "the purge used two-phase commit"
    assert _rows_on_every_node(url, t) == {}


# -- rebalancing under load --------------------------------------------------------------
class Load:
    """Threads writing and recalling for ``tenants`` (each memory names its tenant) until
    stopped, recording every outcome: ok, a clean retryable error, or a failure."""

    def __init__(self, vault: MemoryVault, tenants: list[str], threads: int = 4) -> None:
        self.vault, self.tenants = vault, tenants
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.writes = {t: 0 for t in tenants}
        self.unsure = {t: 0 for t in tenants}  # a write that failed retryably
        self.ok = {"remember": 0, "recall": 0}
        self.retryable: list[str] = []
        self.failures: list[str] = []
        self.leaks: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(tenants[i::threads],))
                        for i in range(threads)]

    def __enter__(self) -> Load:
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(timeout=120)

    def _run(self, mine: list[str]) -> None:
        i = 0
        while not self.stop.is_set():
            t = mine[i % len(mine)]
            i += 1
            who = self.vault.principal(t)
            for op in ("remember", "recall"):
                try:
                    if op == "remember":
                        self.vault.remember(f"note {i} of tenant {t}", scope="s",
                                            principal=who)
                        with self.lock:
                            self.writes[t] += 1
                    else:
                        hits = self.vault.recall("note of tenant", scope="s", k=20,
                                                 principal=who)
                        bad = [h.memory.content for h in hits
                               if not h.memory.content.endswith(f"of tenant {t}")]
                        if bad:
                            with self.lock:
                                self.leaks.append(f"{t} saw {bad[:3]}")
                    with self.lock:
                        self.ok[op] += 1
                except MnemoError as exc:
                    with self.lock:
                        if exc.code in RETRYABLE:
                            self.retryable.append(f"{op}: {exc.message}")
                            if op == "remember":
                                self.unsure[t] += 1
                        else:
                            self.failures.append(f"{op} {t}: {exc.code}: {exc.message}")
                except Exception as exc:  # a raw driver error or a bug: never acceptable
                    with self.lock:
                        self.failures.append(f"{op} {t}: {type(exc).__name__}: {exc}")


def _one_tenant_per_shard(vault: MemoryVault, prefix: str) -> list[str]:
    """Tenant ids covering every shard of ``memories`` (so whatever moves, some move)."""
    with psycopg.connect(vault.db.url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM pg_dist_shard "
                                "WHERE logicalrelid = 'memories'::regclass").fetchone()
        by_shard: dict[int, str] = {}
        n = 0
        while len(by_shard) < count and n < 100 * count:
            names = [f"{prefix}-{n + i}" for i in range(64)]
            n += 64
            for t, s in conn.execute(
                    "SELECT t, get_shard_id_for_distribution_column('memories', t) "
                    "FROM unnest(%s::text[]) t", (names,)):
                by_shard.setdefault(int(s), t)
    tenants = sorted(by_shard.values())
    for t in tenants:
        vault.ensure_tenant(t)
        vault.remember(f"note 0 of tenant {t}", scope="s", principal=vault.principal(t))
    return tenants


def _count(vault: MemoryVault, tenant: str) -> int:
    with vault.db.transaction(tenant) as conn:
        return int(conn.execute("SELECT count(*) AS n FROM memories WHERE tenant_id = %s",
                                (tenant,)).fetchone()["n"])


def _check_after(vault: MemoryVault, load: Load, before: dict[str, int]) -> None:
    assert not load.failures, load.failures[:5]
    assert not load.leaks, load.leaks[:5]
    assert load.ok["remember"] > 0 and load.ok["recall"] > 0
    for t in load.tenants:  # every acknowledged write is there; a refused one may not be
        n = _count(vault, t)
        assert before[t] + load.writes[t] <= n <= before[t] + load.writes[t] + load.unsure[t], t
        with vault.db.transaction(t) as conn:  # no tenant filter: row-level security alone
            others = conn.execute("SELECT count(*) AS n FROM memories "
                                  "WHERE tenant_id <> %s", (t,)).fetchone()["n"]
        assert others == 0
        who = vault.principal(t)
        vault.remember(f"note after of tenant {t}", scope="s", principal=who)
        assert all(h.memory.content.endswith(f"of tenant {t}") for h in vault.recall(
            "note of tenant", scope="s", k=50, principal=who))
    assert citus_nodes.check_workers(vault.db.url) == []


def _logical(url: str) -> bool:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT success, result FROM run_command_on_all_nodes("
                            "'SHOW wal_level')").fetchall()
    return all(ok and r == "logical" for ok, r in rows)


@pytest.fixture(scope="module")
def loaded(vault: MemoryVault) -> Iterator[dict[str, Any]]:
    tenants = _one_tenant_per_shard(vault, f"n{uuid.uuid4().hex[:6]}")
    yield {"tenants": tenants, "expected": dict.fromkeys(tenants, 1)}


def _under_load(vault: MemoryVault, state: dict[str, Any], action: Any) -> tuple[Load, Any]:
    with Load(vault, state["tenants"]) as load:
        time.sleep(1.0)  # the load is under way before the first shard moves
        result = action()
        time.sleep(1.0)
    _check_after(vault, load, state["expected"])
    # what the next phase starts from: the load's writes and the check's one on top
    state["expected"] = {t: _count(vault, t) for t in state["tenants"]}
    return load, result


@needs_node
def test_add_node_and_rebalance_under_load(vault: MemoryVault, loaded: dict[str, Any]) -> None:
    url = vault.db.url
    host, port = _new_node()
    assert (host, port) not in _nodes(url)
    # auto (db add-node's default): logical replication, which Citus refuses for a table
    # without a replica identity (force_logical would hide that: it moves such a table
    # and fails its deletes during the copy)
    mode = "auto" if _logical(url) else "block_writes"
    seen: list[dict[str, Any]] = []

    def move() -> dict[str, Any]:
        res = citus_nodes.add_node(url, host, port, vault.db.app_role, mode=mode)
        assert res["added"] and res["job_id"] is not None, res
        res["status"] = citus_nodes.wait_rebalance(url, res["job_id"], timeout=900,
                                                   progress=seen.append)
        return res

    load, res = _under_load(vault, loaded, move)
    assert res["status"]["state"] == "finished"
    assert "tenant signing key" in res["prepared"]
    assert (host, port) in _nodes(url)
    moved = [t for t in loaded["tenants"] if _port_of(url, t) == port]
    assert moved, "no tenant's shard moved to the new node"
    loaded["moved"] = moved
    print(f"add-node ({mode}): {len(moved)} of {len(loaded['tenants'])} tenants moved; "
          f"{load.ok} ok, {len(load.retryable)} retryable errors "
          f"{sorted(set(load.retryable))[:3]}")


@needs_node
def test_a_tenant_moved_to_the_new_node_is_purged_from_every_node(
        vault: MemoryVault, loaded: dict[str, Any]) -> None:
    url = vault.db.url
    _, port = _new_node()
    moved = loaded.get("moved")
    if not moved:
        pytest.skip("the add-node test did not run")
    t = moved[0]
    who = vault.principal(t)
    vault.remember(f"Ada Lovelace (ada@{t}.example.org) wrote of tenant {t}", scope="s",
                   principal=who, entities=[{"kind": "person", "value": "Ada Lovelace"}])
    on_new = _rows_on_every_node(url, t)
    assert on_new and all(k.startswith(f"{port}:") for k in on_new), on_new
    loaded["tenants"].remove(t)
    loaded["expected"].pop(t)
    now = datetime.now(UTC)
    vault.tenants.delete(t, confirm=f"DELETE-{t}", now=now)
    before = _prepared(url, recover=True)
    res = vault.tenants.purge_expired(now=now + timedelta(days=31))
    assert t in [p["tenant"] for p in res["purged"]], res
    assert _prepared(url) == before, "the purge used two-phase commit"
    assert _rows_on_every_node(url, t) == {}
    other = vault.principal(loaded["tenants"][0])
    assert t not in str(vault.recall("Ada", scope="s", principal=other))


@needs_node
def test_remove_node_drains_it_under_load(vault: MemoryVault, loaded: dict[str, Any]) -> None:
    url = vault.db.url
    host, port = _new_node()
    if (host, port) not in _nodes(url):
        pytest.skip("the add-node test did not run")
    load, res = _under_load(vault, loaded, lambda: citus_nodes.remove_node(
        url, host, port, mode="block_writes", timeout=900))
    assert res["removed"] and res["moved"] > 0, res
    assert (host, port) not in _nodes(url)
    assert all(_port_of(url, t) != port for t in loaded["tenants"])
    print(f"remove-node (block_writes): {load.ok} ok, {len(load.retryable)} retryable "
          f"errors {sorted(set(load.retryable))[:3]}")


@needs_node
def test_add_node_with_the_cli_for_the_rest_of_the_session(
        vault: MemoryVault, loaded: dict[str, Any]) -> None:
    """``db add-node HOST PORT --wait --json`` (docs/scaling.md's command); the node stays, so
    what runs after this module runs on it."""
    import orjson

    from mnemovault.cli import app

    url = vault.db.url
    host, port = _new_node()
    res = CliRunner().invoke(app, ["db", "add-node", host, str(port), "--wait", "--json"],
                             env={"DATABASE_URL": url})
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.stdout)
    assert out["added"] and out["rebalance"]["state"] == "finished", out
    again = CliRunner().invoke(app, ["db", "add-node", host, str(port), "--no-rebalance",
                                     "--json"], env={"DATABASE_URL": url})
    assert again.exit_code == 0, again.output
    assert orjson.loads(again.stdout)["added"] is False  # idempotent
    for t in loaded["tenants"]:
        assert _count(vault, t) == loaded["expected"][t]
        assert all(h.memory.content.endswith(f"of tenant {t}") for h in vault.recall(
            "note of tenant", scope="s", k=50, principal=vault.principal(t)))
    assert any(_port_of(url, t) == port for t in loaded["tenants"])
