#!/usr/bin/env python
"""Where one ``recall`` spends its time (issue 27, item 5): a profiling aid, not a benchmark
(CI does not run it).

On ``--size`` memories of ``bench/throughput.py``'s synthetic stream (its embedding cache,
``~/.cache/mnemovault-bench``; one database kept in ``--dir`` between runs), three parts:

- ``timeline``: per stage of ``recall(k=10, touch=False)`` (the pseudonymiser's first
  lookup, BM25 SQL, the query embedding, the HNSW SQL, fusion, the final row read), the
  median start and end in ms from the call's start, over ``--queries`` queries;
- ``vector_candidates``: recall p50/p95 with the dense side's candidate count at the
  configured value, 50 and 30 (the lexical side unchanged), in a shuffled order per query,
  next to the query embedding alone before each query: latency only, not quality;
- ``hnsw_after_gap``: the same HNSW query (100 rows, ef_search 100) straight after another
  one, after a 10 ms sleep, and after a query embedding: what a microbenchmark of the SQL
  alone leaves out.

Usage::

    python bench/_recall_stages.py --size 10000 --queries 150 --dir /tmp/v10k
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp
from _common import environment, quiet_logging


def ms(xs: list[float], p: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, p)), 2)


def open_loaded(data_dir: Path, size: int) -> Any:
    fresh = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    vault = tp.open_vault(data_dir)
    if fresh:
        texts = tp.synthetic_texts(size, 1)
        vecs, _ = tp.cached_embeddings(vault.embedder, texts,
                                       Path.home() / ".cache/mnemovault-bench", 1)
        tp.load_rows(vault, texts, vecs[:size], 2000)
    return vault


def timeline(vault: Any, queries: list[str]) -> dict[str, Any]:
    from mnemovault.pii import translate
    from mnemovault.recall import service

    t0 = [0.0]
    events: dict[str, list[tuple[float, float]]] = defaultdict(list)
    undo: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        f = getattr(owner, name)

        @functools.wraps(f)
        def timed(*a: Any, **kw: Any) -> Any:
            s = time.perf_counter() - t0[0]
            try:
                return f(*a, **kw)
            finally:
                events[label].append((s, time.perf_counter() - t0[0]))

        undo.append((owner, name, f))
        setattr(owner, name, timed)

    calls = [0]
    orig_call = translate.Translator.__call__

    def first_lookup(self: Any, value: Any) -> Any:
        s = time.perf_counter() - t0[0]
        try:
            return orig_call(self, value)
        finally:
            if calls[0] == 0:
                events["pseudonymise_query"].append((s, time.perf_counter() - t0[0]))
            calls[0] += 1

    for name, label in (("text_candidates", "bm25_sql"), ("vector_candidates", "hnsw_sql"),
                        ("fuse", "fuse")):
        wrap(service, name, label)
    wrap(service.memory_store, "by_ids", "row_read")
    wrap(vault.rt.embedder, "embed", "query_embed")
    undo.append((translate.Translator, "__call__", orig_call))
    translate.Translator.__call__ = first_lookup  # type: ignore[method-assign]
    total = []
    try:
        for q in queries:
            calls[0] = 0
            t0[0] = time.perf_counter()
            vault.recall(q, scope=tp.BENCH_SCOPE, k=10, touch=False)
            total.append(time.perf_counter() - t0[0])
    finally:
        for owner, name, f in reversed(undo):
            if owner is vault.rt.embedder:
                delattr(owner, name)
            else:
                setattr(owner, name, f)
    stages = {}
    for label, xs in sorted(events.items(), key=lambda kv: np.median([x[0] for x in kv[1]])):
        a = np.asarray(xs) * 1000
        stages[label] = {"start_ms": round(float(np.median(a[:, 0])), 2),
                         "end_ms": round(float(np.median(a[:, 1])), 2),
                         "duration_ms": round(float(np.median(a[:, 1] - a[:, 0])), 2)}
    return {"stages_median": stages, "recall_p50_ms": ms(total, 50),
            "recall_p95_ms": ms(total, 95)}


def vector_candidates(vault: Any, queries: list[str]) -> dict[str, Any]:
    from mnemovault.recall import service

    orig = service.vector_candidates
    count: list[int | None] = [None]

    def fewer(conn: Any, qvec: Any, where: str, params: dict[str, Any], n: int, *,
              ef_search: int = 100) -> list[dict[str, Any]]:
        m = count[0] or n
        return orig(conn, qvec, where, params, m, ef_search=m if count[0] else ef_search)

    service.vector_candidates = fewer  # type: ignore[assignment]
    out: dict[str, list[float]] = defaultdict(list)
    try:
        for q in queries:
            t = time.perf_counter()
            vault.embedder.embed([q])
            out["query_embed"].append(time.perf_counter() - t)
            for c in random.sample([None, 50, 30], 3):
                count[0] = c
                t = time.perf_counter()
                vault.recall(q, scope=tp.BENCH_SCOPE, k=10, touch=False)
                out[f"recall_{c or 'configured'}"].append(time.perf_counter() - t)
    finally:
        service.vector_candidates = orig  # type: ignore[assignment]
    return {k: {"p50_ms": ms(v, 50), "p95_ms": ms(v, 95)} for k, v in out.items()}


def hnsw_after_gap(vault: Any, queries: list[str]) -> dict[str, Any]:
    from mnemovault.store.search import filter_sql
    from mnemovault.store.search import vector_candidates as hnsw

    tenant = vault.settings.tenant
    where, params = filter_sql(tenant, tp.BENCH_SCOPE)
    qvecs = vault.embedder.embed(queries)
    out: dict[str, list[float]] = defaultdict(list)
    with vault.db.transaction(tenant) as conn:
        for q, qv in zip(queries, qvecs, strict=True):
            for mode in random.sample(["after_query", "after_sleep_10ms", "after_embed"], 3):
                if mode == "after_query":
                    hnsw(conn, qv, where, params, 100)
                elif mode == "after_sleep_10ms":
                    time.sleep(0.010)
                else:
                    vault.embedder.embed([q])
                t = time.perf_counter()
                hnsw(conn, qv, where, params, 100)
                out[mode].append(time.perf_counter() - t)
    return {k: {"p50_ms": ms(v, 50), "p95_ms": ms(v, 95)} for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=10000)
    p.add_argument("--queries", type=int, default=150)
    p.add_argument("--dir", type=Path, default=Path("/tmp/mv-recall-stages"),
                   help="the database (kept: delete it to reload)")
    args = p.parse_args(argv)
    quiet_logging()
    vault = open_loaded(args.dir, args.size)
    try:
        queries = tp.synthetic_queries(args.queries + 10, 11)
        for q in queries[:10]:  # untimed
            vault.recall(q, scope=tp.BENCH_SCOPE, k=10, touch=False)
        result = {"benchmark": "recall_stages", "environment": environment(),
                  "memories": args.size, "queries": args.queries,
                  "timeline": timeline(vault, queries[10:]),
                  "vector_candidates": vector_candidates(vault, queries[10:]),
                  "hnsw_after_gap": hnsw_after_gap(vault, queries[10:])}
    finally:
        vault.close()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
