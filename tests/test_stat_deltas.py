"""BM25 statistics as base rows plus insert-only deltas (migration 0016, issue 29):
writers of one scope never wait on each other for them, a fold leaves them equal to a
recount, and a fold that dies half-way loses nothing."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from mnemovault.errors import Unavailable
from mnemovault.store import lexstats
from mnemovault.store import memories as memory_store
from mnemovault.store.db import owner_connection
from mnemovault.store.search import lexical_recount, lexical_stats
from mnemovault.vault import MemoryVault
from tests import lexical


def _row(vault: MemoryVault, conn: Any, tenant: str, scope: str,
         content: str) -> tuple[Any, ...]:
    now = datetime.now(UTC)
    vec = vault.rt.embedder.embed([content])[0]
    return (tenant, uuid.uuid4(), scope, None, "episode", content, None, vec, now, now,
            Jsonb({}), None, 1, *lexical.doc(vault, conn, content),
            None, None, None, None,  # not sealed (key_id, *_sealed)
            now, None)  # valid from now on


def _consistent(vault: MemoryVault, tenant: str, scope: str) -> dict[str, Any]:
    with vault.db.transaction(tenant) as conn:
        kept, recount = lexical_stats(conn, scope), lexical_recount(conn, scope)
    assert kept == recount
    return kept


def _deltas(vault: MemoryVault, tenant: str, scope: str) -> int:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT count(*) AS n FROM lexical_stat_deltas WHERE "
                           "tenant_id = %s AND scope = %s", (tenant, scope)).fetchone()
    assert row is not None
    return int(row["n"])


def test_two_writers_of_one_scope_do_not_wait_on_each_other(vault: MemoryVault,
                                                            tenant: str) -> None:
    vault.remember("violin lesson on monday", scope="w", principal=vault.principal(tenant))
    vault.db.fold_lexical(tenant, ["w"], wait=True)  # a base row exists, as in production
    first_in = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with vault.db.transaction(tenant) as conn:
                memory_store.insert(conn, [_row(vault, conn, tenant, "w", "violin concert friday")])
                first_in.set()
                assert release.wait(60)
        except BaseException as exc:  # reported below
            errors.append(exc)
            first_in.set()

    t = threading.Thread(target=first)
    t.start()
    try:
        assert first_in.wait(60)
        # the second writer of the scope commits while the first is still open: with a lock
        # on a shared statistics row it would wait for it (lock_timeout: fail instead)
        with vault.db.transaction(tenant) as conn:
            conn.execute("SET LOCAL lock_timeout = '3s'")
            memory_store.insert(conn, [_row(vault, conn, tenant, "w", "violin budget spreadsheet")])
        s = _consistent(vault, tenant, "w")  # the open write is not counted yet
        assert s["doc_count"] == 2
    finally:
        release.set()
        t.join(60)
    assert not errors
    assert _consistent(vault, tenant, "w")["doc_count"] == 3


def test_after_a_fold_the_statistics_equal_a_recount(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    receipts = vault.remember_many(
        [{"content": f"kayak river trip {i} {'kayak ' * (i % 4)}museum", "scope": "f"}
         for i in range(30)], principal=who)
    vault.remember_many([{"content": "chess tournament", "scope": "g"}], principal=who)
    vault.forget([r.id for r in receipts[:7]], principal=who)
    before = _consistent(vault, tenant, "f")
    assert before["doc_count"] == 23 and _deltas(vault, tenant, "f") > 0
    assert vault.db.fold_lexical(tenant, wait=True) > 0  # every scope of the tenant
    assert _deltas(vault, tenant, "f") == 0 and _deltas(vault, tenant, "g") == 0
    assert _consistent(vault, tenant, "f") == before
    with vault.db.transaction(tenant) as conn:  # the base rows alone hold it now
        base = conn.execute("SELECT doc_count FROM lexical_scope_stats WHERE tenant_id = %s "
                            "AND scope = 'f'", (tenant,)).fetchone()
        tf = conn.execute("SELECT max_tf FROM lexical_df WHERE tenant_id = %s AND scope = 'f' "
                          "AND lexeme = %s", (tenant, lexical.lx(vault, conn, "kayak"))
                          ).fetchone()
    assert base is not None and base["doc_count"] == 23
    assert tf is not None and tf["max_tf"] == 4
    # everything forgotten: the fold removes the base rows that reach 0
    vault.forget([r.id for r in receipts[7:]], principal=who)
    vault.db.fold_lexical(tenant, ["f"], wait=True)
    with vault.db.transaction(tenant) as conn:
        left = conn.execute("SELECT (SELECT count(*) FROM lexical_scope_stats WHERE "
                            "tenant_id = %(t)s AND scope = 'f') + (SELECT count(*) FROM "
                            "lexical_df WHERE tenant_id = %(t)s AND scope = 'f') AS n",
                            {"t": tenant}).fetchone()
    assert left is not None and left["n"] == 0
    assert _consistent(vault, tenant, "f")["doc_count"] == 0


def test_a_fold_skips_the_deltas_of_open_writes(vault: MemoryVault, tenant: str) -> None:
    vault.remember("puppy vaccine appointment", scope="o", principal=vault.principal(tenant))
    in_tx = threading.Event()
    release = threading.Event()

    def writer() -> None:
        with vault.db.transaction(tenant) as conn:
            memory_store.insert(conn, [_row(vault, conn, tenant, "o", "puppy dentist")])
            in_tx.set()
            assert release.wait(60)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert in_tx.wait(60)
        assert vault.db.fold_lexical(tenant, ["o"], wait=True) > 0  # not waiting on it
    finally:
        release.set()
        t.join(60)
    assert _deltas(vault, tenant, "o") > 0  # the write committed after the fold: its deltas
    assert _consistent(vault, tenant, "o")["doc_count"] == 2


def test_a_fold_killed_half_way_loses_nothing(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"sourdough bread {i}", "scope": "k"} for i in range(12)],
                        principal=who)
    before = _consistent(vault, tenant, "k")
    deltas = _deltas(vault, tenant, "k")
    with pytest.raises(Unavailable), vault.db.transaction(tenant) as conn:
        # the deltas are deleted and the base rows written, then the backend dies
        # before the commit (as with a crash of the server or of the folding process)
        folded = lexstats.fold(conn, tenant, "k")
        assert folded == deltas
        pid = conn.info.backend_pid
        with owner_connection(vault.db.url, autocommit=True) as owner:
            owner.execute("SELECT pg_terminate_backend(%s::int)", (pid,))
        conn.execute("SELECT 1")
    assert _deltas(vault, tenant, "k") == deltas  # rolled back whole
    assert _consistent(vault, tenant, "k") == before
    assert vault.db.fold_lexical(tenant, ["k"], wait=True) == deltas
    assert _consistent(vault, tenant, "k") == before


def test_writes_fold_the_deltas_every_so_often(vault: MemoryVault, tenant: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexstats, "FOLD_EVERY", 3)
    who = vault.principal(tenant)
    for i in range(3):
        vault.remember(f"marathon training week {i}", scope="e", principal=who)
    assert _deltas(vault, tenant, "e") == 0  # the third audited commit folded them
    vault.remember("marathon report", scope="e", principal=who)
    assert _deltas(vault, tenant, "e") > 0
    assert _consistent(vault, tenant, "e")["doc_count"] == 4


def test_a_recall_does_not_wait_for_a_writer_and_its_access_is_counted_later(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    [r] = vault.remember_many([{"content": "chess tournament in lisbon", "scope": "a"}],
                              principal=who)
    locked = threading.Event()
    release = threading.Event()

    def writer() -> None:  # holds the row as a forget or supersede of it would
        with vault.db.transaction(tenant) as conn:
            conn.execute("SELECT 1 FROM memories WHERE tenant_id = %s AND id = %s "
                         "FOR UPDATE", (tenant, r.id))
            locked.set()
            assert release.wait(60)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert locked.wait(60)
        hits = vault.recall("chess tournament", scope="a", principal=who)  # returns
        assert [h.memory.id for h in hits] == [r.id]
    finally:
        release.set()
        t.join(60)
    with vault.db.transaction(tenant) as conn:
        pending = conn.execute("SELECT count(*) AS n FROM memory_accesses WHERE "
                               "tenant_id = %s AND memory_id = %s", (tenant, r.id)).fetchone()
    assert pending is not None and pending["n"] == 1
    assert vault.get(r.id, principal=who).access_count == 0
    assert vault.db.fold_accesses(tenant) == 1
    assert vault.get(r.id, principal=who).access_count == 1
    assert vault.db.fold_accesses(tenant) == 0  # counted once


def test_a_commit_of_many_statements_counts_each_towards_the_fold(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # one transaction of row-by-row inserts (no audit row, as a bulk loader's): each
    # statement appended its own deltas, which every recall would sum until a fold
    monkeypatch.setattr(lexstats, "FOLD_EVERY", 3)
    with vault.db.transaction(tenant) as conn:
        memory_store.insert(conn, [_row(vault, conn, tenant, "bulk", f"kayak trip {i}")
                                   for i in range(2)])
    assert _deltas(vault, tenant, "bulk") > 0  # two statements: not yet
    with vault.db.transaction(tenant) as conn:
        memory_store.insert(conn, [_row(vault, conn, tenant, "bulk", "kayak repair")])
    assert _deltas(vault, tenant, "bulk") == 0  # the third statement's commit folded
    assert _consistent(vault, tenant, "bulk")["doc_count"] == 3


def test_a_large_batch_folds_after_its_commit(vault: MemoryVault, tenant: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexstats, "FOLD_ROWS", 5)
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"pottery class {i}", "scope": "big"} for i in range(4)],
                        principal=who)
    assert _deltas(vault, tenant, "big") > 0  # one statement of 4 memories: not yet
    vault.remember_many([{"content": "pottery vase", "scope": "big"}], principal=who)
    assert _deltas(vault, tenant, "big") == 0  # 5 memories written: folded
    assert _consistent(vault, tenant, "big")["doc_count"] == 5


def test_a_rolled_back_write_counts_nothing(vault: MemoryVault, tenant: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexstats, "FOLD_EVERY", 2)
    with pytest.raises(RuntimeError), vault.db.transaction(tenant) as conn:
        memory_store.insert(conn, [_row(vault, conn, tenant, "rb", "garden fence")])
        raise RuntimeError("rolled back")
    with vault.db.transaction(tenant) as conn:
        memory_store.insert(conn, [_row(vault, conn, tenant, "rb", "garden gate")])
    assert _deltas(vault, tenant, "rb") > 0  # one write counted, not two
    assert _consistent(vault, tenant, "rb")["doc_count"] == 1
