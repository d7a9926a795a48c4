"""Audit append throughput and proof latency from the database.

Measures, in one run against a fresh embedded PostgreSQL:
- append rate (rows/s) with one transaction per row, and with ``--batch`` rows per
  transaction (what ``remember_many`` does: one row per batch, but a forget storm or an
  import appends many), each next to a bare ``INSERT`` of the same row bytes into a plain
  table (no chain, no Merkle nodes) in the same run;
- inclusion and consistency proof generation from the stored Merkle nodes at the final
  tree size (median µs), and their offline verification.

Usage: python bench/audit_append.py [--rows 20000] [--batch 100] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from mnemovault.audit import log as audit_log
from mnemovault.audit.merkle import verify_consistency, verify_inclusion
from mnemovault.config import Settings
from mnemovault.vault import MemoryVault


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="1,000 rows")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    rows = 1000 if a.quick else a.rows
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-audit-"))
    data_dir.chmod(0o755)
    vault = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False))
    tenant = "bench-audit"
    vault.ensure_tenant(tenant)
    details = {"count": 1, "note": "bench"}

    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bare_log (seq bigint PRIMARY KEY, b bytea)")
        conn.execute(f"GRANT INSERT, SELECT ON bare_log TO {vault.db.app_role}")

    half = rows // 2
    _say(f"appending {half} rows, one transaction each")
    t = time.perf_counter()
    for _ in range(half):
        with vault.db.transaction(tenant) as conn:
            audit_log.append(conn, tenant=tenant, operation="BENCH", actor="bench",
                             details=details)
    single = half / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(half):
        with vault.db.transaction(tenant) as conn:
            conn.execute("INSERT INTO bare_log VALUES (%s, %s)", (i, b"x" * 300))
    bare_single = half / (time.perf_counter() - t)

    _say(f"appending {rows - half} rows, {a.batch} per transaction")
    t = time.perf_counter()
    done = 0
    while done < rows - half:
        n = min(a.batch, rows - half - done)
        with vault.db.transaction(tenant) as conn:
            for _ in range(n):
                audit_log.append(conn, tenant=tenant, operation="BENCH", actor="bench",
                                 details=details)
        done += n
    batched = (rows - half) / (time.perf_counter() - t)
    t = time.perf_counter()
    done = 0
    while done < rows - half:
        n = min(a.batch, rows - half - done)
        with vault.db.transaction(tenant) as conn:
            for j in range(n):
                conn.execute("INSERT INTO bare_log VALUES (%s, %s)", (half + done + j, b"x" * 300))
        done += n
    bare_batched = (rows - half) / (time.perf_counter() - t)

    who = vault.principal(tenant)
    size = vault.audit.size(who)
    root = bytes.fromhex(vault.audit.checkpoint(who, sign_now=True)["root"])
    rng = random.Random(1)
    gen_inc, ver_inc, gen_con, ver_con = [], [], [], []
    for _ in range(50):
        seq = rng.randint(1, size)
        t = time.perf_counter()
        proof = vault.audit.inclusion(who, seq, size)
        gen_inc.append(time.perf_counter() - t)
        t = time.perf_counter()
        verify_inclusion(seq - 1, size, bytes.fromhex(proof["leaf_hash"]),
                         [bytes.fromhex(h) for h in proof["proof"]], root)
        ver_inc.append(time.perf_counter() - t)
    cp_rows = {}
    with vault.db.transaction(tenant) as conn:
        for r in conn.execute("SELECT size, root FROM audit_checkpoints ORDER BY size"):
            cp_rows[r["size"]] = bytes(r["root"])
    m = min(cp_rows)
    for _ in range(50):
        t = time.perf_counter()
        c = vault.audit.consistency(who, m, size)
        gen_con.append(time.perf_counter() - t)
        t = time.perf_counter()
        verify_consistency(m, size, [bytes.fromhex(h) for h in c["proof"]], cp_rows[m], root)
        ver_con.append(time.perf_counter() - t)
    verify = vault.audit.verify(who)
    vault.close()

    def us(xs: list[float]) -> float:
        return round(statistics.median(xs) * 1e6, 1)

    result = {
        "benchmark": "audit_append", "rows": rows, "batch": a.batch,
        "append_rows_per_s": {"one_tx_each": round(single, 1),
                              "bare_insert_one_tx_each": round(bare_single, 1),
                              "ratio_one_tx_each": round(single / bare_single, 3),
                              "batched": round(batched, 1),
                              "bare_insert_batched": round(bare_batched, 1),
                              "ratio_batched": round(batched / bare_batched, 3)},
        "proof_us_median": {"tree_size": size, "inclusion_generate": us(gen_inc),
                            "inclusion_verify": us(ver_inc), "consistency_generate": us(gen_con),
                            "consistency_verify": us(ver_con)},
        "verify_from_database": {"ok": verify.ok, "rows": verify.rows},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
