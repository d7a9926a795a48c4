"""Benchmark: tenant export and tenant purge vs the bare SQL of the same rows.

For each size N (default 100, 1,000 and 10,000; ``--quick``: 10 and 100) it builds, in a
fresh embedded PostgreSQL, tenants of the same shape: N episodes, each with an e-mail
address of its own (so N vault values), N/2 facts derived from two episodes each, and the
audit rows those writes append (one per batch) with a signed checkpoint. Then it times:

* ``export``: a ``TENANT_EXPORT`` job end to end (request, the worker's pass: every file
  written under row-level security in batches, hashed, progress recorded, the manifest,
  the closing transaction), to a local directory;
* ``bare_dump``: the least an export must do: one ``SELECT to_jsonb(...)`` per exported
  table of the same tenant written to a file as JSON Lines (no batching, no hashing, no
  progress, no audit);
* ``purge``: the hard delete of a soft-deleted, expired tenant (catalog walk, every
  tenant table, the system audit row, one transaction);
* ``bare_delete``: ``DELETE FROM <table> WHERE tenant_id = …`` over the same tables in
  the same order, of a second tenant of the same shape, in one transaction.

The embedder is a deterministic random-vector stand-in (nothing here embeds at export or
purge time). Sizes up to 1,000 are repeated ``--repeat`` times (median).

Usage::

    python bench/tenant_lifecycle.py            # 100, 1000, 10000
    python bench/tenant_lifecycle.py --quick    # 10, 100 (CI)

JSON on stdout (also written to bench/results/tenant_lifecycle[-quick].json); progress on
stderr. Needs no data set.
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

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, quiet_logging, stop_embedded

from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

BATCH = 500
RESULTS = Path(__file__).resolve().parent / "results"


def say(msg: str) -> None:
    print(f"[tenant-bench] {msg}", file=sys.stderr, flush=True)


def build(vault: MemoryVault, tenant: str, n: int) -> None:
    vault.ensure_tenant(tenant)
    who = Principal.local(tenant)
    items = [{"content": f"Write to user{i}.{tenant}@example.org about order {i}",
              "scope": "s", "subject": f"u{i % 50}"} for i in range(n)]
    ids: list[uuid.UUID] = []
    for i in range(0, n, BATCH):
        ids += [r.id for r in vault.remember_many(items[i:i + BATCH], principal=who)]
    facts = [{"content": f"fact {j}", "scope": "s", "type": "fact",
              "derived_from": [str(ids[2 * j]), str(ids[2 * j + 1])]} for j in range(n // 2)]
    for i in range(0, len(facts), BATCH):
        vault.remember_many(facts[i:i + BATCH], principal=who)
    vault.audit.checkpoint(who, sign_now=True)


def bare_dump(vault: MemoryVault, tenant: str, out: Path) -> float:
    t = time.perf_counter()
    with psycopg.connect(vault.db.url) as conn, open(out, "wb") as f:
        for table in ("memories", "pii_values", "pii_deks", "pii_tenant_keys", "audit_log",
                      "audit_checkpoints"):
            q = (f"SELECT (to_jsonb(x) - 'embedding' - 'tsv' - 'tsv_length')::text "
                 f"FROM {table} x WHERE tenant_id = %s")
            with conn.cursor() as cur:
                cur.execute(q, (tenant,))
                for (line,) in cur:
                    f.write(line.encode() + b"\n")
    return time.perf_counter() - t


def bare_delete(vault: MemoryVault, tenant: str, tables: list[str]) -> float:
    t = time.perf_counter()
    with psycopg.connect(vault.db.url) as conn, conn.transaction():
        for table in tables:
            conn.execute(f'DELETE FROM "{table}" WHERE tenant_id = %s', (tenant,))
    return time.perf_counter() - t


def run_size(vault: MemoryVault, n: int, rep: int, scratch: Path) -> dict[str, Any]:
    tag = f"{n}-{rep}-{uuid.uuid4().hex[:6]}"
    ta, tb = f"bx{tag}", f"by{tag}"
    t = time.perf_counter()
    build(vault, ta, n)
    build(vault, tb, n)
    setup = time.perf_counter() - t
    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("ANALYZE")

    t = time.perf_counter()
    job = vault.tenants.export(ta, confirm=f"DELETE-{ta}")
    (res,) = vault.tenants.process_outbox(tenant=ta)
    export_s = time.perf_counter() - t
    assert res["state"] == "done", res
    status = vault.tenants.export_status(ta, job["job_id"])
    dump_s = bare_dump(vault, tb, scratch / f"{tb}.jsonl")

    from mnemovault.store import tenants as store

    with store.purge_connection(vault.db.url) as conn:
        assert conn is not None
        tables = store.tenant_tables(conn)
    now = datetime.now(UTC)
    vault.tenants.delete(ta, confirm=f"DELETE-{ta}", now=now)
    t = time.perf_counter()
    purged = vault.tenants.purge_expired(now=now + timedelta(days=31))
    purge_s = time.perf_counter() - t
    (mine,) = [p for p in purged["purged"] if p["tenant"] == ta]
    delete_s = bare_delete(vault, tb, tables)
    return {"export_s": export_s, "bare_dump_s": dump_s, "purge_s": purge_s,
            "bare_delete_s": delete_s, "setup_s": setup,
            "rows_exported": status["progress"]["rows_done"], "rows_purged": mine["rows"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 10, 100")
    p.add_argument("--sizes", type=str, default=None, help="comma-separated sizes")
    p.add_argument("--repeat", type=int, default=3, help="runs per size up to 1,000")
    a = p.parse_args()
    quiet_logging()
    sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes
             else [10, 100] if a.quick else [100, 1000, 10_000])
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-tenant-"))
    data_dir.chmod(0o755)
    scratch = data_dir / "scratch"
    scratch.mkdir()
    say(f"embedded PostgreSQL in {data_dir}")
    vault = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False,
                                      tenant_purge_interval_hours=0),
                             embedder=RandomEmbedder())
    results = []
    try:
        for n in sizes:
            runs = [run_size(vault, n, rep, scratch)
                    for rep in range(a.repeat if n <= 1000 else 1)]
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("export_s", "bare_dump_s", "purge_s", "bare_delete_s")}
            row = {"n": n, "runs": len(runs), "rows_exported": runs[0]["rows_exported"],
                   "rows_purged": runs[0]["rows_purged"],
                   **{k: round(v, 4) for k, v in med.items()},
                   "export_over_bare": round(med["export_s"] / med["bare_dump_s"], 2),
                   "purge_over_bare": round(med["purge_s"] / med["bare_delete_s"], 2),
                   "setup_s": round(runs[0]["setup_s"], 2)}
            say(json.dumps(row))
            results.append(row)
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    report = {"bench": "tenant_lifecycle", "quick": a.quick, "environment": environment(),
              "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"tenant_lifecycle{'-quick' if a.quick else ''}.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
