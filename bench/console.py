"""Benchmark: the web console's page render time (issue 25) for the two pages that grow with
the data: the review queue over N pending items and the audit page over M audit rows.

Usage::

    python bench/console.py                      # 10,000 pending items, 1,000,000 audit rows
    python bench/console.py --quick              # 1,000 and 20,000 (what CI runs, < 60 s)
    python bench/console.py --pending 10000 --audit-rows 1000000   # = the default

In a fresh embedded PostgreSQL (a deterministic random-vector stand-in embedder: no model):

* **review**: ``--pending`` items held by the review gate, written through the real write
  path (``remember_many``, 1,000 a batch, ``REQUIRE_REVIEW=true``); one in ten is a new
  version of a keyed memory, so its page shows a diff against the version it would
  supersede (one more read per such item). Pages of 25, keyset paged: the first page, a
  page from the middle (cursor at the item halfway) and the last page.
* **audit**: ``--audit-rows`` rows of one tenant's chain, built as the service builds them
  (:func:`mnemovault.audit.chain.build_row`, RFC 9162 leaf and node hashes) and loaded
  with COPY, then a signed checkpoint; pages of 50 rows: the newest, a page deep in the
  chain (``before`` = the middle seq), a one-hour time range in the middle (binary search
  on ``ts``) and an inclusion proof of the middle row. Every render also checks the latest
  checkpoint's signature and root against the stored tree.

Each page is requested twice unmeasured (warm-up), then ``--repeat`` times through
FastAPI's TestClient with a signed-in
session (so the time includes authenticating the session's key, the facade calls and the
Jinja2 render, not the network); p50 and p95 in milliseconds. Target: p95 under 100 ms.
JSON on stdout (and ``--out``); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import RandomEmbedder, environment, progress, quiet_logging, stop_embedded

QUICK = {"pending": 1000, "audit_rows": 20_000, "repeat": 15}
FULL = {"pending": 10_000, "audit_rows": 1_000_000, "repeat": 30}


def timed(client: Any, path: str, repeat: int, warmup: int = 2) -> dict[str, Any]:
    for _ in range(warmup):  # templates compiled, caches and the pool warm: not measured
        client.get(path)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = client.get(path)
        times.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(p95, 2),
            "min_ms": round(times[0], 2), "requests": repeat, "bytes": len(r.content)}


def sign_in(client: Any, token: str) -> None:
    from tests.console_helpers import sign_in as form_sign_in

    r = form_sign_in(client, token)
    assert r.status_code == 303, r.text


def build_review(mv: Any, tenant: str, n: int) -> dict[str, Any]:
    writer = mv.authenticate(mv.create_key(tenant, "member")[0])
    keyed = max(n // 10, 1)
    t0 = time.perf_counter()
    mv.settings = mv.settings.model_copy(update={"require_review": False})
    mv.remember_many([{"content": f"Ticket {i}: the printer on floor {i % 9} jams on A3",
                       "scope": "ops", "key": f"ticket-{i}"} for i in range(keyed)],
                     principal=writer)
    mv.settings = mv.settings.model_copy(update={"require_review": True})
    items: list[dict[str, Any]] = []
    for i in range(n):
        if i < keyed:
            items.append({"content": f"Ticket {i}: the printer on floor {i % 9} jams on A4 "
                          "paper too", "scope": "ops", "key": f"ticket-{i}"})
        else:
            items.append({"content": f"Note {i}: the delivery for dock {i % 17} arrives "
                          f"at {6 + i % 12} o'clock", "scope": "ops",
                          "provenance": {"source": "bench", "run": i // 1000}})
    ids: list[str] = []
    for at in range(0, n, 1000):
        ids += [str(r.id) for r in mv.remember_many(items[at:at + 1000], principal=writer)]
        progress(f"review: {min(at + 1000, n)}/{n} pending")
    return {"ids": sorted(ids), "seconds": round(time.perf_counter() - t0, 1),
            "versions": keyed}


def build_audit(mv: Any, tenant: str, n: int) -> dict[str, Any]:
    """``n`` chained rows for ``tenant`` (no rows before), loaded with COPY as the owner."""
    import psycopg

    from mnemovault.audit.chain import GENESIS_HASH, build_row
    from mnemovault.audit.merkle import CompactRange, leaf_hash

    t0 = time.perf_counter()
    ops = ["REMEMBER", "RECALL", "FORGET", "PIN", "REVIEW_APPROVE", "SUBJECT_EXPORT"]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    prev = GENESIS_HASH
    cr = CompactRange()
    rows: list[tuple[Any, ...]] = []
    nodes: list[tuple[Any, ...]] = []
    for seq in range(1, n + 1):
        ts = start + timedelta(seconds=seq)  # one row a second
        row_bytes, row_hash = build_row(
            prev_hash=prev, seq=seq, tenant_id=tenant, ts=ts, operation=ops[seq % len(ops)],
            actor=f"key:{uuid.UUID(int=seq % 7)}", memory_ids=[str(uuid.UUID(int=seq))],
            trigger="api", request_id=f"req-{seq}", details={"count": seq % 5})
        rows.append((tenant, seq, ts, ops[seq % len(ops)], row_bytes, prev, row_hash))
        nodes += [(tenant, lvl, idx, h) for lvl, idx, h in cr.append(leaf_hash(row_bytes))]
        prev = row_hash
    progress(f"audit: built {n} rows in {time.perf_counter() - t0:.1f} s; loading")
    with psycopg.connect(mv.db.url) as conn, conn.transaction():
        with conn.cursor().copy("COPY audit_log (tenant_id, seq, ts, operation, row_bytes, "
                                "prev_hash, row_hash) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["text", "int8", "timestamptz", "text", "bytea", "bytea", "bytea"])
            for r in rows:
                cp.write_row(r)
        with conn.cursor().copy("COPY audit_nodes (tenant_id, level, idx, hash) FROM STDIN "
                                "(FORMAT BINARY)") as cp:
            cp.set_types(["text", "int2", "int8", "bytea"])
            for r in nodes:
                cp.write_row(r)
        conn.execute("INSERT INTO audit_heads (tenant_id, seq, head_hash, peaks, "
                     "checkpoint_size) VALUES (%s, %s, %s, %s, 0)",
                     (tenant, n, prev, b"".join(cr.peaks)))
        conn.execute("ANALYZE audit_log")
        conn.execute("ANALYZE audit_nodes")
    mv.audit.checkpoint(mv.principal(tenant), sign_now=True)
    return {"seconds": round(time.perf_counter() - t0, 1), "start": start}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI sizes (under a minute)")
    ap.add_argument("--pending", type=int)
    ap.add_argument("--audit-rows", type=int)
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--out", type=Path, help="default bench/results/console.json "
                    "(console_quick.json with --quick)")
    a = ap.parse_args()
    size = QUICK if a.quick else FULL
    pending = a.pending or size["pending"]
    audit_rows = a.audit_rows or size["audit_rows"]
    repeat = a.repeat or size["repeat"]
    quiet_logging()

    from fastapi.testclient import TestClient

    from mnemovault.api import create_app
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-console-"))
    data_dir.chmod(0o755)
    started = time.perf_counter()
    out: dict[str, Any] = {
        "benchmark": "console", "quick": a.quick, "pending": pending,
        "audit_rows": audit_rows, "repeat": repeat, "target_p95_ms": 100,
        "command": " ".join(["python", "bench/console.py", *sys.argv[1:]]),
        "full_size_command": "python bench/console.py --pending 10000 --audit-rows 1000000 "
                             "--out bench/results/console.json",
        "embedder": "deterministic random vectors (no model)", "environment": environment()}
    try:
        mv = MemoryVault.open(Settings(data_dir=data_dir, database_url=None, audit_jsonl=False,
                                       rate_limits=False), embedder=RandomEmbedder())
        try:
            mv.ensure_tenant("queue")
            built = build_review(mv, "queue", pending)
            mv.ensure_tenant("ledger")
            audit = build_audit(mv, "ledger", audit_rows)
            out["build_seconds"] = {"review": built["seconds"], "audit": audit["seconds"]}
            reviewer = mv.create_key("queue", "admin")[0]
            auditor = mv.create_key("ledger", "admin")[0]
            pages: dict[str, Any] = {}
            with TestClient(create_app(mv)) as c:
                sign_in(c, reviewer)
                ids = built["ids"]
                for name, path in (
                        ("review_first", "/console/review"),
                        ("review_middle", f"/console/review?cursor={ids[len(ids) // 2]}"),
                        ("review_last", f"/console/review?cursor={ids[-26]}")):
                    pages[name] = timed(c, path, repeat)
                    progress(f"{name}: {pages[name]}")
                c.cookies.clear()
                sign_in(c, auditor)
                mid = audit_rows // 2
                when = (audit["start"] + timedelta(seconds=mid)).strftime("%Y-%m-%dT%H:%M:%S")
                until = (audit["start"] + timedelta(seconds=mid + 3600)).strftime(
                    "%Y-%m-%dT%H:%M:%S")
                for name, path in (
                        ("audit_newest", "/console/audit"),
                        ("audit_deep", f"/console/audit?before={mid}"),
                        ("audit_time_range", f"/console/audit?since={when}&until={until}"),
                        ("audit_inclusion_proof", f"/console/audit?seq={mid}")):
                    pages[name] = timed(c, path, repeat)
                    progress(f"{name}: {pages[name]}")
            out["pages"] = pages
            out["worst_p95_ms"] = max(p["p95_ms"] for p in pages.values())
            out["meets_target"] = out["worst_p95_ms"] < 100
        finally:
            mv.close()
            stop_embedded(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(out, indent=2, default=str)
    results = Path(__file__).resolve().parent / "results"
    target = a.out or results / ("console_quick.json" if a.quick else "console.json")
    target.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
