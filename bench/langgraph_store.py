"""Benchmark: the LangGraph store's ``search`` against calling ``recall`` directly.

:class:`mnemovault.integrations.langgraph.MnemovaultStore` answers ``search(prefix,
query=..., limit=L)`` with one :meth:`MemoryVault.recall` of ``k = max(10, 3 L)`` in the
prefix's scope (and subject), then parses each hit's value and applies the prefix and the
filter. This bench puts ``--items`` items through the store, then times, interleaved
round by round, ``store.search(("bench", "ada"), query=q, limit=5)`` against
``vault.recall(q, scope="bench", k=15, filters={"subject": "ada"})`` (the call the store
makes) and against ``k=5`` (what a caller would ask recall for), over the same queries.
Reported: the p50 of each, and ``search_over_recall`` (p50 ratio against ``k=15``: the
adapter's own overhead; the target is under 1.05). The embedder is the real local model
when installed (recall's cost as deployed), else the random-vector stand-in.

Usage::

    python bench/langgraph_store.py --quick        # CI: 60 items, 40 rounds
    python bench/langgraph_store.py --out bench/results/langgraph_store.json

JSON on stdout; progress on stderr. Without the langgraph extra: ``{"skipped": true}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, progress, quiet_logging, stop_embedded

from mnemovault import MemoryVault, Settings

QUERIES = ["what does Ada drink?", "where does Ada live?", "Ada's pets", "Ada's work",
           "what did Ada say about the garden?"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--items", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--random-embedder", action="store_true")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    quiet_logging()
    try:
        from mnemovault.integrations.langgraph import MnemovaultStore
    except ImportError as exc:
        print(json.dumps({"benchmark": "langgraph_store", "skipped": True,
                          "reason": str(exc)}))
        return
    items = a.items or (60 if a.quick else 1000)
    rounds = a.rounds or (40 if a.quick else 200)
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-lg-"))
    data_dir.chmod(0o755)
    kw: dict[str, Any] = {"embedder": RandomEmbedder()} if a.random_embedder else {}
    mv = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False), **kw)
    progress(f"embedded PostgreSQL in {data_dir}; embedder {mv.embedder.model}")
    store = MnemovaultStore(mv)
    ns = ("bench", "ada")
    try:
        topics = ["tea", "the garden", "her cat", "the office", "Lisbon", "cycling"]
        for i in range(items):
            store.put(ns, f"k{i}", {"text": f"Ada note {i}: something about "
                                            f"{topics[i % len(topics)]} (#{i})"})
        timings: dict[str, list[float]] = {"search": [], "recall_k15": [], "recall_k5": []}
        calls = {
            "search": lambda q: store.search(ns, query=q, limit=5),
            "recall_k15": lambda q: mv.recall(q, scope="bench", k=15,
                                              filters={"subject": "ada"}),
            "recall_k5": lambda q: mv.recall(q, scope="bench", k=5,
                                             filters={"subject": "ada"}),
        }
        for q in QUERIES:  # warm up every path
            for fn in calls.values():
                fn(q)
        for r in range(rounds):
            q = QUERIES[r % len(QUERIES)]
            names = list(calls) if r % 2 == 0 else list(reversed(calls))
            for name in names:
                t = time.perf_counter()
                calls[name](q)
                timings[name].append(time.perf_counter() - t)
    finally:
        mv.close()
        stop_embedded(data_dir)
    p50 = {n: statistics.median(v) for n, v in timings.items()}
    report = {"benchmark": "langgraph_store", "quick": a.quick, "items": items,
              "rounds": rounds, "embedder": "random" if a.random_embedder else "local",
              **{f"{n}_p50_ms": round(1000 * v, 3) for n, v in p50.items()},
              "search_over_recall": round(p50["search"] / p50["recall_k15"], 3),
              "search_over_recall_k5": round(p50["search"] / p50["recall_k5"], 3),
              "environment": environment()}
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
