"""Benchmark: ``AsyncMemoryVault`` against ``MemoryVault`` called from threads, at 1, 8 and
32 concurrent callers, for ``recall`` and ``remember``.

* ``sync``: ``c`` threads (a :class:`~concurrent.futures.ThreadPoolExecutor`), each calling
  the synchronous :class:`MemoryVault` in a loop: what a threaded server does today.
* ``async``: ``c`` tasks on one asyncio event loop (anyio), each awaiting
  :class:`AsyncMemoryVault` in a loop: the facade runs the synchronous core in worker
  threads under its limiter (default: the pool's size, 8).

Every cell runs the same number of operations (``--ops``), the two modes interleaved round
by round (``--rounds``), in a fresh embedded PostgreSQL whose tenant holds ``--rows``
memories first. The embedder is the deterministic random-vector stand-in
(``bench/_common.RandomEmbedder``): the bench measures the facade and the store, not the
model. Per cell: throughput (operations / wall second; median over rounds) and the p50 and
p95 of one call's latency (over every call of every round); ``async_over_sync`` is the
ratio of throughputs (1.0 = the same).

Usage::

    python bench/async_vault.py --quick            # CI: 24 ops a cell, 1 round
    python bench/async_vault.py --out bench/results/async_vault.json

JSON on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, progress, quiet_logging, stop_embedded

from mnemovault import AsyncMemoryVault, MemoryVault, Settings

SCOPE = "bench"
CONCURRENCY = (1, 8, 32)


def _op(kind: str, i: int) -> tuple[str, dict[str, Any]]:
    if kind == "recall":
        return f"what did person {i % 50} say about topic {i % 7}?", {"scope": SCOPE, "k": 10}
    return (f"Person {i % 50} said something new about topic {i % 7} (run {i}).",
            {"scope": SCOPE, "subject": f"p{i % 50}"})


def run_sync(mv: MemoryVault, kind: str, c: int, ops: int, base: int) -> tuple[float, list[float]]:
    fn: Callable[..., Any] = mv.recall if kind == "recall" else mv.remember
    per = ops // c

    def worker(w: int) -> list[float]:
        lat = []
        for j in range(per):
            text, kw = _op(kind, base + w * per + j)
            t = time.perf_counter()
            fn(text, **kw)
            lat.append(time.perf_counter() - t)
        return lat

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=c) as ex:
        lats = [x for r in ex.map(worker, range(c)) for x in r]
    return time.perf_counter() - t0, lats


def run_async(amv: AsyncMemoryVault, kind: str, c: int, ops: int,
              base: int) -> tuple[float, list[float]]:
    per = ops // c
    lats: list[float] = []

    async def worker(w: int) -> None:
        fn = amv.recall if kind == "recall" else amv.remember
        for j in range(per):
            text, kw = _op(kind, base + w * per + j)
            t = time.perf_counter()
            await fn(text, **kw)  # type: ignore[operator]
            lats.append(time.perf_counter() - t)

    async def main() -> float:
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for w in range(c):
                tg.start_soon(worker, w)
        return time.perf_counter() - t0

    return anyio.run(main), lats


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (CI)")
    p.add_argument("--ops", type=int, default=None, help="operations per cell")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--rows", type=int, default=None, help="memories in the tenant first")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    quiet_logging()
    ops = a.ops or (32 if a.quick else 192)
    rounds = a.rounds or (1 if a.quick else 3)
    rows = a.rows or (200 if a.quick else 2000)
    ops = max(32, ops - ops % 32)  # every concurrency divides it
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-async-"))
    data_dir.chmod(0o755)
    progress(f"embedded PostgreSQL in {data_dir}")
    mv = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False),
                          embedder=RandomEmbedder())
    amv = AsyncMemoryVault(mv)
    results = []
    try:
        for start in range(0, rows, 100):
            mv.remember_many([{"content": _op("remember", i)[0], "scope": SCOPE,
                               "subject": f"p{i % 50}"}
                              for i in range(start, min(rows, start + 100))])
        base = 10 * rows
        for kind in ("recall", "remember"):
            for c in CONCURRENCY:
                cell: dict[str, Any] = {"sync": {"wall": [], "lat": []},
                                        "async": {"wall": [], "lat": []}}
                for r in range(rounds):
                    order = ("sync", "async") if r % 2 == 0 else ("async", "sync")
                    for mode in order:
                        base += ops
                        wall, lat = (run_sync(mv, kind, c, ops, base) if mode == "sync"
                                     else run_async(amv, kind, c, ops, base))
                        cell[mode]["wall"].append(wall)
                        cell[mode]["lat"].extend(lat)
                row: dict[str, Any] = {"op": kind, "concurrency": c, "ops": ops,
                                       "rounds": rounds}
                for mode in ("sync", "async"):
                    wall = statistics.median(cell[mode]["wall"])
                    row[mode] = {"ops_per_s": round(ops / wall, 1),
                                 "p50_ms": round(1000 * pct(cell[mode]["lat"], 0.5), 3),
                                 "p95_ms": round(1000 * pct(cell[mode]["lat"], 0.95), 3)}
                row["async_over_sync"] = round(row["async"]["ops_per_s"]
                                               / row["sync"]["ops_per_s"], 3)
                progress(json.dumps(row))
                results.append(row)
    finally:
        mv.close()
        stop_embedded(data_dir)
    report = {"bench": "async_vault", "quick": a.quick, "rows": rows,
              "limiter": amv.limiter.total_tokens, "environment": environment(),
              "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
