"""CoalescingEmbedder (issue 29): concurrent callers share model calls, each gets its own
rows, an error stays its caller's, a lone caller runs at once."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mnemovault.config import Settings
from mnemovault.embed import make_embedder
from mnemovault.embed.coalesce import CoalescingEmbedder


class Slow:
    """Each text's vector is (len(text), 1, 0, ...), one call at a time takes 50 ms;
    records every call's texts; a text "boom" fails its whole call."""

    model = "slow"
    dimension = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.active = 0
        self.most = 0
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            time.sleep(0.05)
            if "boom" in texts:
                raise RuntimeError("boom")
            out = np.zeros((len(texts), 4), dtype=np.float32)
            out[:, 0] = [len(t) for t in texts]
            out[:, 1] = 1
            return out
        finally:
            with self._lock:
                self.active -= 1


def _together(fn, args: list) -> list:
    """``fn(arg)`` for each arg on its own thread, started at once; results in order
    (an exception is returned in its place)."""
    out: list = [None] * len(args)
    gate = threading.Barrier(len(args))

    def run(i: int) -> None:
        gate.wait()
        try:
            out[i] = fn(args[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_a_lone_caller_runs_at_once_with_its_own_texts() -> None:
    inner = Slow()
    emb = CoalescingEmbedder(inner)
    v = emb.embed(["ab", "abcd"])
    assert v[:, 0].tolist() == [2, 4]
    assert inner.calls == [["ab", "abcd"]]
    assert emb.model == "slow" and emb.dimension == 4


def test_concurrent_callers_share_calls_and_each_gets_its_own_rows() -> None:
    inner = Slow()
    emb = CoalescingEmbedder(inner)
    texts = [["x" * (i + 1)] * (1 + i % 3) for i in range(12)]
    got = _together(emb.embed, texts)
    for t, v in zip(texts, got, strict=True):
        assert not isinstance(v, Exception)
        assert v.shape == (len(t), 4)
        assert v[:, 0].tolist() == [len(s) for s in t]
    assert inner.most == 1  # one model call at a time
    assert len(inner.calls) < len(texts)  # and fewer calls than callers
    assert sorted(s for c in inner.calls for s in c) == sorted(s for t in texts for s in t)
    assert emb.shared >= 1


def test_concurrency_two_runs_two_calls_at_once() -> None:
    inner = Slow()
    emb = CoalescingEmbedder(inner, concurrency=2)
    got = _together(emb.embed, [[f"t{i}"] for i in range(8)])
    assert all(v.shape == (1, 4) for v in got)
    assert inner.most <= 2


def test_max_batch_bounds_a_shared_call_and_large_calls_go_straight() -> None:
    inner = Slow()
    emb = CoalescingEmbedder(inner, max_batch=4)
    got = _together(emb.embed, [["a", "b"] for _ in range(6)])
    assert all(v.shape == (2, 4) for v in got)
    assert max(len(c) for c in inner.calls) <= 4
    inner.calls.clear()
    assert emb.embed(["a"] * 5).shape == (5, 4)
    assert inner.calls == [["a"] * 5]


def test_a_failing_text_fails_only_its_own_caller() -> None:
    inner = Slow()
    emb = CoalescingEmbedder(inner)
    args = [["fine"], ["boom"], ["also fine"], ["ok"]]
    got = _together(emb.embed, args)
    assert isinstance(got[1], RuntimeError)
    for i in (0, 2, 3):
        assert not isinstance(got[i], Exception), got[i]
        assert got[i][0, 0] == len(args[i][0])
    with pytest.raises(RuntimeError):
        emb.embed(["boom"])


def test_the_local_embedder_is_coalesced_and_configurable() -> None:
    lazy = make_embedder(Settings(embed_concurrency=2))
    shared = lazy._factory()
    assert isinstance(shared, CoalescingEmbedder)
    assert shared.concurrency == 2 and shared.model == lazy.model
    with pytest.raises(ValueError):
        Settings(embed_concurrency=0)
