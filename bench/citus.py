"""Benchmark: one tenant's recall on a Citus cluster next to a single PostgreSQL (the embedded
one), in the same run, with the plans.

For each backend it loads N memories into one fresh tenant (random unit vectors and short
texts, inserted as the owner: the bench measures recall, not the write path), then times
``MemoryVault.recall`` (median and p95 of ``--repeat`` queries) and keeps the ``EXPLAIN`` of
the vector query and of a write-path row lock (a routed query shows ``Task Count: 1``),
and the live documents the tenant's kept BM25 statistics count (``lexical_stats_docs``:
the triggers of migration 0009, on Citus installed on the shards; N when recall reads
them instead of recounting) and its postings hold (``lexical_postings_docs``: migration
0010's, installed the same way; N when the lexical top-n reads them). The lexical query
alone (``search.text_candidates``, top 50, ``--repeat`` queries of the corpus's words)
is timed too, with the path it took (``lexical_path``: ``postings``, or ``scan`` when
the postings are not kept), next to the same queries with a filter every memory passes
(``lexical_scan_*``: the scan over ``memories`` the postings replace, the baseline).
It then measures remember throughput with 8 tenants writing concurrently (``--writes``
remembers each, every one with a personal value, so the vault, graph and audit row are
written), and counts the two-phase commits Citus needed for them (``pg_dist_transaction``:
0 when every tenant's write stayed on its shard's node).

The cluster is ``MV_CITUS_URL`` (the coordinator, as the owner; ``.ci/run`` starts
``../shared/citus/cluster.sh`` and sets it). Without it, or when it is unreachable, the
bench prints why and exits 0.

Usage::

    MV_CITUS_URL=postgresql://postgres@127.0.0.1:9700/postgres python bench/citus.py
    python bench/citus.py --quick          # 500 memories, 10 queries (CI)

JSON on stdout (and ``bench/results/citus.json``); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress, quiet_logging

QUERIES = ["where does the user live", "what sport do they train for", "favourite food",
           "meeting preferences", "travel plans next month"]
LEXICAL = ["alice leeds marathon", "coffee morning train", "bob paris berlin window seat",
           "york seat", "marathon training in leeds on a morning train"]
WORDS = ["alice", "bob", "leeds", "york", "marathon", "coffee", "window", "seat", "morning",
         "train", "paris", "berlin"]


def _load(mv: Any, tenant: str, n: int, dim: int) -> None:
    """``n`` rows by COPY as the owner, with the keyed lexical terms the write path would
    give them (migration 0014: ``tsv`` is written by the application, never derived from
    the content); content left unsealed (``key_id`` NULL), as a database made before
    sealing holds it: every read path opens such rows as they are."""
    from pgvector.psycopg import register_vector

    from mnemovault.recall import terms

    rng = np.random.default_rng(7)
    mv.ensure_tenant(tenant)
    with mv.db.transaction(tenant) as conn:  # the tenant's term key (created on first use)
        key = terms.tenant_key(mv.rt.pii, conn, tenant)
    assert key is not None
    with psycopg.connect(mv.rt.db.url) as conn:
        register_vector(conn)
        with conn.cursor().copy(
                "COPY memories (tenant_id, id, scope, type, content, embedding, tsv, "
                "tsv_length) FROM STDIN") as cp:
            for i in range(n):
                v = rng.standard_normal(dim).astype(np.float32)
                v /= np.linalg.norm(v)
                text = " ".join(rng.choice(WORDS, 8)) + f" note {i}"
                tsv, length = terms.document(key, text)
                cp.write_row((tenant, uuid.uuid4(), "s", "episode", text,
                              "[" + ",".join(f"{x:.6f}" for x in v) + "]", tsv, length))
        # the planner's statistics of the tables the triggers filled too (autovacuum would
        # take a while: without them the postings queries get plans for empty tables)
        conn.execute("ANALYZE memories, lexical_postings, lexical_df, lexical_scope_stats")


def _plan(url: str, tenant: str, dim: int) -> str:
    vec = "[" + ",".join(["0.05"] * dim) + "]"
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "EXPLAIN (COSTS OFF) SELECT id FROM memories WHERE tenant_id = "
            f"'{tenant}' AND scope = 's' AND status = 'active' AND NOT archived "
            f"ORDER BY embedding <=> '{vec}' LIMIT 100").fetchall()
    return "\n".join(r[0] for r in rows)


def _lock_plan(url: str, tenant: str) -> str:
    """The forget walk's row lock (store.memories.lock) as the write path runs it."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "EXPLAIN (COSTS OFF) SELECT id FROM memories WHERE tenant_id = "
            f"'{tenant}' AND id = ANY('{{{uuid.uuid4()}}}'::uuid[]) ORDER BY id FOR UPDATE"
        ).fetchall()
    return "\n".join(r[0] for r in rows)


def _stats_docs(url: str, tenant: str) -> int:
    """The tenant's live documents in the kept BM25 statistics (migration 0009's triggers;
    on Citus installed on the shards by store/citus.py): n when recall reads them, 0 when
    it would recount per query."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT coalesce(sum(doc_count), 0) FROM lexical_scope_stats "
                           "WHERE tenant_id = %s", (tenant,)).fetchone()
    return int(row[0]) if row else 0


def _postings_docs(url: str, tenant: str) -> int:
    """The tenant's memories with postings (migration 0010's triggers; on Citus installed
    on the shards by store/citus.py)."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(DISTINCT memory_id) FROM lexical_postings "
                           "WHERE tenant_id = %s", (tenant,)).fetchone()
    return int(row[0]) if row else 0


def _lexical(mv: Any, tenant: str, repeat: int) -> dict[str, Any]:
    """``search.text_candidates`` alone (the BM25 top 50 of recall's lexical list): median
    and p95 over ``repeat`` queries, and the paths it took; and the same queries with a
    type filter that every bench memory passes (``lexical_scan_*``: the same rows and
    ranking, from the scan over ``memories``: the baseline of the postings path)."""
    from mnemovault.recall import terms
    from mnemovault.store import search

    out: dict[str, Any] = {}
    for name, types in (("lexical", None), ("lexical_scan", ["episode"])):
        where, params = search.filter_sql(tenant, "s", types=types)
        times, paths = [], set()
        for i in range(repeat + 1):
            explain: dict[str, Any] = {}
            with mv.rt.db.transaction(tenant) as conn:
                t0 = time.perf_counter()
                key = terms.tenant_key(mv.rt.pii, conn, tenant)
                assert key is not None
                rows = search.text_candidates(conn, terms.query(key, LEXICAL[i % len(LEXICAL)]),
                                              where, params, 50, explain=explain)
                if i:  # the first one warms
                    times.append((time.perf_counter() - t0) * 1000)
            if not rows:
                raise RuntimeError(f"no lexical match for {LEXICAL[i % len(LEXICAL)]!r}")
            paths.add(str(explain.get("path")))
        times.sort()
        out |= {f"{name}_ms_p50": round(statistics.median(times), 2),
                f"{name}_ms_p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2),
                f"{name}_path": "/".join(sorted(paths))}
    return out


def _prepared(url: str, *, recover: bool = False) -> int | None:
    """Rows of ``pg_dist_transaction`` (two-phase commits on record; with ``recover`` the
    finished ones are cleared first); None without Citus. Background recovery (every 60 s)
    may clear rows meanwhile, so a difference is a lower bound."""
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone() is None:
            return None
        if recover:
            conn.execute("SELECT recover_prepared_transactions()")
        return int(conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()[0])


def _measure(settings: Any, n: int, repeat: int, writes: int) -> dict[str, Any]:
    from mnemovault.vault import MemoryVault

    mv = MemoryVault.open(settings)
    try:
        tenant = f"bench-{uuid.uuid4().hex[:8]}"
        dim = mv.rt.embedder.dimension
        _load(mv, tenant, n, dim)
        who = mv.principal(tenant)
        mv.recall(QUERIES[0], scope="s", k=10, principal=who, touch=False)  # warm
        times = []
        for i in range(repeat):
            t0 = time.perf_counter()
            mv.recall(QUERIES[i % len(QUERIES)], scope="s", k=10, principal=who, touch=False)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out: dict[str, Any] = {
            "recall_ms_p50": round(statistics.median(times), 2),
            "recall_ms_p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2),
            "plan": _plan(mv.rt.db.url, tenant, dim),
            "lock_plan": _lock_plan(mv.rt.db.url, tenant),
            "lexical_stats_docs": _stats_docs(mv.rt.db.url, tenant),
            "lexical_postings_docs": _postings_docs(mv.rt.db.url, tenant),
            **_lexical(mv, tenant, repeat)}
        before = _prepared(mv.rt.db.url, recover=True)
        out["remember"] = _remember(mv, 8, writes)
        after = _prepared(mv.rt.db.url)
        out["remember"]["two_phase_commits"] = (after - before if before is not None
                                                and after is not None else None)
        return out
    finally:
        mv.close()


def _remember(mv: Any, tenants: int, each: int) -> dict[str, Any]:
    names = [f"bw-{uuid.uuid4().hex[:8]}" for _ in range(tenants)]
    for t in names:
        mv.ensure_tenant(t)
    errors: list[str] = []

    def write(t: str) -> None:
        try:
            for j in range(each):
                mv.remember(f"note {j} for the bench: write to w{j}.{t}@example.org",
                            scope="s", principal=mv.principal(t))
        except Exception as exc:  # reported, not raised: the figure is what is measured
            errors.append(f"{type(exc).__name__}: {exc}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=write, args=(t,)) for t in names]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    secs = time.perf_counter() - t0
    if errors:
        return {"error": errors[0], "failed_writers": len(errors)}
    return {"per_second": round(tenants * each / secs, 1), "writers": tenants,
            "remembers": tenants * each, "seconds": round(secs, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--writes", type=int, default=20, help="remembers per writer (8 writers)")
    args = ap.parse_args()
    if args.quick:
        args.memories, args.repeat, args.writes = 500, 10, 3
    url = os.environ.get("MV_CITUS_URL")
    if not url:
        print("bench/citus.py: MV_CITUS_URL is not set (no Citus cluster): skipped",
              file=sys.stderr)
        return 0
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'"
                            ).fetchone() is None:
                print("bench/citus.py: MV_CITUS_URL has no citus extension: skipped",
                      file=sys.stderr)
                return 0
    except psycopg.Error as exc:
        print(f"bench/citus.py: cluster unreachable ({type(exc).__name__}): skipped",
              file=sys.stderr)
        return 0
    quiet_logging()
    from mnemovault.config import Settings

    with tempfile.TemporaryDirectory(prefix="mv-bench-citus-") as d:
        os.chmod(d, 0o755)
        progress(f"single PostgreSQL (embedded), {args.memories} memories")
        single = _measure(Settings(data_dir=Path(d) / "single", database_url=None),
                          args.memories, args.repeat, args.writes)
        from mnemovault.store.embedded import stop

        stop(Path(d) / "single")
        progress(f"Citus coordinator, {args.memories} memories")
        try:
            cluster = _measure(Settings(data_dir=Path(d) / "citus", database_url=url),
                               args.memories, args.repeat, args.writes)
        except Exception as exc:  # a finding to report (e.g. a write path Citus refuses)
            cluster = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    result = {
        "bench": "citus", "memories": args.memories, "repeat": args.repeat,
        "single": single, "citus": cluster,
        "ratio_recall_p50": (round(cluster["recall_ms_p50"] / single["recall_ms_p50"], 2)
                             if "recall_ms_p50" in cluster else None),
        "ratio_recall_p95": (round(cluster["recall_ms_p95"] / single["recall_ms_p95"], 2)
                             if "recall_ms_p95" in cluster else None),
        "ratio_remember_per_second": (
            round(cluster["remember"]["per_second"] / single["remember"]["per_second"], 2)
            if "per_second" in cluster.get("remember", {})
            and "per_second" in single.get("remember", {}) else None),
        "citus_recall_routed": "Task Count: 1" in cluster.get("plan", ""),
        "citus_lock_routed": "Task Count: 1" in cluster.get("lock_plan", ""),
        "ratio_lexical_p50": (round(cluster["lexical_ms_p50"] / single["lexical_ms_p50"], 2)
                              if "lexical_ms_p50" in cluster else None),
        # the postings path against the scan, on each backend
        "single_lexical_postings_vs_scan_p50": round(
            single["lexical_ms_p50"] / single["lexical_scan_ms_p50"], 2),
        "citus_lexical_postings_vs_scan_p50": (
            round(cluster["lexical_ms_p50"] / cluster["lexical_scan_ms_p50"], 2)
            if "lexical_ms_p50" in cluster else None),
        "citus_lexical_stats_kept": cluster.get("lexical_stats_docs") == args.memories,
        "citus_lexical_postings_kept": cluster.get("lexical_postings_docs") == args.memories,
        "citus_lexical_path": cluster.get("lexical_path"),
        "writes": args.writes,
        "environment": environment(),
    }
    out = Path(__file__).resolve().parent / "results" / "citus.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
