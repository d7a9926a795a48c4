"""Benchmark: the forget lifecycle vs a bare DELETE of the same rows.

For each size N (default 1, 100 and 10,000; ``--quick``: 1, 10 and 100) it builds, in two
tenants of a fresh embedded PostgreSQL with the same shape:

* N episodes to forget, each naming two people (known entities from a pool of N/4 + 4)
  and an e-mail address of its own, so every episode has 3 graph nodes and 3 edges and
  one vault value only it uses;
* N/2 facts, each derived from two consecutive episodes (the lineage cascade);
* N/2 control episodes that stay, naming people of the same pool (so graph cleanup must
  keep shared nodes and edges, and vault cleanup must keep shared values).

Then it times, on the first tenant:

* ``preview``: :meth:`MemoryVault.forget_preview` of the N ids (the walk over versions and
  lineage, the rows, excerpts);
* ``forget``: :meth:`MemoryVault.forget` of the N ids: one transaction that walks and
  locks, deletes lineage, graph support, the memories, orphan nodes and edges, shreds the
  unused vault values and appends the ``FORGET`` audit row;

and on the second tenant ``bare``: one transaction of plain ``DELETE … WHERE … = ANY(ids)``
of exactly the memory rows the forget removed (episodes and facts, the ids computed
beforehand, untimed) with their lineage and graph-support rows, which is the least any
delete must do (no orphan cleanup, no shredding, no audit). Both tenants are built first
and the tables analysed, so both phases plan with current statistics. The embedder is a
deterministic random-vector stand-in (the bench measures forgetting, not embedding).

Sizes up to 1,000 are repeated ``--repeat`` times (median); larger ones run once.

Usage::

    python bench/forget.py              # 1, 100, 10000
    python bench/forget.py --quick      # 1, 10, 100 (CI)
    python bench/forget.py --sizes 1000 --repeat 5

JSON on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder

from mnemovault.config import Settings
from mnemovault.governance import forget as forget_mod
from mnemovault.vault import MemoryVault

BATCH = 500


def say(msg: str) -> None:
    print(f"[forget-bench] {msg}", file=sys.stderr, flush=True)


def build(vault: MemoryVault, tenant: str, n: int) -> list[uuid.UUID]:
    """The dataset described in the module docstring; returns the N episode ids."""
    who = vault.principal(tenant)
    tag = tenant.rsplit("-", 1)[-1]
    people = [f"Person{tag}x{i:05d} Surname{i:05d}" for i in range(n // 4 + 4)]
    pool = [{"content": "pool", "scope": "pool",  # register the pool as known entities
             "entities": [{"kind": "person", "value": p} for p in people[i:i + 100]]}
            for i in range(0, len(people), 100)]
    for i in range(0, len(pool), 20):
        vault.remember_many(pool[i:i + 20], principal=who)
    episodes: list[uuid.UUID] = []
    items = [{"content": f"{people[i % len(people)]} met {people[(i * 7 + 1) % len(people)]} "
                         f"at the cafe; write to mail{tag}.{i}@example.org",
              "scope": "s"} for i in range(n)]
    for i in range(0, n, BATCH):
        episodes += [r.id for r in vault.remember_many(items[i:i + BATCH], principal=who)]
    facts = [{"content": f"fact {j}: these two met", "scope": "s", "type": "fact",
              "derived_from": [str(episodes[2 * j]), str(episodes[2 * j + 1])]}
             for j in range(n // 2)]
    controls = [{"content": f"{people[(j * 3) % len(people)]} and "
                            f"{people[(j * 5 + 2) % len(people)]} still talk", "scope": "s"}
                for j in range(max(n // 2, 1))]
    for batch in (facts, controls):
        for i in range(0, len(batch), BATCH):
            vault.remember_many(batch[i:i + BATCH], principal=who)
    return episodes


def bare_delete(vault: MemoryVault, tenant: str, ids: list[uuid.UUID]) -> float:
    """Seconds for plain DELETEs of ``ids`` with their lineage and graph-support rows."""
    t = time.perf_counter()
    with vault.db.transaction(tenant) as conn:
        conn.execute("DELETE FROM memory_lineage WHERE memory_id = ANY(%s)", (ids,))
        conn.execute("DELETE FROM graph_edge_support WHERE memory_id = ANY(%s)", (ids,))
        conn.execute("DELETE FROM graph_node_support WHERE memory_id = ANY(%s)", (ids,))
        conn.execute("DELETE FROM memories WHERE id = ANY(%s)", (ids,))
    return time.perf_counter() - t


def run_size(vault: MemoryVault, n: int, rep: int) -> dict[str, Any]:
    tf, tb = f"bf{n}-{rep}-{uuid.uuid4().hex[:6]}", f"bb{n}-{rep}-{uuid.uuid4().hex[:6]}"
    t = time.perf_counter()
    ids_f = build(vault, tf, n)
    ids_b = build(vault, tb, n)
    setup = time.perf_counter() - t
    with psycopg.connect(vault.db.url, autocommit=True) as conn:  # current planner statistics
        conn.execute("ANALYZE memories, memory_lineage, graph_nodes, graph_node_support, "
                     "graph_edges, graph_edge_support, pii_values, pii_deks")
    who = vault.principal(tf)

    t = time.perf_counter()
    preview = vault.forget_preview(ids_f, principal=who)
    preview_s = time.perf_counter() - t

    t = time.perf_counter()
    res = vault.forget(ids_f, principal=who, trigger="bench")
    forget_s = time.perf_counter() - t
    assert len(res.deleted) == len(preview) == n + n // 2, (len(res.deleted), len(preview))

    with vault.db.transaction(tb) as conn:
        all_b = forget_mod.resolve(conn, ids_b).all
    assert len(all_b) == len(res.deleted)
    bare_s = bare_delete(vault, tb, all_b)
    return {"preview_s": preview_s, "forget_s": forget_s, "bare_delete_s": bare_s,
            "setup_s": setup, "memories_deleted": len(res.deleted),
            "derived": len(res.derived), "graph_nodes_removed": res.graph_nodes_removed,
            "graph_edges_removed": res.graph_edges_removed, "shredded": len(res.shredded)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 1, 10, 100")
    p.add_argument("--sizes", type=str, default=None, help="comma-separated sizes")
    p.add_argument("--repeat", type=int, default=3, help="runs per size up to 1,000")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    a = p.parse_args()
    sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes
             else [1, 10, 100] if a.quick else [1, 100, 10_000])
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-forget-"))
    data_dir.chmod(0o755)
    say(f"embedded PostgreSQL in {data_dir}")
    vault = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False),
                             embedder=RandomEmbedder())
    results = []
    try:
        for n in sizes:
            runs = []
            for rep in range(a.repeat if n <= 1000 else 1):
                say(f"N={n} run {rep + 1}: building, previewing, forgetting")
                runs.append(run_size(vault, n, rep))
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("preview_s", "forget_s", "bare_delete_s")}
            row = {"n": n, "runs": len(runs),
                   **{k: runs[0][k] for k in ("memories_deleted", "derived",
                                              "graph_nodes_removed", "graph_edges_removed",
                                              "shredded")},
                   **{k: round(v, 6) for k, v in med.items()},
                   "forget_over_bare": round(med["forget_s"] / med["bare_delete_s"], 2),
                   "forget_per_memory_ms": round(1000 * med["forget_s"]
                                                 / runs[0]["memories_deleted"], 4),
                   "setup_s": round(runs[0]["setup_s"], 2)}
            say(json.dumps(row))
            results.append(row)
    finally:
        vault.close()
    report = {"bench": "forget", "quick": a.quick, "python": platform.python_version(),
              "machine": platform.machine(), "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
