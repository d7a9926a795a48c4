"""Approximate search quality: the HNSW index against exact search on 20,000 vectors."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import psycopg
import pytest
from psycopg.types.json import Jsonb

from mnemovault.ids import uuid7
from mnemovault.store import memories as memory_store
from mnemovault.store.search import vector_candidates
from mnemovault.vault import MemoryVault

N_BIG, N_SMALL, DIM, N_QUERIES, K = 19_600, 400, 384, 50, 10


def _clustered(rng: np.random.Generator, n: int, centres: np.ndarray) -> np.ndarray:
    """Points around random centres, like sentence embeddings (which cluster by topic)."""
    pick = rng.integers(0, len(centres), n)
    x = centres[pick] + rng.normal(scale=0.6, size=(n, DIM)).astype(np.float32) / np.sqrt(DIM)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus(vault: MemoryVault) -> tuple[str, dict[str, tuple[list, np.ndarray]]]:
    tenant = "hnsw-" + uuid7().hex[-8:]
    vault.ensure_tenant(tenant)
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(200, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    now = datetime.now(UTC)
    data: dict[str, tuple[list, np.ndarray]] = {}
    for scope, n in (("big", N_BIG), ("small", N_SMALL)):
        vecs = _clustered(rng, n, centres)
        ids = [uuid7() for _ in range(n)]
        rows = [(tenant, i, scope, None, "episode", f"v{j}", None, v, now, now, Jsonb({}),
                 None, 1, "", 0, None, None, None, None, now, None)  # no terms; not sealed
                for j, (i, v) in enumerate(zip(ids, vecs, strict=True))]
        for s in range(0, n, 2000):
            with vault.db.transaction(tenant) as conn:
                memory_store.insert(conn, rows[s : s + 2000])
        data[scope] = (ids, vecs)
    # statistics, as autovacuum would gather them (ANALYZE needs the table owner)
    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("ANALYZE memories")
    data["queries"] = ([], _clustered(rng, N_QUERIES, centres))
    return tenant, data


def _plan(vault: MemoryVault, tenant: str, scope: str, q: np.ndarray, *,
          force_hnsw: bool = False) -> str:
    with vault.db.transaction(tenant) as conn:
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        if force_hnsw:
            conn.execute("SET LOCAL enable_sort = off")
        return "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN SELECT id FROM memories WHERE tenant_id = %s AND scope = %s "
            "AND status = 'active' ORDER BY embedding <=> %s LIMIT 10",
            (tenant, scope, q)).fetchall())


def _recall_at_k(vault: MemoryVault, tenant: str, scope: str, ids: list, vecs: np.ndarray,
                 queries: np.ndarray, *, force_hnsw: bool = False) -> float:
    found = 0
    for q in queries:
        exact = {ids[j] for j in np.argsort(-(vecs @ q))[:K]}
        with vault.db.transaction(tenant) as conn:
            if force_hnsw:
                conn.execute("SET LOCAL enable_sort = off")
            rows = vector_candidates(
                conn, q, "tenant_id = %(tenant)s AND scope = %(scope)s AND status = 'active'",
                {"tenant": tenant, "scope": scope}, K, ef_search=vault.settings.hnsw_ef_search)
        assert len(rows) == K
        found += len(exact & {r["id"] for r in rows})
    return found / (K * len(queries))


def test_plan_uses_the_hnsw_index(vault: MemoryVault, corpus: tuple) -> None:
    tenant, data = corpus
    plan = _plan(vault, tenant, "big", data["queries"][1][0])
    assert "Index Scan using memories_embedding" in plan, plan


def test_hnsw_top10_recall_against_exact_search(vault: MemoryVault, corpus: tuple) -> None:
    tenant, data = corpus
    ids, vecs = data["big"]
    r = _recall_at_k(vault, tenant, "big", ids, vecs, data["queries"][1])
    assert r >= 0.95, f"HNSW recall@10 {r:.3f} < 0.95"


def test_filtered_search_still_returns_k_rows(vault: MemoryVault, corpus: tuple) -> None:
    """The small scope is 2% of the rows. Forced onto the HNSW index (the planner would
    rather sort so few rows exactly), an index scan without iterative scans would hand back
    about 2% of ef_search candidates, fewer than k; with them it returns k (asserted per
    query in _recall_at_k). Filtered graph search is less exact than unfiltered (measured
    here: 0.92 at ef_search 100, 0.95 at 400), which is why the planner's exact path for
    small scopes (next test) matters."""
    tenant, data = corpus
    ids, vecs = data["small"]
    plan = _plan(vault, tenant, "small", data["queries"][1][0], force_hnsw=True)
    assert "Index Scan using memories_embedding" in plan, plan
    r = _recall_at_k(vault, tenant, "small", ids, vecs, data["queries"][1], force_hnsw=True)
    assert r >= 0.85, f"filtered recall@10 {r:.3f} < 0.85"


def test_small_scope_is_planned_as_exact_search(vault: MemoryVault, corpus: tuple) -> None:
    tenant, data = corpus
    plan = _plan(vault, tenant, "small", data["queries"][1][0])
    assert "memories_embedding" not in plan, plan
