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
            yield conn

    monkeypatch.setattr(vault.rt.db, "spare_transaction", spy)
    return asked


def _slow(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, seconds: float) -> None:
    real = getattr(target, name)

    def slow(*args: Any, **kw: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kw)

    monkeypatch.setattr(target, name, slow)


def test_each_way_gives_the_same_hits(vault: MemoryVault, who: Any, spares: list[bool],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)  # warm
    spares.clear()
    with monkeypatch.context() as m:  # the lexical side is slower: a spare connection
        _slow(m, service, "text_candidates", 0.3)
        on_spare = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert spares == [True]
    spares.clear()
    with monkeypatch.context() as m:  # the embedding is slower: the recall's connection
        _slow(m, vault.rt.embedder, "embed", 0.3)
        on_own = vault.recall(QUERY, scope="sides", k=5, principal=who, touch=False)
    assert spares == []
    with monkeypatch.context() as m:  # no spare free: the recall's connection after all
        _slow(m, service, "text_candidates", 0.3)

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
        while True:  # every connection the pool can make, checked out
            try:
                held.append(pool.getconn(timeout=0.5))
            except Exception:
                break
        assert len(held) == pool.max_size
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
    pool = vault.rt.db._pool
    assert pool is not None
    vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    before = pool.get_stats()["pool_size"] - pool.get_stats()["pool_available"]

    def down(texts: list[str]) -> Any:
        raise Unavailable("embedder: down")

    with monkeypatch.context() as m:
        m.setattr(vault.rt.embedder, "embed", down)
        with pytest.raises(Unavailable, match="embedder: down"):
            vault.recall(QUERY, scope="sides", k=3, principal=who, touch=False)
    stats = pool.get_stats()
    assert stats["pool_size"] - stats["pool_available"] == before
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
