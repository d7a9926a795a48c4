"""BM25 corpus statistics kept by the database (migration 0009): after writes, supersedes,
archiving, forgets and concurrent writers they equal a full recount, and the lexical
query that reads them ranks exactly as the one that recounts."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from mnemovault.store.search import (
    filter_sql,
    lexical_recount,
    lexical_stats,
    text_candidates,
    text_candidates_recount,
)
from mnemovault.vault import MemoryVault
from tests import lexical

WORDS = ("garden", "tomato", "bicycle", "repair", "marathon", "training", "piano", "lesson",
         "quarterly", "report", "lisbon", "trip", "sourdough", "bread", "kayak", "river",
         "museum", "ticket", "violin", "concert", "budget", "spreadsheet", "puppy", "vaccine",
         "dentist", "appointment", "chess", "tournament")


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(n)]


def _stats(vault: MemoryVault, tenant: str, scope: str) -> tuple[dict[str, Any],
                                                                  dict[str, Any]]:
    with vault.db.transaction(tenant) as conn:
        return lexical_stats(conn, scope), lexical_recount(conn, scope)


def _assert_consistent(vault: MemoryVault, tenant: str, scope: str) -> dict[str, Any]:
    kept, recount = _stats(vault, tenant, scope)
    assert kept == recount
    return kept


def test_stats_follow_writes_supersedes_archive_and_forget(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    scope = "lex"
    receipts = vault.remember_many([{"content": t, "scope": scope}
                                    for t in _texts(40, 1)], principal=who)
    vault.remember_many([{"content": t, "scope": "other"} for t in _texts(5, 2)],
                        principal=who)
    s = _assert_consistent(vault, tenant, scope)
    assert s["doc_count"] == 40 and s["df"]
    # a key's new version supersedes the old one (status change): counted once
    vault.remember("violin lesson on monday", scope=scope, key="k", principal=who)
    vault.remember("violin concert on friday", scope=scope, key="k", principal=who)
    s = _assert_consistent(vault, tenant, scope)
    assert s["doc_count"] == 41
    # archived memories leave the statistics, restored ones come back
    ids = [r.id for r in receipts[:5]]
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = ANY(%s)", (ids,))
    assert _assert_consistent(vault, tenant, scope)["doc_count"] == 36
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = false WHERE id = ANY(%s)", (ids[:2],))
    assert _assert_consistent(vault, tenant, scope)["doc_count"] == 38
    # access statistics and pins change nothing
    vault.recall("violin", scope=scope, principal=who)
    vault.pin([receipts[10].id], principal=who)
    assert _assert_consistent(vault, tenant, scope)["doc_count"] == 38
    # the governed forget (one of them archived)
    vault.forget([r.id for r in receipts[:20]], principal=who)
    assert _assert_consistent(vault, tenant, scope)["doc_count"] == 21
    # everything forgotten: no statistics rows are left behind
    with vault.db.transaction(tenant) as conn:
        rest = [r["id"] for r in conn.execute(
            "SELECT id FROM memories WHERE scope = %s", (scope,))]
    vault.forget(rest, principal=who)
    s = _assert_consistent(vault, tenant, scope)
    assert s == {"doc_count": 0, "total_length": 0, "df": {}}
    assert _assert_consistent(vault, tenant, "other")["doc_count"] == 5


def test_stats_under_concurrent_writers(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            for j in range(4):
                vault.remember_many([{"content": t, "scope": "busy"}
                                     for t in _texts(15, seed * 100 + j)], principal=who)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _assert_consistent(vault, tenant, "busy")["doc_count"] == 4 * 4 * 15


def test_stats_are_per_tenant(vault: MemoryVault, tenant: str) -> None:
    vault.remember("sourdough bread in lisbon", scope="shared-name",
                   principal=vault.principal(tenant))
    other = tenant + "-b"
    vault.ensure_tenant(other)
    kept, _ = _stats(vault, other, "shared-name")
    assert kept == {"doc_count": 0, "total_length": 0, "df": {}}
    assert _stats(vault, tenant, "shared-name")[0]["doc_count"] == 1


@pytest.mark.parametrize("query", ["violin concert budget", "tomato", "lisbon kayak trip",
                                   "violin qwertyuiop", "o'neil's violin \\ c:\\concert",
                                   "nothing matches zzzz"])
def test_lexical_query_equals_recount(vault: MemoryVault, tenant: str, query: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "rank"} for t in _texts(120, 7)],
                        principal=who)
    where, params = filter_sql(tenant, "rank")
    with vault.db.transaction(tenant) as conn:
        fast = text_candidates(conn, lexical.q(vault, conn, query), where, params, 50)
        slow = text_candidates_recount(conn, lexical.q(vault, conn, query), where, params, 50)
    assert [r["id"] for r in fast] == [r["id"] for r in slow]
    assert [round(r["score"], 9) for r in fast] == [round(r["score"], 9) for r in slow]
    assert all(round(r["qmax"], 9) == round(s["qmax"], 9) for r, s in zip(fast, slow, strict=True))
    if query.startswith("nothing"):
        assert fast == []
    elif "qwertyuiop" in query:  # a term the scope lacks still counts in the maximum
        with vault.db.transaction(tenant) as conn:
            alone = text_candidates(conn, lexical.q(vault, conn, "violin"), where, params, 50)
        assert [r["id"] for r in alone] == [r["id"] for r in fast]
        assert fast[0]["qmax"] > 2 * alone[0]["qmax"]
    else:
        assert fast and all(0 < r["score"] < r["qmax"] for r in fast)


def test_maxscore_skips_what_cannot_reach_the_top(vault: MemoryVault, tenant: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import mnemovault.store.search as search

    who = vault.principal(tenant)
    items = [{"content": f"apple pie recipe number {i} apple", "scope": "ms"}
             for i in range(200)]
    items += [{"content": f"zebra apple {'zebra ' * (i % 3)}sighting {i}", "scope": "ms"}
              for i in range(20)]
    vault.remember_many(items, principal=who)
    calls: list[int] = []
    real = search._bm25

    def spy(*a: Any, **kw: Any) -> Any:
        rows = real(*a, **kw)
        calls.append(len(a[3]))  # how many terms were matched
        return rows

    monkeypatch.setattr(search, "_bm25", spy)
    # a filter: the path over memories (unfiltered recalls read the postings: test_postings)
    where, params = filter_sql(tenant, "ms", include_archived=True)
    with vault.db.transaction(tenant) as conn:
        fast = search.text_candidates(conn, lexical.q(vault, conn, "zebra apple"), where, params, 5)
        terms = lexical.q(vault, conn, "zebra apple")
        slow = text_candidates_recount(conn, terms, where, params, 5)
        names = {lexical.lx(vault, conn, w): w for w in ("zebra", "appl")}
        tf = conn.execute("SELECT lexeme, max_tf FROM lexical_df WHERE scope = 'ms' "
                          "AND lexeme = ANY(%s)", (list(names),)).fetchall()
    assert calls == [1]  # only the rare term's memories were scored
    assert [r["id"] for r in fast] == [r["id"] for r in slow]
    assert [round(r["score"], 9) for r in fast] == [round(r["score"], 9) for r in slow]
    assert {names[r["lexeme"]]: r["max_tf"] for r in tf} == {"zebra": 3, "appl": 2}
    # a small n with a common term only: nothing to skip, one full pass
    calls.clear()
    with vault.db.transaction(tenant) as conn:
        terms = lexical.q(vault, conn, "apple")
        assert len(search.text_candidates(conn, terms, where, params, 5)) == 5
    assert calls == [1]


def test_without_statistics_the_query_recounts(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "nostats"} for t in _texts(30, 9)],
                        principal=who)
    where, params = filter_sql(tenant, "nostats")
    with vault.db.transaction(tenant) as conn:
        before = text_candidates(conn, lexical.q(vault, conn, "violin budget"), where, params, 10)
        conn.execute("DELETE FROM lexical_scope_stats WHERE scope = 'nostats'")
        after = text_candidates(conn, lexical.q(vault, conn, "violin budget"), where, params, 10)
    assert before and [r["id"] for r in after] == [r["id"] for r in before]
