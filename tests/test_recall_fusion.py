"""The gated fusion, the optional re-ranker and the candidate cap: unit tests on the fusion
itself, then recall against the real PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from mnemovault.recall import rerankers
from mnemovault.recall.ranking import FusionWeights, fuse, rerank, text_share
from mnemovault.recall.service import HNSW_MAX_CANDIDATES, candidate_count
from mnemovault.vault import MemoryVault

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IDS = [uuid.UUID(int=i + 1) for i in range(6)]
META = {i: (NOW - timedelta(days=400), False) for i in IDS}
VEC = [(IDS[0], 0.62), (IDS[1], 0.55), (IDS[2], 0.40)]     # semantic order 0, 1, 2
TXT = [(IDS[3], 9.0), (IDS[2], 6.0), (IDS[4], 2.0)]        # lexical order 3, 2, 4
W = FusionWeights(recency=0.0)


def _order(w: FusionWeights, text_max: float | None) -> list[uuid.UUID]:
    return [f.id for f in fuse(VEC, TXT, META, NOW, w, text_max=text_max)]


def test_gate_closed_is_the_vector_ranking() -> None:
    # the best text match reaches 9 of an attainable 900: 1% of the query's IDF mass
    order = _order(W, text_max=900.0)
    assert order[:3] == [IDS[0], IDS[1], IDS[2]]
    assert text_share(9.0, 900.0, W) == 0.0


def test_gate_open_is_the_convex_combination() -> None:
    gated = fuse(VEC, TXT, META, NOW, W, text_max=20.0)  # q = 0.45 >= gate_high
    convex = fuse(VEC, TXT, META, NOW, dataclasses.replace(W, method="convex"))
    assert [(f.id, round(f.score, 12)) for f in gated] == \
        [(f.id, round(f.score, 12)) for f in convex]
    assert gated[0].id == IDS[3]  # the strong lexical match leads


def test_gate_interpolates_and_keeps_the_total_weight() -> None:
    w = dataclasses.replace(W, gate_low=0.1, gate_high=0.3)
    assert text_share(9.0, 45.0, w) == pytest.approx(0.5)  # q = 0.2: half way
    fused = {f.id: f.score for f in fuse(VEC, TXT, META, NOW, w, text_max=45.0)}
    wt = w.text * 0.5
    wv = w.vector + w.text - wt
    assert fused[IDS[3]] == pytest.approx(wt * 1.0)        # text only, best text match
    assert fused[IDS[0]] == pytest.approx(wv * 1.0)        # vector only, best vector
    assert fused[IDS[2]] == pytest.approx(wv * 0.0 + wt * 6.0 / 9.0)


def test_one_sided_variants_ignore_the_gate() -> None:
    vec_only = dataclasses.replace(W, text=0.0)
    text_only = dataclasses.replace(W, vector=0.0)
    assert _order(vec_only, 900.0)[:3] == [IDS[0], IDS[1], IDS[2]]
    assert _order(text_only, 900.0)[:3] == [IDS[3], IDS[2], IDS[4]]


def test_without_a_maximum_the_gate_is_open() -> None:
    assert text_share(9.0, None, W) == 1.0
    assert _order(W, None) == _order(W, 20.0)


class Reverse:
    """A re-ranker that prefers what the fusion put last."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        self.seen = list(texts)
        return [float(i) for i in range(len(texts))]


def test_rerank_reorders_the_head_only() -> None:
    fused = fuse(VEC, TXT, META, NOW, W, text_max=20.0)
    before = [f.id for f in fused]
    texts = {f.id: f"text {f.id}" for f in fused}
    r = Reverse()
    after = [f.id for f in rerank(fused, texts, "q", r, depth=3)]
    assert after[:3] == before[:3][::-1]
    assert after[3:] == before[3:]
    assert r.seen == [texts[i] for i in before[:3]]


def test_candidate_count_is_capped_by_the_index() -> None:
    assert candidate_count(100, 10) == 100
    assert candidate_count(5, 20) == 20
    assert candidate_count(50_000, 10) == HNSW_MAX_CANDIDATES == 1000


def test_recall_with_more_candidates_than_hnsw_can_return(vault: MemoryVault,
                                                           tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": f"note {i} about the garden", "scope": "cap"}
                         for i in range(12)], principal=who)
    before = vault.settings
    vault.settings = before.model_copy(update={"recall_candidates": 50_000})
    try:
        hits = vault.recall("garden", scope="cap", k=5, principal=who)
    finally:
        vault.settings = before
    assert len(hits) == 5


def test_installed_reranker_orders_recall(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember_many([{"content": c, "scope": "rr"} for c in
                         ("the red kite flew high", "a red bicycle", "red wine at dinner")],
                        principal=who)

    class ByLength:
        def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
            return [-float(len(t)) for t in texts]  # shortest first

    rerankers.install(ByLength())
    try:
        hits = vault.recall("red", scope="rr", k=3, principal=who)
    finally:
        rerankers.install(None)
    assert [h.memory.content for h in hits] == ["a red bicycle", "red wine at dinner",
                                                 "the red kite flew high"]


def test_missing_reranker_directory_is_a_config_error(tmp_path: object) -> None:
    from mnemovault.errors import ConfigError

    with pytest.raises(ConfigError, match="recall_reranker"):
        rerankers.CrossEncoderReranker(f"{tmp_path}/nowhere")


def test_the_gate_thresholds_are_settings(vault: MemoryVault) -> None:
    s = vault.settings.model_copy(update={"recall_gate_low": 0.1, "recall_gate_high": 0.3})
    mv = MemoryVault(vault.db, vault.embedder, s, vault.keyring)
    assert (mv.weights.gate_low, mv.weights.gate_high) == (0.1, 0.3)
    assert (vault.weights.gate_low, vault.weights.gate_high) == (0.05, 0.2)  # defaults
