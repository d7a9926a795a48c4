"""Recall's two candidate lists are found side by side (``recall/service.py``,
``_dense_beside``): the query is embedded on a worker thread while the lexical side's SQL
runs, and the nearest rows are read on a spare pooled connection if the lexical side is
still running then, else on the recall's own connection. Each way gives the same hits; a
busy pool gives no spare and nothing waits for one; an embedder's error reaches the
caller and leaves no connection checked out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mnemovault.embed.local import TRACE_AFTER_CALLS
from mnemovault.errors import Unavailable
from mnemovault.recall import service
from mnemovault.vault import MemoryVault

TEXTS = [
    "Caroline went to the LGBTQ support group on Tuesday",
    "Melanie painted a sunrise over the lake last summer",
    "the support group meets every week in the library",
    "Caroline is thinking about adopting a child",
    "Melanie's kids love camping near the mountains",
    "a pottery class on Saturday mornings",
    "the library closes early on Sundays",
    "Caroline gave a talk at the school about identity",
    "Melanie ran a charity race for mental health",
    "the lake was frozen in January",
]
QUERY = "when did Caroline go to the support group"


def _ids(hits: list[Any]) -> list[Any]:
    return [h.memory.id for h in hits]


def _same(a: list[Any], b: list[Any]) -> bool:
    """The same hits in the same order with the same scores (within 1e-5: the local
    embedder runs traced from its eighth call, within 1e-5 of the eager model)."""
    return _ids(a) == _ids(b) and [h.score for h in a] == pytest.approx(
        [h.score for h in b], abs=1e-5)


@pytest.fixture
def who(vault: MemoryVault, tenant: str) -> Any:
    principal = vault.principal(tenant)
    vault.remember_many([{"content": t, "scope": "sides"} for t in TEXTS], principal=principal)
    for _ in range(TRACE_AFTER_CALLS + 1):  # the local embedder traces its model once, here
        vault.rt.embedder.embed([QUERY])
    return principal


@pytest.fixture
def spares(vault: MemoryVault, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each spare_transaction asked for: True when it gave a connection."""
    asked: list[bool] = []
    real = vault.rt.db.spare_transaction

    @contextmanager
    def spy(tenant: str) -> Iterator[Any]:
        with real(tenant) as conn:
            asked.append(conn is not None)
            ASKED.set()
            yield conn

    ASKED.clear()
    monkeypatch.setattr(vault.rt.db, "spare_transaction", spy)
    return asked


ASKED = threading.Event()  # set when the dense side asks for a spare connection


def _hold_lexical(monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
    """The lexical side runs until the dense side has asked for a spare (at most 10 s),
    then answers (or, with ``fail``, raises)."""
    real = service.text_candidates

    def held(*args: Any, **kw: Any) -> Any:
        ASKED.wait(10)
        time.sleep(0.05)  # the spare's query is under way
        if fail:
            raise RuntimeError("the lexical side failed")
        return real(*args, **kw)

    monkeypatch.setattr(service, "text_candidates", held)


def _slow(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, seconds: float) -> None:
    real = getattr(target, name)

    def slow(*args: Any, **kw: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kw)

    monkeypatch.setattr(target, name, slow)


def _in_use(vault: MemoryVault) -> int:
    pool = vault.rt.db._pool
    assert pool is not None
    stats = pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def test_each_way_gives_the_same_hits(vault: MemoryVault, who: Any, spares: list[bool],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)  # warm
    spares.clear()
    with monkeypatch.context() as m:  # the lexical side is slower: a spare connection
        _hold_lexical(m)
        on_spare = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert spares == [True]
    spares.clear()
    with monkeypatch.context() as m:  # the embedding is slower: the recall's connection
        _slow(m, vault.rt.embedder, "embed", 0.3)
        on_own = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert spares == []
    with monkeypatch.context() as m:  # no spare free: the recall's connection after all
        _slow(m, service, "text_candidates", 0.2)

        @contextmanager
        def none(tenant: str) -> Iterator[None]:
            yield None

        m.setattr(vault.rt.db, "spare_transaction", none)
        no_spare = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert len(on_spare) == 5
    assert _same(on_spare, on_own) and _same(on_spare, no_spare)
    assert "support group" in on_spare[0].memory.content


def test_a_busy_pool_gives_no_spare_and_nothing_waits(vault: MemoryVault, who: Any) -> None:
    db = vault.rt.db
    held: list[Any] = []
    pool = db._pool
    assert pool is not None
    try:
        for _ in range(pool.max_size):  # every connection the pool can make, checked out
            held.append(pool.getconn(timeout=20))
        assert pool.get_stats()["pool_available"] == 0
        started = time.monotonic()
        with db.spare_transaction(who.tenant) as conn:
            assert conn is None
        assert time.monotonic() - started < 0.5
    finally:
        for c in held:
            pool.putconn(c)
    hits = vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    assert len(hits) == 3


def test_an_embedder_error_reaches_the_caller_and_leaks_no_connection(
        vault: MemoryVault, who: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    before = _in_use(vault)

    def down(texts: list[str]) -> Any:
        raise Unavailable("embedder: down")

    with monkeypatch.context() as m:
        m.setattr(vault.rt.embedder, "embed", down)
        with pytest.raises(Unavailable, match="embedder: down"):
            vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    assert _in_use(vault) == before
    assert len(vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)) == 3


def test_concurrent_recalls_on_a_small_pool_all_answer(vault: MemoryVault, who: Any) -> None:
    """More recalls at once than the pool has connections: the spares they do not get
    cost them nothing, and every recall answers the same."""
    expect = vault.recall(QUERY, scope="sides", k=4, principal=who, touch=False)
    errors: list[BaseException] = []
    got: list[list[Any]] = []

    def reader() -> None:
        try:
            for _ in range(4):
                got.append(vault.recall(QUERY, scope="sides", k=4, principal=who,
                                        touch=False))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 48 and all(_same(g, expect) for g in got)


def test_a_failing_lexical_side_leaves_no_spare_reading(
        vault: MemoryVault, who: Any, spares: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    before = _in_use(vault)
    spares.clear()
    with monkeypatch.context() as m:
        _hold_lexical(m, fail=True)
        _slow(m, service, "vector_candidates", 0.5)  # still reading when the recall fails
        with pytest.raises(RuntimeError, match="lexical side failed"):
            vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    assert spares == [True]  # the dense side was reading on a spare when the recall failed
    assert _in_use(vault) == before  # and it was back in the pool before recall returned


def test_a_failing_spare_query_falls_back_to_the_recalls_connection(
        vault: MemoryVault, who: Any, spares: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    expect = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    spares.clear()
    real = service.vector_candidates
    calls: list[int] = []

    def once_broken(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the spare's query
            raise Unavailable("database: the spare's query failed")
        return real(*args, **kw)

    with monkeypatch.context() as m:
        _hold_lexical(m)
        m.setattr(service, "vector_candidates", once_broken)
        got = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert spares == [True] and len(calls) == 2
    assert _same(got, expect)


def test_with_every_worker_busy_the_recall_embeds_itself(
        vault: MemoryVault, who: Any, spares: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    expect = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    spares.clear()
    threads: set[str] = set()
    real = vault.rt.embedder.embed

    def spy(texts: list[str]) -> Any:
        threads.add(threading.current_thread().name)
        return real(texts)

    monkeypatch.setattr(vault.rt.embedder, "embed", spy)
    monkeypatch.setattr(service, "_slots", threading.BoundedSemaphore(1))
    assert service._slots.acquire(blocking=False)  # the only worker slot, taken
    got = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert threads == {threading.current_thread().name} and spares == []
    assert _same(got, expect)
