"""BM25 postings kept by the database (migration 0010) and the exact top-n read from them.

After writes, supersedes, archive/restore, content edits, forgets, a subject erase, a
tenant purge and concurrent writers the postings equal a recount from ``memories``; the
lexical top-n from the postings equals the recount's ranking (ids, scores to 1e-9, ties by
id), with early termination actually happening on a corpus of common terms, and on small
generated corpora; without postings or with filters the query takes the scan."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from mnemovault.store import memories as memory_store
from mnemovault.store import search
from mnemovault.vault import MemoryVault
from tests import lexical
from tests.dbcheck import scratch_database

WORDS = ("garden", "tomato", "bicycle", "repair", "marathon", "training", "piano", "lesson",
         "quarterly", "report", "lisbon", "trip", "sourdough", "bread", "kayak", "river")

# the postings a recount gives, minus those kept, and the other way round (RLS: this tenant)
_DRIFT = """
WITH real AS (SELECT m.tenant_id, m.scope, u.lexeme,
                     coalesce(array_length(u.positions, 1), 1) AS tf, m.tsv_length AS dl,
                     m.id AS memory_id
              FROM memories m, unnest(m.tsv) u
              WHERE m.tenant_id = %(t)s AND m.status = 'active' AND NOT m.archived),
     kept AS (SELECT tenant_id, scope, lexeme, tf, dl, memory_id FROM lexical_postings
              WHERE tenant_id = %(t)s)
SELECT (SELECT count(*) FROM (SELECT * FROM real EXCEPT ALL SELECT * FROM kept) a) AS missing,
       (SELECT count(*) FROM (SELECT * FROM kept EXCEPT ALL SELECT * FROM real) b) AS extra,
       (SELECT count(*) FROM kept) AS kept
"""


def _drift(vault: MemoryVault, tenant: str) -> dict[str, int]:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute(_DRIFT, {"t": tenant}).fetchone()
    return {k: int(v) for k, v in row.items()}


def _assert_exact(vault: MemoryVault, tenant: str) -> int:
    d = _drift(vault, tenant)
    assert d["missing"] == 0 and d["extra"] == 0, d
    return d["kept"]


def _texts(n: int, seed: int, words: tuple[str, ...] = WORDS) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(2, 9))) for _ in range(n)]


def _insert(vault: MemoryVault, tenant: str, scope: str, texts: list[str]) -> list[uuid.UUID]:
    """Rows straight into ``memories`` (one multi-row INSERT, as remember_many does), with a
    stand-in embedding: fast enough for generated corpora."""
    from mnemovault.ids import uuid7

    vec = np.ones(384, dtype=np.float32) / np.sqrt(384)
    now = datetime.now(UTC)
    ids = [uuid7() for _ in texts]
    with vault.db.transaction(tenant) as conn:
        rows = [(tenant, i, scope, None, "episode", t, None, vec, now - timedelta(seconds=j),
                 now, Jsonb({"source": "test"}), None, 1, *lexical.doc(vault, conn, t),
                 None, None, None, None,  # not sealed (key_id, *_sealed)
                 now - timedelta(seconds=j), None)  # valid from its creation
                for j, (i, t) in enumerate(zip(ids, texts, strict=True))]
        memory_store.insert_many(conn, rows)
    return ids


def _same_ranking(fast: list[dict[str, Any]], slow: list[dict[str, Any]]) -> None:
    assert [r["id"] for r in fast] == [r["id"] for r in slow]
    for a, b in zip(fast, slow, strict=True):
        assert abs(a["score"] - b["score"]) <= 1e-9
        assert abs(a["qmax"] - b["qmax"]) <= 1e-9
    scores = [(-r["score"], r["id"]) for r in fast]
    assert scores == sorted(scores)  # best first, ties by id


def _top(vault: MemoryVault, tenant: str, scope: str, query: str, n: int
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    where, params = search.filter_sql(tenant, scope)
    explain: dict[str, Any] = {}
    with vault.db.transaction(tenant) as conn:
        terms = lexical.q(vault, conn, query)
        fast = search.text_candidates(conn, terms, where, params, n, explain=explain)
        slow = search.text_candidates_recount(conn, lexical.q(vault, conn, query), where, params, n)
    return fast, slow, explain


def test_postings_follow_every_change(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    receipts = vault.remember_many([{"content": t, "scope": "p"} for t in _texts(30, 1)],
                                   principal=who)
    vault.remember_many([{"content": t, "scope": "q"} for t in _texts(5, 2)], principal=who)
    kept = _assert_exact(vault, tenant)
    assert kept > 35  # several lexemes a memory
    # a key's second version supersedes the first
    vault.remember("violin lesson on monday", scope="p", key="k", principal=who)
    vault.remember("violin concert on friday", scope="p", key="k", principal=who)
    _assert_exact(vault, tenant)
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM lexical_postings WHERE lexeme = %s "
                            "AND memory_id IN (SELECT id FROM memories WHERE key = 'k')",
                            (lexical.lx(vault, conn, "lesson"),)).fetchone()["n"] == 0  # superseded
    # archive, restore, a scope move and a content edit (rows of the update trigger)
    ids = [r.id for r in receipts[:6]]
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = ANY(%s)", (ids,))
    before = _assert_exact(vault, tenant)
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = false WHERE id = ANY(%s)", (ids[:3],))
        conn.execute("UPDATE memories SET scope = 'q' WHERE id = %s", (ids[3],))  # archived
        conn.execute("UPDATE memories SET scope = 'q' WHERE id = %s", (receipts[10].id,))
        conn.execute("UPDATE memories SET content = 'kayak kayak kayak river', tsv = %s, "
                     "tsv_length = %s WHERE id = %s",
                     (*lexical.doc(vault, conn, "kayak kayak kayak river"), receipts[11].id))
    assert _assert_exact(vault, tenant) > before
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT tf, dl FROM lexical_postings WHERE memory_id = %s "
                           "AND lexeme = %s", (receipts[11].id, lexical.lx(vault, conn, "kayak"))
                           ).fetchone()
    assert (row["tf"], row["dl"]) == (3, 2)
    # access statistics and pins change nothing
    vault.recall("kayak river", scope="p", principal=who)
    vault.pin([receipts[12].id], principal=who)
    _assert_exact(vault, tenant)
    # the governed forget, archived ones included
    vault.forget([r.id for r in receipts[:15]], principal=who)
    _assert_exact(vault, tenant)
    with vault.db.transaction(tenant) as conn:
        rest = [r["id"] for r in conn.execute("SELECT id FROM memories WHERE scope = 'p'")]
    vault.forget(rest, principal=who)
    assert _assert_exact(vault, tenant) > 0  # scope q is left
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM lexical_postings WHERE scope = 'p'"
                            ).fetchone()["n"] == 0


def test_postings_after_a_subject_erase(vault: MemoryVault, tenant: str) -> None:
    from tests.subjects_world import build

    w = build(vault, tenant)
    _assert_exact(vault, tenant)
    vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    assert _assert_exact(vault, tenant) > 0


def test_postings_under_concurrent_writers(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            for j in range(3):
                receipts = vault.remember_many([{"content": t, "scope": "busy"}
                                                for t in _texts(12, seed * 10 + j)],
                                               principal=who)
                vault.forget([receipts[0].id], principal=who)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with vault.db.transaction(tenant) as conn:
        live = conn.execute("SELECT count(DISTINCT memory_id) AS n FROM lexical_postings "
                            "WHERE scope = 'busy'").fetchone()["n"]
    assert live == 4 * 3 * 11
    _assert_exact(vault, tenant)


def test_postings_go_with_a_tenant_purge(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "gone"} for t in _texts(10, 5)],
                        principal=who)
    other = tenant + "-keep"
    vault.ensure_tenant(other)
    vault.remember_many([{"content": t, "scope": "gone"} for t in _texts(4, 6)],
                        principal=vault.principal(other))
    assert _assert_exact(vault, tenant) > 0
    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    result = vault.tenants.purge_expired(now=t0 + timedelta(days=31))
    (mine,) = [p for p in result["purged"] if p["tenant"] == tenant]
    assert mine["rows"] > 0
    import psycopg

    with psycopg.connect(vault.db.url) as conn:  # the owner: no row-level security
        left = conn.execute("SELECT count(*) FROM lexical_postings WHERE tenant_id = %s",
                            (tenant,)).fetchone()[0]
        kept = conn.execute("SELECT count(*) FROM lexical_postings WHERE tenant_id = %s",
                            (other,)).fetchone()[0]
    assert left == 0 and kept > 0
    assert _assert_exact(vault, other) == kept


@pytest.fixture
def maxscore(monkeypatch: pytest.MonkeyPatch) -> None:
    """MaxScore however few the postings (small scopes read them all, in one pass)."""
    monkeypatch.setattr(search, "POSTINGS_READ_ALL", 0)


@pytest.mark.usefixtures("maxscore")
def test_common_terms_terminate_early_and_rank_exactly(vault: MemoryVault,
                                                       tenant: str) -> None:
    """Every memory holds some of six common words; a query of all six must not read
    every posting, and ranks as the recount does."""
    rng = random.Random(3)
    common = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
    filler = tuple(f"w{i}" for i in range(300))
    texts = [" ".join(rng.sample(common, rng.randint(1, 4))
                      + rng.sample(filler, rng.randint(2, 10))) for _ in range(1500)]
    texts += [" ".join(common) + " w1"] * 3 + ["alpha alpha alpha bravo"]
    _insert(vault, tenant, "common", texts)
    for query, n in (("alpha bravo charlie delta echo foxtrot", 10),
                     ("alpha bravo w7", 25), ("echo foxtrot delta", 5),
                     ("alpha bravo charlie delta echo foxtrot", 100)):
        fast, slow, explain = _top(vault, tenant, "common", query, n)
        assert len(fast) == n
        _same_ranking(fast, slow)
        assert explain["path"] == "postings"
        if n <= 25:
            # early termination: some terms non-essential (their postings not read), and
            # exact scores for fewer memories than hold a term
            assert explain["nonessential"], explain
            assert explain["read"] < explain["df"], explain
            assert explain["candidates"] < explain["partial"] or explain["partial"] < 100


@pytest.mark.usefixtures("maxscore")
@pytest.mark.parametrize("probe_cost, way", [(1e-9, "probe"), (1e9, "scan")])
def test_non_essential_terms_probed_or_scanned_rank_alike(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch,
        probe_cost: float, way: str) -> None:
    """The non-essential terms' part of the candidates' scores, by a probe per candidate
    or by one scan of those terms' postings (the cost constant picks), gives the
    recount's ranking either way; with every term essential θ comes from the partial
    scores (no probe)."""
    monkeypatch.setattr(search, "POSTINGS_PROBE_COST", probe_cost)
    rng = random.Random(5)
    common = ("alpha", "bravo", "charlie", "delta")
    filler = tuple(f"w{i}" for i in range(40))
    texts = [" ".join(rng.sample(common, rng.randint(1, 3))
                      + rng.choices(filler, k=rng.randint(1, 8))) for _ in range(1200)]
    _insert(vault, tenant, "ways", texts)
    seen: dict[str, set[Any]] = {"nonessential_by": set(), "theta_from": set()}
    for query, n in (("alpha bravo charlie delta", 10), ("alpha w3", 40),
                     ("w1 w2 alpha", 20), ("w5 w6", 100), ("bravo delta w9", 5)):
        fast, slow, explain = _top(vault, tenant, "ways", query, n)
        _same_ranking(fast, slow)
        assert explain["path"] == "postings", explain
        for k in seen:
            seen[k].add(explain[k])
        assert explain["theta_from"] == ("seeds" if explain["nonessential"] else "partial")
    assert seen["nonessential_by"] == {way, None}, seen
    assert seen["theta_from"] == {"seeds", "partial"}, seen


@pytest.mark.usefixtures("maxscore")
def test_a_failed_estimate_takes_a_second_pass(vault: MemoryVault, tenant: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A threshold guessed too high makes the non-essential terms too many: the pass sees
    it (θ below their bound) and runs again, still exact."""
    _insert(vault, tenant, "two", _texts(400, 11))
    monkeypatch.setattr(search, "_estimate_theta", lambda *a: 1e6)
    where, params = search.filter_sql(tenant, "two")
    explain: dict[str, Any] = {}
    with vault.db.transaction(tenant) as conn:
        terms = lexical.q(vault, conn, "garden tomato lisbon trip")
        fast = search.text_candidates(conn, terms, where, params, 10,
                                      explain=explain)
        terms = lexical.q(vault, conn, "garden tomato lisbon trip")
        slow = search.text_candidates_recount(conn, terms, where,
                                              params, 10)
    _same_ranking(fast, slow)
    assert explain["passes"] == 2


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpus=st.lists(st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=7),
                       min_size=1, max_size=40),
       query=st.lists(st.sampled_from(WORDS[:8]), min_size=1, max_size=5),
       n=st.integers(min_value=1, max_value=12), read_all=st.booleans())
def test_generated_corpora_rank_as_the_recount(vault: MemoryVault, tenant: str,
                                               corpus: list[list[str]], query: list[str],
                                               n: int, read_all: bool) -> None:
    scope = f"g{uuid.uuid4().hex[:10]}"
    _insert(vault, tenant, scope, [" ".join(words) for words in corpus])
    saved = search.POSTINGS_READ_ALL
    search.POSTINGS_READ_ALL = saved if read_all else 0  # else MaxScore, bounds and all
    try:
        fast, slow, explain = _top(vault, tenant, scope, " ".join(query), n)
    finally:
        search.POSTINGS_READ_ALL = saved
    _same_ranking(fast, slow)
    if fast:
        assert explain["path"] == "postings"


def test_without_postings_or_with_filters_the_query_scans(vault: MemoryVault,
                                                          tenant: str) -> None:
    _insert(vault, tenant, "np", _texts(60, 9))
    fast, slow, explain = _top(vault, tenant, "np", "garden bicycle", 10)
    assert explain["path"] == "postings"
    _same_ranking(fast, slow)
    where, params = search.filter_sql(tenant, "np", types=["episode"])
    with vault.db.transaction(tenant) as conn:
        explain = {}
        terms = lexical.q(vault, conn, "garden bicycle")
        filtered = search.text_candidates(conn, terms, where, params, 10,
                                          explain=explain)
        assert explain["path"] == "scan"
        assert [r["id"] for r in filtered] == [r["id"] for r in fast]
        # statistics kept, postings not (a database whose triggers are missing)
        conn.execute("DELETE FROM lexical_postings WHERE scope = 'np'")
        where, params = search.filter_sql(tenant, "np")
        explain = {}
        terms = lexical.q(vault, conn, "garden bicycle")
        after = search.text_candidates(conn, terms, where, params, 10,
                                       explain=explain)
        assert explain["path"] == "scan"
        _same_ranking(after, slow)


def test_the_migration_fills_the_postings_of_memories_stored_before_it(
        vault: MemoryVault) -> None:
    """0010 on a database with memories (plain PostgreSQL): TRIGGERS.create and the
    backfill, so the postings equal a recount and later writes are kept."""
    import importlib

    import psycopg
    from alembic import command

    from mnemovault.store.db import Database

    with scratch_database(vault.db.url, "mv_postings") as url:
        db = Database(url)
        command.upgrade(db.alembic_config(3), "0009_lexical_stats")
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO tenants (tenant_id) VALUES ('old')")
            for i, text in enumerate(_texts(12, 31)):
                conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, "
                             "embedding, archived) VALUES ('old', %s, 's', 'episode', %s, "
                             "'[1,0,0]', %s)", (uuid.uuid4(), text, i == 0))
        command.upgrade(db.alembic_config(3), "0013_edge")  # tsv generated still
        recount = _DRIFT.replace("%(t)s", "'old'")
        with psycopg.connect(url) as conn:  # the owner: no row-level security
            missing, extra, kept = conn.execute(recount).fetchone()
            posted = conn.execute("SELECT count(DISTINCT memory_id) FROM lexical_postings"
                                  ).fetchone()[0]
            assert (missing, extra, posted) == (0, 0, 11) and kept > 11  # not the archived
            conn.execute("INSERT INTO memories (tenant_id, id, scope, type, content, "
                         "embedding) VALUES ('old', %s, 's', 'episode', 'kayak river', "
                         "'[1,0,0]')", (uuid.uuid4(),))
            triggers = {r[0] for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memories'::regclass "
                "AND tgname LIKE 'memories_postings_%'")}
            assert conn.execute(recount).fetchone()[:2] == (0, 0)
            assert conn.execute("SELECT count(DISTINCT memory_id) FROM lexical_postings"
                                ).fetchone()[0] == 12
        module = importlib.import_module("mnemovault.store.migrations.versions.0010_postings")
        assert triggers == set(module.TRIGGERS.trigger_names()) and len(triggers) == 4
