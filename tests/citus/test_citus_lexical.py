"""BM25 corpus statistics on Citus (migration 0009's triggers, installed on the shards by
``store/citus.py`` from the same definition): after writes, forgets, a subject erase, a
tenant purge and concurrent writers of one tenant (and of several) they equal a recount of
every tenant's memories; installing the triggers on a database that has rows recounts
them; a tenant's recall reads them (it never recounts) and each of its lexical queries is
routed to one shard.

The same for migration 0010's postings (its triggers installed on the shards in the same
way): they equal a recount after writes, supersedes, archive/restore, scope and content
edits, forgets, an erase, a purge and concurrent writers; installing the triggers fills
the table; the lexical top-n is read from them (not scanned), ranks as the recount does,
and each of its queries is routed to one shard."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from mnemovault.store import citus, search
from mnemovault.store.migrations.triggers import TriggerSet
from mnemovault.vault import MemoryVault
from tests import lexical
from tests.subjects_world import build

pytestmark = pytest.mark.citus

WORDS = ("garden", "tomato", "bicycle", "repair", "marathon", "training", "piano", "lesson",
         "quarterly", "report", "lisbon", "trip", "sourdough", "bread", "kayak", "river")


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 10))) for _ in range(n)]


# every tenant's statistics against a recount of every tenant's live memories (as the
# owner: row-level security hides nothing); max_tf is an upper bound and not compared
_DRIFT = """
WITH kept AS (SELECT tenant_id, scope, sum(doc_count) AS doc_count,
                     sum(total_length) AS total_length FROM (
                SELECT tenant_id, scope, doc_count, total_length FROM lexical_scope_stats
                UNION ALL SELECT tenant_id, scope, n, len FROM lexical_stat_deltas
                WHERE lexeme IS NULL) k GROUP BY 1, 2 HAVING sum(doc_count) <> 0),
     real AS (SELECT tenant_id, scope, count(*) AS doc_count, sum(tsv_length) AS total_length
              FROM memories WHERE status = 'active' AND NOT archived GROUP BY 1, 2),
     kept_df AS (SELECT tenant_id, scope, lexeme, sum(df) AS df FROM (
                   SELECT tenant_id, scope, lexeme, df FROM lexical_df
                   UNION ALL SELECT tenant_id, scope, lexeme, n FROM lexical_stat_deltas
                   WHERE lexeme IS NOT NULL) k GROUP BY 1, 2, 3 HAVING sum(df) <> 0),
     real_df AS (SELECT m.tenant_id, m.scope, u.lexeme, count(*) AS df
                 FROM memories m, unnest(m.tsv) u
                 WHERE m.status = 'active' AND NOT m.archived GROUP BY 1, 2, 3)
SELECT (SELECT count(*) FROM ((SELECT * FROM kept EXCEPT SELECT * FROM real)
                              UNION ALL (SELECT * FROM real EXCEPT SELECT * FROM kept)) a),
       (SELECT count(*) FROM ((SELECT * FROM kept_df EXCEPT SELECT * FROM real_df)
                              UNION ALL (SELECT * FROM real_df EXCEPT SELECT * FROM kept_df)) b),
       (SELECT count(*) FROM kept), (SELECT count(*) FROM kept_df)
"""


def _drift(vault: MemoryVault) -> tuple[int, int]:
    """(scope rows, lexeme rows) that differ from the recount; asserts there are some."""
    with psycopg.connect(vault.db.url) as conn:
        scopes, lexemes, kept, kept_df = conn.execute(_DRIFT).fetchone()
    assert kept > 0 and kept_df > 0  # the comparison is not between two empty sets
    return int(scopes), int(lexemes)


def _tenant_stats(vault: MemoryVault, tenant: str, scope: str) -> tuple[dict[str, Any],
                                                                         dict[str, Any]]:
    with vault.db.transaction(tenant) as conn:
        return search.lexical_stats(conn, scope), search.lexical_recount(conn, scope)


def _set(target: str) -> TriggerSet:
    """The trigger set on ``memories`` that keeps ``target`` (0009's or 0010's: those
    with functions; 0014's run theirs on a change of ``tsv`` alone)."""
    (found,) = [s for s in citus.trigger_sets()
                if s.table == "memories" and target in s.targets and s.functions]
    assert isinstance(found, TriggerSet)
    return found


def test_the_triggers_are_on_every_shard(vault: MemoryVault) -> None:
    sets = [s for s in citus.trigger_sets() if s.table == "memories" and s.functions]
    # 0016's statistics deltas (in the place of 0009's set, whose bodies they supersede)
    # and 0010's postings
    assert [s.targets for s in sets] == [("lexical_scope_stats", "lexical_df",
                                          "lexical_stat_deltas"), ("lexical_postings",)]
    terms = [n for s in citus.trigger_sets() if s.table == "memories" and not s.functions
             for n in s.trigger_names()]  # 0014's: a rewrite of tsv alone
    assert terms == ["memories_terms_lexical", "memories_terms_postings"]
    with psycopg.connect(vault.db.url) as conn:
        rows = conn.execute(
            "SELECT result FROM run_command_on_shards('memories', $$SELECT count(*) FROM "
            "pg_trigger WHERE tgrelid = '%s'::regclass AND tgname LIKE 'memories_terms_%%'$$)"
        ).fetchall()
        assert rows and {r[0] for r in rows} == {"2"}
    with psycopg.connect(vault.db.url) as conn:
        shards = conn.execute("SELECT count(*) FROM pg_dist_shard "
                              "WHERE logicalrelid = 'memories'::regclass").fetchone()[0]
        shell = {r[0] for r in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memories'::regclass")}
        for triggers, prefix in zip(sets, ("memories_lexical_", "memories_postings_"),
                                    strict=True):
            names = triggers.trigger_names()
            assert names and all(n.startswith(prefix) for n in names)
            rows = conn.execute(
                "SELECT result FROM run_command_on_shards('memories', $$SELECT count(*) FROM "
                "pg_trigger WHERE tgrelid = '%s'::regclass AND tgname LIKE "
                f"'{prefix}%%'$$)").fetchall()
            assert set(names) <= shell
            # Citus keeps TRUNCATE triggers on the coordinator's table (they fire there, on
            # the distributed table: the function then empties the targets through Citus)
            on_shards = [n for n, t in zip(names, triggers.triggers, strict=True)
                         if "TRUNCATE" not in t]
            assert len(rows) == shards > 1
            assert {r[0] for r in rows} == {str(len(on_shards))} and len(on_shards) == 3


def test_stats_follow_writes_forget_erase_and_purge(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    receipts = vault.remember_many([{"content": t, "scope": "lex"} for t in _texts(40, 1)],
                                   principal=who)
    vault.remember("violin lesson on monday", scope="lex", key="k", principal=who)
    vault.remember("violin concert on friday", scope="lex", key="k", principal=who)  # supersede
    kept, recount = _tenant_stats(vault, tenant, "lex")
    assert kept == recount and kept["doc_count"] == 41
    with vault.db.transaction(tenant) as conn:  # archive: a row-level UPDATE trigger
        conn.execute("UPDATE memories SET archived = true WHERE tenant_id = %s AND id = ANY(%s)",
                     (tenant, [r.id for r in receipts[:5]]))
    kept, recount = _tenant_stats(vault, tenant, "lex")
    assert kept == recount and kept["doc_count"] == 36
    vault.forget([r.id for r in receipts[5:20]], principal=who)
    kept, recount = _tenant_stats(vault, tenant, "lex")
    assert kept == recount and kept["doc_count"] == 21
    w = build(vault, tenant)  # Ada and Bob in scopes s and t
    before, _ = _tenant_stats(vault, tenant, "s")
    er = vault.subjects.erase(w.ada, scope="s", principal=who)
    assert er.deleted
    kept, recount = _tenant_stats(vault, tenant, "s")
    assert kept == recount and kept["doc_count"] < before["doc_count"]
    assert _drift(vault) == (0, 0)
    # a tenant purge removes the tenant's statistics with its memories
    gone = f"{tenant}-purged"
    vault.remember_many([{"content": t, "scope": "p"} for t in _texts(10, 5)],
                        principal=vault.principal(gone))
    with psycopg.connect(vault.db.url) as conn:
        assert conn.execute("SELECT (SELECT count(*) FROM lexical_df WHERE tenant_id = %(t)s)"
                            " + (SELECT count(*) FROM lexical_stat_deltas WHERE tenant_id = "
                            "%(t)s)", {"t": gone}).fetchone()[0] > 0
    t0 = datetime.now(UTC)
    vault.tenants.delete(gone, confirm=f"DELETE-{gone}", now=t0)
    result = vault.tenants.purge_expired(now=t0 + timedelta(days=31))
    assert not result["errors"] and gone in [p["tenant"] for p in result["purged"]]
    with psycopg.connect(vault.db.url) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM lexical_df WHERE tenant_id = %(t)s) "
            "+ (SELECT count(*) FROM lexical_scope_stats WHERE tenant_id = %(t)s) "
            "+ (SELECT count(*) FROM lexical_stat_deltas WHERE tenant_id = %(t)s) "
            "+ (SELECT count(*) FROM memories WHERE tenant_id = %(t)s)", {"t": gone}).fetchone()
    assert left[0] == 0
    assert _drift(vault) == (0, 0)


def test_stats_under_concurrent_writers(vault: MemoryVault, tenant: str) -> None:
    """8 writers of one tenant and scope (they queue on its statistics row), and 4 more
    tenants at the same time (other shards, both workers)."""
    tenants = [tenant] * 8 + [f"{tenant}-w{i}" for i in range(4)]
    errors: list[BaseException] = []

    def writer(i: int, t: str) -> None:
        try:
            for j in range(3):
                vault.remember_many([{"content": x, "scope": "busy"}
                                     for x in _texts(6, i * 100 + j)],
                                    principal=vault.principal(t))
            vault.remember(f"single note {i}", scope="busy", principal=vault.principal(t))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i, t)) for i, t in enumerate(tenants)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    kept, recount = _tenant_stats(vault, tenant, "busy")
    assert kept == recount and kept["doc_count"] == 8 * 19
    for t in tenants[8:]:
        kept, recount = _tenant_stats(vault, t, "busy")
        assert kept == recount and kept["doc_count"] == 19
    assert _drift(vault) == (0, 0)


def test_installing_the_triggers_recounts_existing_rows(vault: MemoryVault,
                                                        tenant: str) -> None:
    """A Citus database that had no statistics (before this change): ``distribute``
    creates the triggers and recounts, in one transaction."""
    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "old"} for t in _texts(20, 3)], principal=who)
    sets = _set("lexical_df")
    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("SET citus.enable_unsafe_triggers = on")
        for name in sets.trigger_names():
            conn.execute(f"DROP TRIGGER {name} ON memories")
        conn.execute("DELETE FROM lexical_df")
        conn.execute("DELETE FROM lexical_scope_stats")
        conn.execute("DELETE FROM lexical_stat_deltas")
    # written while there are no triggers: only the recount can know about these
    vault.remember_many([{"content": t, "scope": "old"} for t in _texts(7, 4)], principal=who)
    with vault.db.transaction(tenant) as conn:
        assert search.lexical_stats(conn, "old")["doc_count"] == 0
    changed = citus.distribute(vault.db.url, vault.db.app_role)
    assert changed is not None and changed["triggers"] == sets.trigger_names()
    kept, recount = _tenant_stats(vault, tenant, "old")
    assert kept == recount and kept["doc_count"] == 27
    assert _drift(vault) == (0, 0)
    vault.remember("bicycle repair in lisbon", scope="old", principal=who)  # kept again
    kept, recount = _tenant_stats(vault, tenant, "old")
    assert kept == recount and kept["doc_count"] == 28


def test_recall_reads_the_statistics_on_one_shard(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.citus.test_citus import _explain

    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "r"} for t in _texts(60, 8)], principal=who)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("recall recounted the BM25 statistics")

    monkeypatch.setattr(search, "text_candidates_recount", refuse)
    hits = vault.recall("marathon training in lisbon", scope="r", principal=who)
    assert hits and any(h.text_rank is not None for h in hits)  # the lexical list answered
    where, params = search.filter_sql(tenant, "r")
    with vault.db.transaction(tenant) as conn:
        proxy, plans = _explain(conn)
        terms = lexical.q(vault, conn, "marathon training in lisbon")
        rows = search.text_candidates(proxy, terms, where,  # type: ignore[arg-type]
                                      params, 20)
    assert rows  # the statistics query and at least one BM25 pass, for real
    assert len(plans) >= 2
    assert any("lexical_df" in p for p in plans)
    for plan in plans:
        assert "Task Count: 1" in plan, plan


# -- the postings of migration 0010 ---------------------------------------------------------
# every tenant's postings against a recount of every tenant's live memories (as the owner)
_POSTINGS_DRIFT = """
WITH real AS (SELECT m.tenant_id, m.scope, u.lexeme,
                     coalesce(array_length(u.positions, 1), 1) AS tf, m.tsv_length AS dl,
                     m.id AS memory_id
              FROM memories m, unnest(m.tsv) u WHERE m.status = 'active' AND NOT m.archived),
     kept AS (SELECT tenant_id, scope, lexeme, tf, dl, memory_id FROM lexical_postings)
SELECT (SELECT count(*) FROM (SELECT * FROM real EXCEPT ALL SELECT * FROM kept) a),
       (SELECT count(*) FROM (SELECT * FROM kept EXCEPT ALL SELECT * FROM real) b),
       (SELECT count(*) FROM kept)
"""


def _postings_drift(vault: MemoryVault) -> tuple[int, int]:
    """(postings missing, postings extra) against the recount; asserts there are some."""
    with psycopg.connect(vault.db.url) as conn:
        missing, extra, kept = conn.execute(_POSTINGS_DRIFT).fetchone()
    assert kept > 0  # the comparison is not between two empty sets
    return int(missing), int(extra)


def _postings_of(vault: MemoryVault, tenant: str, scope: str | None = None) -> int:
    with psycopg.connect(vault.db.url) as conn:
        return int(conn.execute(
            "SELECT count(*) FROM lexical_postings WHERE tenant_id = %s "
            "AND (%s::text IS NULL OR scope = %s)", (tenant, scope, scope)).fetchone()[0])


def test_postings_follow_writes_forget_and_purge(vault: MemoryVault,
                                                       tenant: str) -> None:
    who = vault.principal(tenant)
    receipts = vault.remember_many([{"content": t, "scope": "pst"} for t in _texts(40, 21)],
                                   principal=who)
    assert _postings_drift(vault) == (0, 0) and _postings_of(vault, tenant, "pst") > 40
    vault.remember("violin lesson on monday", scope="pst", key="k", principal=who)
    vault.remember("violin concert on friday", scope="pst", key="k", principal=who)
    with vault.db.transaction(tenant) as conn:  # the superseded version left the postings
        assert conn.execute(
            "SELECT count(*) AS n FROM lexical_postings WHERE tenant_id = %s "
            "AND lexeme = %s AND memory_id IN (SELECT id FROM memories "
            "WHERE tenant_id = %s AND key = 'k')",
            (tenant, lexical.lx(vault, conn, "lesson"), tenant)).fetchone()["n"] == 0
    assert _postings_drift(vault) == (0, 0)
    ids = [r.id for r in receipts[:6]]
    with vault.db.transaction(tenant) as conn:  # the row-level UPDATE trigger
        conn.execute("UPDATE memories SET archived = true WHERE tenant_id = %s "
                     "AND id = ANY(%s)", (tenant, ids))
    assert _postings_drift(vault) == (0, 0)
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = false WHERE tenant_id = %s "
                     "AND id = ANY(%s)", (tenant, ids[:3]))
        conn.execute("UPDATE memories SET scope = 'pst2' WHERE tenant_id = %s AND id = %s",
                     (tenant, receipts[10].id))
        conn.execute("UPDATE memories SET content = 'kayak kayak kayak river', tsv = %s, "
                     "tsv_length = %s WHERE tenant_id = %s AND id = %s",
                     (*lexical.doc(vault, conn, "kayak kayak kayak river"), tenant,
                      receipts[11].id))
        row = conn.execute("SELECT tf, dl FROM lexical_postings WHERE tenant_id = %s "
                           "AND memory_id = %s AND lexeme = %s",
                           (tenant, receipts[11].id, lexical.lx(vault, conn, "kayak"))
                           ).fetchone()
        posted = {r["memory_id"] for r in conn.execute(
            "SELECT DISTINCT memory_id FROM lexical_postings WHERE tenant_id = %s "
            "AND memory_id = ANY(%s)", (tenant, ids))}
        moved = conn.execute("SELECT DISTINCT scope FROM lexical_postings WHERE tenant_id = %s "
                             "AND memory_id = %s", (tenant, receipts[10].id)).fetchall()
    assert (row["tf"], row["dl"]) == (3, 2)
    assert posted == set(ids[:3])  # the restored ones are back, the archived ones not
    assert [r["scope"] for r in moved] == ["pst2"]
    assert _postings_drift(vault) == (0, 0)
    before = _postings_of(vault, tenant)
    vault.forget([r.id for r in receipts[5:20]], principal=who)
    assert 0 < _postings_of(vault, tenant) < before
    assert _postings_drift(vault) == (0, 0)
    gone = f"{tenant}-pgone"
    vault.remember_many([{"content": t, "scope": "p"} for t in _texts(10, 22)],
                        principal=vault.principal(gone))
    assert _postings_of(vault, gone) > 0
    t0 = datetime.now(UTC)
    vault.tenants.delete(gone, confirm=f"DELETE-{gone}", now=t0)
    result = vault.tenants.purge_expired(now=t0 + timedelta(days=31))
    assert not result["errors"] and gone in [p["tenant"] for p in result["purged"]]
    assert _postings_of(vault, gone) == 0
    assert _postings_drift(vault) == (0, 0)


def test_postings_after_a_subject_erase(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)  # Ada and Bob in scopes s and t
    before = {s: _postings_of(vault, tenant, s) for s in ("s", "t")}
    assert _postings_drift(vault) == (0, 0) and before["s"] > 0
    assert vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant)).deleted
    assert 0 < _postings_of(vault, tenant, "s") < before["s"]  # Bob's are left
    assert _postings_of(vault, tenant, "t") == before["t"]
    assert _postings_drift(vault) == (0, 0)


def test_postings_under_concurrent_writers(vault: MemoryVault, tenant: str) -> None:
    """8 writers of one tenant and scope (writing and forgetting), and 4 more tenants at the
    same time (other shards, both workers)."""
    tenants = [tenant] * 8 + [f"{tenant}-pw{i}" for i in range(4)]
    errors: list[BaseException] = []

    def writer(i: int, t: str) -> None:
        try:
            for j in range(3):
                receipts = vault.remember_many([{"content": x, "scope": "pbusy"}
                                                for x in _texts(6, 500 + i * 100 + j)],
                                               principal=vault.principal(t))
                vault.forget([receipts[0].id], principal=vault.principal(t))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i, t)) for i, t in enumerate(tenants)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    with psycopg.connect(vault.db.url) as conn:
        live = dict(conn.execute(
            "SELECT tenant_id, count(DISTINCT memory_id) FROM lexical_postings "
            "WHERE scope = 'pbusy' AND tenant_id = ANY(%s) GROUP BY 1",
            (list(set(tenants)),)).fetchall())
    assert live == {t: (8 if t == tenant else 1) * 3 * 5 for t in set(tenants)}
    assert _postings_drift(vault) == (0, 0)


def test_installing_the_postings_triggers_fills_the_table(vault: MemoryVault,
                                                          tenant: str) -> None:
    """A Citus database whose postings were never kept (0010 before its TRIGGERS):
    ``distribute`` creates the triggers and fills the table, in one transaction."""
    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "pold"} for t in _texts(20, 23)],
                        principal=who)
    sets = _set("lexical_postings")
    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("SET citus.enable_unsafe_triggers = on")
        for name in sets.trigger_names():
            conn.execute(f"DROP TRIGGER {name} ON memories")
        conn.execute("DELETE FROM lexical_postings")
    vault.remember_many([{"content": t, "scope": "pold"} for t in _texts(7, 24)],
                        principal=who)  # written while there are no triggers
    assert _postings_of(vault, tenant) == 0
    where, params = search.filter_sql(tenant, "pold")
    explain: dict[str, Any] = {}
    with vault.db.transaction(tenant) as conn:  # no postings: the scan answers
        terms = lexical.q(vault, conn, "garden tomato")
        search.text_candidates(conn, terms, where, params, 5, explain=explain)
    assert explain["path"] == "scan"
    changed = citus.distribute(vault.db.url, vault.db.app_role)
    assert changed is not None and changed["triggers"] == sets.trigger_names()
    assert _postings_drift(vault) == (0, 0)
    with psycopg.connect(vault.db.url) as conn:
        assert conn.execute("SELECT count(DISTINCT memory_id) FROM lexical_postings "
                            "WHERE tenant_id = %s AND scope = 'pold'",
                            (tenant,)).fetchone()[0] == 27
    vault.remember("bicycle repair in lisbon", scope="pold", principal=who)  # kept again
    assert _postings_drift(vault) == (0, 0)
    with vault.db.transaction(tenant) as conn:
        terms = lexical.q(vault, conn, "garden tomato")
        search.text_candidates(conn, terms, where, params, 5, explain=explain)
    assert explain["path"] == "postings"


def _same_ranking(fast: list[dict[str, Any]], slow: list[dict[str, Any]]) -> None:
    assert fast and [r["id"] for r in fast] == [r["id"] for r in slow]
    for a, c in zip(fast, slow, strict=True):
        assert abs(a["score"] - c["score"]) <= 1e-9
        assert abs(a["qmax"] - c["qmax"]) <= 1e-9


@pytest.mark.parametrize("read_all", [True, False], ids=["one-pass", "maxscore"])
def test_text_candidates_read_the_postings_on_one_shard(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch,
        read_all: bool) -> None:
    """The postings path (not the scan over ``memories``), exact against the recount, each
    of its queries routed to the tenant's shard; with MaxScore (``maxscore``) on common
    terms it reads fewer postings than the terms have."""
    from tests.citus.test_citus import _explain
    from tests.test_postings import _insert

    scope = f"rank-{read_all}"
    rng = random.Random(3)  # tests/test_postings.py's corpus (a third of it: one pass)
    common = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
    filler = tuple(f"w{i}" for i in range(300))
    texts = [" ".join(rng.sample(common, rng.randint(1, 4))
                      + rng.sample(filler, rng.randint(2, 10)))
             for _ in range(500 if read_all else 1500)]
    texts += [" ".join(common) + " w1"] * 3 + ["alpha alpha alpha bravo"]
    _insert(vault, tenant, scope, texts)
    if not read_all:
        monkeypatch.setattr(search, "POSTINGS_READ_ALL", 0)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the lexical query scanned memories instead of the postings")

    where, params = search.filter_sql(tenant, scope)
    for query, n in (("alpha bravo charlie delta echo foxtrot", 10), ("alpha bravo w7", 25),
                     ("echo foxtrot delta", 5)):
        with vault.db.transaction(tenant) as conn:
            terms = lexical.q(vault, conn, query)
            slow = search.text_candidates_recount(conn, terms, where, params, n)
            explain: dict[str, Any] = {}
            with monkeypatch.context() as m:
                m.setattr(search, "_bm25", refuse)
                m.setattr(search, "text_candidates_recount", refuse)
                fast = search.text_candidates(conn, lexical.q(vault, conn, query), where, params, n,
                                              explain=explain)
                proxy, plans = _explain(conn)
                terms = lexical.q(vault, conn, query)
                again = search.text_candidates(proxy, terms, where, params, n)  # type: ignore[arg-type]
        assert explain["path"] == "postings", explain
        assert len(fast) == n
        _same_ranking(fast, slow)
        assert [r["id"] for r in again] == [r["id"] for r in fast]
        if read_all:
            assert explain["read"] == explain["df"] and not explain["nonessential"]
            assert len(plans) == 2  # the statistics, one pass
        else:
            assert explain["nonessential"] and explain["read"] < explain["df"], explain
            assert len(plans) >= 3  # the statistics, the heads, a pass (or two)
        assert sum("lexical_postings" in p for p in plans) == len(plans)
        for plan in plans:
            assert "Task Count: 1" in plan, plan
            assert "Custom Scan (Citus Adaptive)" in plan, plan
