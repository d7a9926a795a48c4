"""The forget lifecycle: versions, lineage cascade, graph cleanup, vault shredding, the audit
row, atomicity at every step, scoping, and the HTTP and CLI surfaces."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.cli import app as cli_app
from mnemovault.errors import Conflict, Forbidden, Refused, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.vault import MemoryVault
from tests import lexical
from tests.dbcheck import refused_by_database, scratch_database


def _u() -> str:
    return uuid.uuid4().hex[:8]


def _people(vault: MemoryVault, who: Principal, *names: str) -> dict[str, str]:
    """Register names as person entities; returns name -> placeholder."""
    r = vault.remember("registering people", scope="registry", principal=who,
                       entities=[{"kind": "person", "value": n} for n in names])
    vault.forget([r.id], principal=who)  # the registry note itself is not needed
    with vault.db.transaction(who.tenant) as conn:
        keys = vault.pii.tenant_keys(conn, who.tenant)
        return {n: vault.pii.lookup(conn, keys, n) or "" for n in names}


def _exists(vault: MemoryVault, tenant: str, mid: uuid.UUID) -> bool:
    with vault.db.transaction(tenant) as conn:
        return conn.execute("SELECT 1 FROM memories WHERE id = %s", (mid,)).fetchone() is not None


def _nodes(vault: MemoryVault, tenant: str) -> set[str]:
    with vault.db.transaction(tenant) as conn:
        return {r["node_id"] for r in conn.execute("SELECT node_id FROM graph_nodes")}


def _edges(vault: MemoryVault, tenant: str) -> set[tuple[str, str]]:
    with vault.db.transaction(tenant) as conn:
        return {(r["source_node"], r["target_node"]) for r in
                conn.execute("SELECT source_node, target_node FROM graph_edges")}


def _live(vault: MemoryVault, tenant: str, placeholder: str) -> bool:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT shredded_at FROM pii_values WHERE placeholder = %s",
                           (placeholder,)).fetchone()
    return row is not None and row["shredded_at"] is None


def _audit_rows(vault: MemoryVault, tenant: str, op: str) -> list[dict[str, Any]]:
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT row_bytes FROM audit_log WHERE operation = %s ORDER BY seq",
                            (op,)).fetchall()
    return [json.loads(bytes(r["row_bytes"])) for r in rows]


# -- lineage cascade ---------------------------------------------------------------------------
@pytest.mark.parametrize("forgotten", [0, 1])
def test_a_fact_goes_when_either_source_goes(vault: MemoryVault, tenant: str,
                                             forgotten: int) -> None:
    who = vault.principal(tenant)
    e = [vault.remember(t, scope="s", principal=who).id
         for t in ("Noor moved to Utrecht in March", "Noor started at the Utrecht library")]
    fact = vault.remember("Noor lives and works in Utrecht", scope="s", type="fact",
                          derived_from=e, principal=who).id
    meta = vault.remember("Noor's life is settled", scope="s", type="fact",
                          derived_from=[fact], principal=who).id  # derived from the fact
    unrelated = vault.remember("The office plant needs water on Fridays", scope="s",
                               principal=who).id
    res = vault.forget([e[forgotten]], principal=who)
    assert sorted(res.deleted) == sorted([e[forgotten], fact, meta])
    assert sorted(res.derived) == sorted([fact, meta])
    for mid in (e[forgotten], fact, meta):
        assert not _exists(vault, tenant, mid)
    assert _exists(vault, tenant, e[1 - forgotten]) and _exists(vault, tenant, unrelated)
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memory_lineage").fetchone()["n"] == 0


def test_versions_go_together_and_take_their_facts(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    v1 = vault.remember("Rafa's phone plan: prepaid", scope="s", key="plan", principal=who).id
    fact = vault.remember("Rafa prefers prepaid plans", scope="s", type="fact",
                          derived_from=[v1], principal=who).id
    v2 = vault.remember("Rafa's phone plan: contract", scope="s", key="plan", principal=who).id
    preview = vault.forget_preview([v2], principal=who)
    assert {r["id"]: r["reason"] for r in preview} == {v2: "named", v1: "version",
                                                       fact: "derived"}
    assert all(_exists(vault, tenant, m) for m in (v1, v2, fact))  # preview deletes nothing
    res = vault.forget([v2], principal=who)
    assert sorted(res.deleted) == sorted([v1, v2, fact]) and res.derived == [fact]


def test_derived_from_must_name_memories_of_the_same_scope(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    other_scope = vault.remember("elsewhere", scope="other", principal=who).id
    for bad in (other_scope, uuid.uuid4()):
        with pytest.raises(ValidationError) as err:
            vault.remember("a fact", scope="s", type="fact", derived_from=[bad], principal=who)
        assert err.value.field == "derived_from.0"
    with pytest.raises(ValidationError) as err:
        vault.remember_many([{"content": "ok", "scope": "s"},
                             {"content": "f", "scope": "s", "derived_from": [str(bad)]}],
                            principal=who)
    assert err.value.field == "items.1.derived_from.0"
    assert vault.list(scope="s", principal=who).items == []


def test_a_bare_delete_of_a_source_is_refused_by_the_database(vault: MemoryVault,
                                                              tenant: str) -> None:
    who = vault.principal(tenant)
    src = vault.remember("Ivo plays the oboe", scope="s", principal=who).id
    vault.remember("Ivo is a musician", scope="s", type="fact", derived_from=[src],
                   principal=who)
    with refused_by_database(psycopg.errors.ForeignKeyViolation), \
            vault.db.transaction(tenant) as conn:
        conn.execute("DELETE FROM memories WHERE id = %s", (src,))
    assert _exists(vault, tenant, src)


def test_a_concurrent_derivation_makes_forget_fail_cleanly(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    who = vault.principal(tenant)
    src = vault.remember("Lior keeps bees", scope="s", principal=who).id
    orig = forget_mod._step_collect

    def sneak(conn: psycopg.Connection[Any], run: Any) -> None:
        orig(conn, run)  # a fact appears after the walk (what a racing writer would do)
        late = uuid.uuid4()
        conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, embedding, "
                     "tsv, tsv_length) SELECT tenant_id, %s, scope, 'fact', 'late fact', "
                     "embedding, %s, %s FROM memories WHERE id = %s",
                     (late, *lexical.doc(vault, conn, "late fact"), src))
        conn.execute("INSERT INTO memory_lineage (tenant_id, memory_id, source_id) "
                     "VALUES (%s, %s, %s)", (tenant, late, src))

    monkeypatch.setattr(forget_mod, "_step_collect", sneak)
    with pytest.raises(Conflict) as err:
        vault.forget([src], principal=who)
    assert "retrying is safe" in err.value.message
    monkeypatch.undo()
    assert _exists(vault, tenant, src)
    assert vault.forget([src], principal=who).deleted == [src]


# -- graph and vault -------------------------------------------------------------------------
def test_graph_nodes_and_vault_values_still_supported_stay(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    u = _u().capitalize()
    alice, bob, carol = f"Alicia Vos{u}", f"Bruno Kade{u}", f"Carla Ming{u}"
    ph = _people(vault, who, alice, bob, carol)
    email = f"bruno.{u.lower()}@example.org"
    e1 = vault.remember(f"{alice} had lunch with {bob} ({email})", scope="s", principal=who)
    e2 = vault.remember(f"{alice} and {carol} planned the trip", scope="s", principal=who)
    mail = next(p for p in e1.placeholders if p.startswith("{email:"))
    pa, pb, pc = ph[alice], ph[bob], ph[carol]

    def pair(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a < b else (b, a)

    assert {pa, pb, pc, mail} <= _nodes(vault, tenant)
    assert {pair(pa, pb), pair(pa, mail), pair(pb, mail), pair(pa, pc)} <= _edges(vault, tenant)

    res = vault.forget([e1.id], principal=who)
    nodes, edges = _nodes(vault, tenant), _edges(vault, tenant)
    assert pa in nodes and pc in nodes  # Alicia is still supported by e2
    assert pb not in nodes and mail not in nodes
    assert pair(pa, pc) in edges
    assert not {pair(pa, pb), pair(pa, mail), pair(pb, mail)} & edges
    assert res.graph_nodes_removed == 2 and res.graph_edges_removed == 3
    # Bruno and his address are used by no remaining record: shredded; Alicia is not
    assert sorted(res.shredded) == sorted([pb, mail])
    assert not _live(vault, tenant, pb) and not _live(vault, tenant, mail)
    assert _live(vault, tenant, pa) and _live(vault, tenant, pc)
    assert vault.get(e2.id, reveal=True, principal=who).content == \
        f"{alice} and {carol} planned the trip"
    with vault.db.transaction(tenant) as conn:
        n = conn.execute("SELECT count(*) AS n FROM graph_node_support WHERE memory_id = %s",
                         (e1.id,)).fetchone()["n"]
    assert n == 0


def test_a_value_used_in_another_scope_or_field_is_not_shredded(vault: MemoryVault,
                                                                tenant: str) -> None:
    who = vault.principal(tenant)
    email = f"wren.{_u()}@example.net"
    a = vault.remember(f"Wren wrote from {email}", scope="a", principal=who)
    vault.remember("Wren's invoice", scope="b", subject=email, principal=who)  # a side field
    res = vault.forget([a.id], principal=who)
    assert res.shredded == [] and _live(vault, tenant, a.placeholders[0])


def test_values_named_in_the_query_are_shredded_for_callers_who_may_erase(
        vault: MemoryVault, tenant: str) -> None:
    owner, member = vault.principal(tenant), vault.principal(tenant, role="member")
    email = f"oona.{_u()}@example.com"
    keep = vault.remember(f"Oona's other address book entry: {email}", scope="b",
                          principal=owner)
    ph = keep.placeholders[0]
    for who, shredded in ((member, False), (owner, True)):
        m = vault.remember(f"Oona asked us to forget {email}", scope="a", principal=owner)
        res = vault.forget([m.id], query=f"forget my address {email}", principal=who)
        assert res.deleted == [m.id]
        assert (ph in res.shredded) is shredded
        assert _live(vault, tenant, ph) is not shredded
    assert vault.get(keep.id, principal=owner, reveal=True).content.endswith("[erased]")


def test_forget_audit_row_has_counts_hash_and_ids_never_text(vault: MemoryVault,
                                                             tenant: str) -> None:
    who = vault.principal(tenant)
    email = f"yusuf.{_u()}@example.org"
    ids = [r.id for r in vault.remember_many(
        [{"content": f"note {i} about the greenhouse, {email}", "scope": "s"}
         for i in range(12)], principal=who)]
    query = f"Greenhouse notes from {email}"
    res = vault.forget(ids, query=query, principal=who, request_id="req-forget-1")
    assert len(res.deleted) == 12
    row = _audit_rows(vault, tenant, "FORGET")[-1]
    assert row["details"]["count"] == 12
    assert row["memory_ids"] == [str(i) for i in sorted(ids)[:10]]
    assert row["request_id"] == "req-forget-1"
    assert re.fullmatch(r"[0-9a-f]{64}", row["details"]["query_hash"])
    assert len(row["details"]["query_placeholders"]) == 1
    assert PLACEHOLDER_RE.fullmatch(row["details"]["query_placeholders"][0])
    raw = json.dumps(row)
    assert "reenhouse" not in raw and email not in raw and "note 1" not in raw
    # the hash is keyed per tenant and ignores case and spacing
    other = tenant + "-h"
    m = vault.remember("x", scope="s", principal=vault.principal(other))
    vault.forget([m.id], query=query, principal=vault.principal(other))
    m2 = vault.remember("y", scope="s", principal=who)
    vault.forget([m2.id], query="  greenhouse NOTES from " + email.upper(), principal=who)
    mine = _audit_rows(vault, tenant, "FORGET")[-1]["details"]["query_hash"]
    theirs = _audit_rows(vault, other, "FORGET")[-1]["details"]["query_hash"]
    assert mine == row["details"]["query_hash"] != theirs


# -- atomicity ---------------------------------------------------------------------------------
def _snapshot(vault: MemoryVault, tenant: str) -> dict[str, Any]:
    tables = {"memories": "id, content, pinned, archived, status",
              "memory_lineage": "memory_id, source_id",
              "graph_nodes": "node_id", "graph_node_support": "node_id, memory_id",
              "graph_edges": "source_node, target_node",
              "graph_edge_support": "source_node, target_node, memory_id",
              "pii_values": "placeholder, ciphertext, shredded_at",
              "pii_deks": "placeholder, wrapped_dek", "audit_log": "seq, row_hash"}
    out = {}
    with vault.db.transaction(tenant) as conn:
        for table, cols in tables.items():
            out[table] = sorted(tuple(r.values()) for r in
                                conn.execute(f"SELECT {cols} FROM {table}").fetchall())
    return out


@pytest.mark.parametrize("step", forget_mod.STEPS)
def test_a_failure_at_any_step_leaves_everything_as_before(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    who = vault.principal(tenant)
    u = _u().capitalize()
    names = [f"Piet Smit{u}", f"Greet Bos{u}"]
    _people(vault, who, *names)
    e1 = vault.remember(f"{names[0]} visited {names[1]} (piet{u}@example.org)", scope="s",
                        principal=who).id
    e2 = vault.remember(f"{names[1]} baked bread", scope="s", principal=who).id
    vault.remember("Piet and Greet are friends", scope="s", type="fact",
                   derived_from=[e1, e2], principal=who)
    before = _snapshot(vault, tenant)
    assert before["memory_lineage"] and before["graph_edges"]

    orig = getattr(forget_mod, f"_step_{step}")

    def broken(*args: Any, **kwargs: Any) -> Any:
        orig(*args, **kwargs)  # the step does its work, then the failure strikes
        raise RuntimeError(f"injected failure after step {step}")

    monkeypatch.setattr(forget_mod, f"_step_{step}", broken)
    with pytest.raises(RuntimeError, match="injected"):
        vault.forget([e1], query=f"what {names[0]} did", principal=who)
    monkeypatch.undo()
    assert _snapshot(vault, tenant) == before
    res = vault.forget([e1], principal=who)  # and it works once the fault is gone
    assert len(res.deleted) == 2 and res.shredded


# -- scoping, permissions, preview -----------------------------------------------------------------
def test_ids_of_another_scope_or_tenant_are_not_found(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    mine = vault.remember("Scope A's secret recipe", scope="a", principal=who).id
    other = tenant + "-z"
    theirs = vault.remember("Tenant Z's secret recipe", scope="a",
                            principal=vault.principal(other)).id
    assert vault.forget_preview([mine], scope="b", principal=who) == []
    assert vault.forget_preview([theirs], principal=who) == []
    res = vault.forget([mine, theirs], scope="b", principal=who)
    assert res.deleted == [] and res.not_found == [mine, theirs] and res.audit_seq is None
    assert _exists(vault, tenant, mine) and _exists(vault, other, theirs)
    narrowed = Principal(tenant=tenant, role="member", permissions=who.permissions,
                         key_id="k", scope="b")
    with pytest.raises(Forbidden):
        vault.forget([mine], scope="a", principal=narrowed)
    assert vault.forget([mine], principal=narrowed).not_found == [mine]
    with pytest.raises(Forbidden) as err:
        vault.forget([mine], principal=vault.principal(tenant, role="service"))
    assert err.value.details["permission"] == "memory:forget"


def test_preview_shows_id_type_archived_and_180_characters(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    email = f"hild.{_u()}@example.org"
    long = "x" * 170 + f" {email} and then some more words after it"
    r = vault.remember(long, scope="s", principal=who)
    short = vault.remember("Hild likes figs", scope="s", principal=who).id
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = %s", (short,))
    rows = {row["id"]: row for row in vault.forget_preview([r.id, short], principal=who)}
    assert rows[short]["archived"] is True and rows[short]["type"] == "episode"
    assert rows[short]["excerpt"] == "Hild likes figs"
    assert rows[r.id]["archived"] is False
    # the cut never splits a placeholder: it stops before it
    assert rows[r.id]["excerpt"] == "x" * 170 + " "
    vault.shred(r.placeholders, principal=who)
    stored = vault.get(r.id, principal=who).content
    assert stored.startswith("x" * 170 + " [erased]")
    cut = vault.forget_preview([r.id], principal=who)[0]["excerpt"]
    assert cut == stored[:180] and len(cut) == 180


def test_forget_by_query_is_refused_by_default_and_lists_candidates(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    who = vault.principal(tenant)
    target = vault.remember("Tomasz is allergic to peanuts and carries an epipen", scope="s",
                            principal=who).id
    vault.remember("The quarterly tax forms are due in April", scope="s", principal=who)
    with pytest.raises(Refused) as err:
        vault.forget(query="Tomasz peanut allergy", scope="s", principal=who)
    assert err.value.details["candidates"][0] == str(target)
    assert _exists(vault, tenant, target)
    assert _audit_rows(vault, tenant, "FORGET") == []
    monkeypatch.setattr(vault, "settings",
                        vault.settings.model_copy(update={"allow_semantic_forget": True}))
    res = vault.forget(query="Tomasz peanut allergy", scope="s", principal=who)
    assert res.deleted == [target]
    assert len(vault.list(scope="s", principal=who).items) == 1
    with pytest.raises(ValidationError) as verr:
        vault.forget(query="anything", principal=who)
    assert verr.value.field == "scope"


def test_a_query_naming_a_value_matches_every_record_using_it(vault: MemoryVault,
                                                              tenant: str) -> None:
    who = vault.principal(tenant)
    email = f"quill.{_u()}@example.org"
    a = vault.remember(f"Order confirmation sent to {email}", scope="s", principal=who).id
    b = vault.remember("Quarterly newsletter", scope="s", subject=email, principal=who).id
    vault.remember("Unrelated note about bicycles", scope="s", principal=who)
    rows = vault.forget_preview(query=f"everything about {email}", scope="s", principal=who)
    assert {a, b} <= {r["id"] for r in rows}
    placeholder = vault.get(a, principal=who).content.split()[-1]
    typed = vault.forget_preview(query=placeholder, scope="s", principal=who)
    assert {a, b} <= {r["id"] for r in typed}


# -- HTTP and CLI ------------------------------------------------------------------------------
@pytest.fixture
def client(vault: MemoryVault) -> Iterator[TestClient]:
    yield TestClient(create_app(vault))


def test_http_forget_preview_pin_and_forget(client: TestClient, vault: MemoryVault,
                                            tenant: str) -> None:
    owner = {"Authorization": f"Bearer {vault.create_key(tenant, 'owner')[0]}"}
    service = {"Authorization": f"Bearer {vault.create_key(tenant, 'service')[0]}"}
    who = vault.principal(tenant)
    src = vault.remember("Zainab learns Portuguese", scope="s", principal=who).id
    fact = vault.remember("Zainab studies languages", scope="s", type="fact",
                          derived_from=[src], principal=who).id
    r = client.post("/v1/forget/preview", headers=owner, json={"ids": [str(src)]})
    assert r.status_code == 200, r.text
    assert [(i["id"], i["reason"]) for i in r.json()["items"]] == [(str(src), "named"),
                                                                   (str(fact), "derived")]
    r = client.post("/v1/forget", headers=owner, json={"query": "Zainab", "scope": "s"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "refused"
    assert str(src) in r.json()["error"]["details"]["candidates"]
    r = client.post(f"/v1/memories/{src}/pin", headers=owner)
    assert r.status_code == 200 and r.json()["changed"] == [str(src)]
    assert vault.get(src, principal=who).pinned
    assert client.post(f"/v1/memories/{src}/pin", headers=service).status_code == 403
    assert client.post(f"/v1/memories/{uuid.uuid4()}/pin", headers=owner).status_code == 404
    r = client.post(f"/v1/memories/{src}/unpin", headers=owner)
    assert r.status_code == 200 and not vault.get(src, principal=who).pinned
    r = client.post("/v1/forget", headers=service, json={"ids": [str(src)]})
    assert r.status_code == 403
    assert r.json()["error"]["details"]["permission"] == "memory:forget"
    r = client.post("/v1/forget", headers=owner, json={"ids": [str(src)]})
    assert r.status_code == 200
    assert sorted(r.json()["deleted"]) == sorted([str(src), str(fact)])
    assert r.json()["derived"] == [str(fact)]
    r = client.post("/v1/forget", headers=owner, json={"ids": ["not-a-uuid"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "ids.0"


def test_http_delete_is_the_same_lifecycle(client: TestClient, vault: MemoryVault,
                                           tenant: str) -> None:
    owner = {"Authorization": f"Bearer {vault.create_key(tenant, 'owner')[0]}"}
    who = vault.principal(tenant)
    src = vault.remember("Emeka runs marathons", scope="s", principal=who).id
    fact = vault.remember("Emeka is fit", scope="s", type="fact", derived_from=[src],
                          principal=who).id
    r = client.delete(f"/v1/memories/{src}", headers=owner)
    assert r.status_code == 200 and r.json()["derived"] == [str(fact)]
    assert not _exists(vault, tenant, fact)


def test_cli_forget_preview_confirm_pin(data_dir: Path, vault: MemoryVault,
                                        tenant: str) -> None:
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(cli_app, ["--data-dir", str(data_dir), "--tenant", tenant, *args])

    who = vault.principal(tenant)
    src = vault.remember("Fenna collects stamps from Iceland", scope="s", principal=who).id
    fact = vault.remember("Fenna is a philatelist", scope="s", type="fact",
                          derived_from=[src], principal=who).id
    res = cli("forget", "--preview", str(src))
    assert res.exit_code == 0, res.output
    assert str(fact) in res.stdout and "derived" in res.stdout and "nothing was deleted" \
        in res.stdout
    res = cli("forget", "--preview", "Fenna stamps", "--scope", "s", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["id"] == str(src)
    res = cli("forget", "--confirm", "Fenna stamps", "--scope", "s")
    assert res.exit_code == 5 and str(src) in res.output  # refused, candidates listed
    res = cli("forget", str(src))
    assert res.exit_code == 2  # neither --preview nor --confirm
    res = cli("forget", "--confirm", "0123abcd-nope")
    assert res.exit_code == 2 and "argument 1" in res.output
    res = cli("pin", str(src), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["changed"] == [str(src)]
    res = cli("unpin", str(src))
    assert res.exit_code == 0 and "unpinned 1" in res.stdout
    res = cli("forget", "--confirm", str(src), "--json")
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(res.stdout)["deleted"]) == sorted([str(src), str(fact)])
    assert not _exists(vault, tenant, src) and not _exists(vault, tenant, fact)


# -- migration backfill --------------------------------------------------------------------------
def test_migration_indexes_memories_stored_before_it(vault: MemoryVault) -> None:
    from alembic import command

    from mnemovault.store.db import Database

    with scratch_database(vault.db.url, "mv_backfill") as url:
        db = Database(url)
        command.upgrade(db.alembic_config(3), "0003_audit")
        p1, p2 = "{person:p_00000000aa}", "{email:p_00000000bb}"
        mid = uuid.uuid4()
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('old')")
            conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, embedding, "
                         "provenance) VALUES ('old', %s, 's', 'episode', %s, '[1,0,0]', %s)",
                         (mid, f"{p1} wrote", json.dumps({"tags": [p2]})))
        command.upgrade(db.alembic_config(3), "head")
        with psycopg.connect(url) as conn:
            nodes = conn.execute("SELECT node_id, kind FROM graph_nodes ORDER BY 1").fetchall()
            support = conn.execute("SELECT count(*) FROM graph_node_support").fetchone()
            edges = conn.execute("SELECT source_node, target_node FROM graph_edges").fetchall()
        assert nodes == sorted([(p1, "person"), (p2, "email")])
        assert support == (2,)
        assert edges == [tuple(sorted([p1, p2]))]


# -- concurrency: a write that mentions a value racing a forget that would shred it ----------
def test_a_write_racing_a_forget_either_keeps_the_value_or_is_refused(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from mnemovault.governance import graph

    who = vault.principal(tenant)
    email = f"race.{_u()}@example.org"
    first = vault.remember(f"Old note for {email}", scope="s", principal=who)
    ph = first.placeholders[0]

    # 1. the forget holds the node lock first: the write waits, then is refused (the value
    #    it used was shredded meanwhile); a retry gets a new placeholder
    locked, release = threading.Event(), threading.Event()
    orig_vault_step = forget_mod._step_vault

    def slow_vault_step(*args: Any, **kwargs: Any) -> None:
        orig_vault_step(*args, **kwargs)
        locked.set()
        assert release.wait(10)

    monkeypatch.setattr(forget_mod, "_step_vault", slow_vault_step)
    outcome: dict[str, Any] = {}

    def forget_it() -> None:
        try:
            outcome["forget"] = vault.forget([outcome.get("target", first.id)], principal=who)
        except Exception as exc:  # collected for the assertions
            outcome["error"] = exc

    t = threading.Thread(target=forget_it)
    t.start()
    assert locked.wait(10)
    errors: list[Exception] = []

    def write() -> None:
        try:
            vault.remember(f"New note for {email}", scope="s", principal=who)
        except Exception as exc:  # collected for the assertion below
            errors.append(exc)

    w = threading.Thread(target=write)
    w.start()
    w.join(0.5)
    assert w.is_alive()  # blocked on the node lock
    release.set()
    t.join(10)
    w.join(10)
    assert outcome["forget"].shredded == [ph]
    # Either the write is refused (it reached the graph lock with the old placeholder) or,
    # since the vault lookup locks the value row (FOR SHARE), it waited there and then found
    # the value shredded and took a new placeholder: never the shredded one.
    assert all(isinstance(e, Conflict) for e in errors) and len(errors) <= 1
    with vault.db.transaction(tenant) as conn:
        stored = [r["content"] for r in conn.execute(
            "SELECT content FROM memories WHERE content LIKE 'New note for %%'").fetchall()]
    assert all(ph not in c for c in stored)
    monkeypatch.undo()
    again = vault.remember(f"New note for {email}", scope="s", principal=who)
    content = vault.get(again.id, principal=who).content
    (ph2,) = [m.group(0) for m in PLACEHOLDER_RE.finditer(content)]
    assert ph2 != ph
    assert vault.get(again.id, reveal=True, principal=who).content.endswith(email)

    # 2. the write holds the node lock first: the forget waits, then sees the new support
    #    and keeps the value
    outcome["target"] = again.id
    in_write, go = threading.Event(), threading.Event()
    orig_index = graph.index

    def slow_index(*args: Any, **kwargs: Any) -> None:
        orig_index(*args, **kwargs)
        if threading.current_thread().name == "writer":
            in_write.set()
            assert go.wait(10)

    monkeypatch.setattr(graph, "index", slow_index)
    second: dict[str, Any] = {}
    w = threading.Thread(target=lambda: second.setdefault(
        "r", vault.remember(f"Third note for {email}", scope="s", principal=who)),
        name="writer")
    w.start()
    assert in_write.wait(10)
    t = threading.Thread(target=forget_it)
    t.start()
    t.join(0.5)
    assert t.is_alive(), outcome  # waiting for the writer's node lock
    go.set()
    w.join(10)
    t.join(10)
    assert outcome["forget"].deleted == [again.id] and outcome["forget"].shredded == []
    assert _live(vault, tenant, ph2)
    assert vault.get(second["r"].id, reveal=True, principal=who).content.endswith(email)
