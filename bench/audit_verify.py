"""Benchmark: audit log verification rate, next to one bare SHA-256 per line; Merkle proofs.

Usage::

    python bench/audit_verify.py            # 1,000,000 rows
    python bench/audit_verify.py --quick    # 20,000 rows (what CI runs)
    python bench/audit_verify.py --rows 200000 --repeat 5 --out bench/results/audit_verify.json

It writes a JSON Lines export of N realistic rows (built with ``build_row`` and
``export_line``, as the service does) in a temporary directory, then, in the same run and
interleaved so machine load hits both alike:

* ``bare``: read the file in 1 MiB blocks, split lines, one ``hashlib.sha256(line)``
  per line (the same reading the verifier does: this is the ratio's denominator);
* ``bare_in_memory``: one SHA-256 per line over lines already split in memory (reported
  too, as the strictest denominator);
* ``verify``: ``verify_file`` with every check on (canonical form, duplicate keys,
  BOM/CR, schema, seq, link, row hash);
* ``verify_checkpoint``: the same plus the RFC 9162 root of all rows compared with a
  signed checkpoint.

Rates are rows per second, median of ``--repeat`` runs, wall clock; the CPU-time ratio is
printed too because it is steadier on a shared machine. Also: Merkle tree build time, and
inclusion/consistency proof generation and verification times at N leaves. The JSON
result goes to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemovault.audit.chain import GENESIS_HASH, build_row, export_line
from mnemovault.audit.checkpoint import sign_checkpoint
from mnemovault.audit.merkle import (
    CompactRange,
    MerkleTree,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from mnemovault.audit.verify import verify_file

BLOCK = 1024 * 1024  # same block size as verify_file
OPERATIONS = ["remember", "recall", "forget", "pin", "reveal", "export", "erase"]


def log(msg: str) -> None:
    print(f"[audit-bench] {msg}", file=sys.stderr, flush=True)


def build_file(path: Path, n: int, seed: int = 7) -> tuple[bytes, float]:
    """Write ``n`` rows; return the concatenated leaf hashes and the build rate (rows/s)."""
    rnd = random.Random(seed)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    prev = GENESIS_HASH
    leaves = bytearray()
    start = time.perf_counter()
    with path.open("wb") as f:
        buf: list[bytes] = []
        for i in range(n):
            k = rnd.randrange(1, 4)
            row_bytes, h = build_row(
                prev_hash=prev,
                seq=i + 1,
                tenant_id="tenant-0001",
                ts=t0 + timedelta(microseconds=i * 997),
                operation=OPERATIONS[i % len(OPERATIONS)],
                actor=f"key_{rnd.randrange(50):04d}",
                agent="support-agent" if i % 3 else None,
                memory_ids=[str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(k)],
                trigger="user_request" if i % 2 else None,
                provenance={"source": "api", "run_id": f"run-{i // 100}"},
                request_id=f"req-{rnd.getrandbits(48):012x}",
                details={
                    "count": k,
                    "subject": f"hmac-sha256:{rnd.getrandbits(128):032x}",
                    "score": round(rnd.random(), 6),
                },
            )
            buf.append(export_line(row_bytes, prev, h))
            leaves += leaf_hash(row_bytes)
            prev = h
            if len(buf) == 10_000:
                f.write(b"".join(buf))
                buf.clear()
            if (i + 1) % 200_000 == 0:
                log(f"  built {i + 1:,} rows")
        f.write(b"".join(buf))
    return bytes(leaves), n / (time.perf_counter() - start)


def bare_pass(path: Path) -> int:
    """One SHA-256 per line, reading and splitting the same way the verifier does."""
    sha = hashlib.sha256
    count = 0
    tail = b""
    with path.open("rb", buffering=0) as f:
        while block := f.read(BLOCK):
            lines = block.split(b"\n")
            if tail:
                lines[0] = tail + lines[0]
            tail = lines.pop()
            for line in lines:
                sha(line).digest()
            count += len(lines)
    return count


def bare_in_memory(lines: list[bytes]) -> int:
    """One SHA-256 per line over lines already in memory (no reading, no splitting)."""
    sha = hashlib.sha256
    for line in lines:
        sha(line).digest()
    return len(lines)


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 rows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--proofs", type=int, default=1000, help="proofs timed per kind")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else args.rows

    with tempfile.TemporaryDirectory(prefix="mv-audit-bench-") as tmp:
        path = Path(tmp) / "audit.jsonl"
        log(f"building {n:,} rows in {path}")
        leaves, build_rate = build_file(path, n)
        size_mb = path.stat().st_size / 1e6
        log(f"file {size_mb:.1f} MB, built at {build_rate:,.0f} rows/s")

        t0 = time.perf_counter()
        tree = MerkleTree(leaves)
        tree_build_s = time.perf_counter() - t0
        key = Ed25519PrivateKey.generate()
        checkpoint = sign_checkpoint("bench.example/audit/tenant-0001", n, tree.root(), key)

        runs: dict[str, list[tuple[float, float]]] = {
            "bare": [],
            "bare_in_memory": [],
            "verify": [],
            "verify_cp": [],
        }
        for r in range(args.repeat):
            log(f"round {r + 1}/{args.repeat}")
            w, c, count = timed(lambda: bare_pass(path))
            assert count == n
            runs["bare"].append((w, c))
            w, c, res = timed(lambda: verify_file(path))
            assert res.ok and res.rows == n, res.summary()
            runs["verify"].append((w, c))
            w, c, res = timed(
                lambda: verify_file(path, checkpoint=checkpoint, public_key=key.public_key())
            )
            assert res.ok and res.checkpoint_signature_verified, res.summary()
            runs["verify_cp"].append((w, c))
            split = path.read_bytes().split(b"\n")[:-1]
            w, c, count = timed(partial(bare_in_memory, split))
            assert count == n
            runs["bare_in_memory"].append((w, c))
            del split

        def rate(kind: str, idx: int) -> float:
            return n / statistics.median(x[idx] for x in runs[kind])

        rnd = random.Random(1)
        log(f"timing {args.proofs} inclusion and consistency proofs at {n:,} leaves")
        root = tree.root()
        gen_i = ver_i = gen_c = ver_c = 0.0
        for _ in range(args.proofs):
            idx = rnd.randrange(n)
            t = time.perf_counter()
            proof = tree.inclusion_proof(idx, n)
            gen_i += time.perf_counter() - t
            t = time.perf_counter()
            verify_inclusion(idx, n, tree.leaf_hash(idx), proof, root)
            ver_i += time.perf_counter() - t
            old = rnd.randrange(1, n + 1)
            old_root = tree.root(old)
            t = time.perf_counter()
            cproof = tree.consistency_proof(old, n)
            gen_c += time.perf_counter() - t
            t = time.perf_counter()
            verify_consistency(old, n, cproof, old_root, root)
            ver_c += time.perf_counter() - t

        compact = CompactRange()
        t = time.perf_counter()
        for i in range(0, len(leaves), 32):
            compact.append(leaves[i : i + 32])
        compact_s = time.perf_counter() - t
        assert compact.root() == root

    bare_w, ver_w, cp_w = rate("bare", 0), rate("verify", 0), rate("verify_cp", 0)
    bare_c, ver_c_rate, cp_c = rate("bare", 1), rate("verify", 1), rate("verify_cp", 1)
    result = {
        "benchmark": "audit_verify",
        "rows": n,
        "file_mb": round(size_mb, 1),
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "verify_rows_per_s": round(ver_w),
        "bare_sha256_rows_per_s": round(bare_w),
        "ratio": round(ver_w / bare_w, 3),
        "ratio_target": 0.15,
        "verify_with_checkpoint_rows_per_s": round(cp_w),
        "ratio_with_checkpoint": round(cp_w / bare_w, 3),
        "bare_sha256_in_memory_rows_per_s": round(rate("bare_in_memory", 0)),
        "ratio_vs_in_memory_bare": round(ver_w / rate("bare_in_memory", 0), 3),
        "cpu_time_ratio": round(ver_c_rate / bare_c, 3),
        "cpu_time_ratio_vs_in_memory_bare": round(ver_c_rate / rate("bare_in_memory", 1), 3),
        "cpu_time_ratio_with_checkpoint": round(cp_c / bare_c, 3),
        "row_build_rows_per_s": round(build_rate),
        "merkle_tree_build_s": round(tree_build_s, 3),
        "compact_range_append_rows_per_s": round(n / compact_s),
        "inclusion_proof_gen_us": round(gen_i / args.proofs * 1e6, 1),
        "inclusion_proof_verify_us": round(ver_i / args.proofs * 1e6, 1),
        "consistency_proof_gen_us": round(gen_c / args.proofs * 1e6, 1),
        "consistency_proof_verify_us": round(ver_c / args.proofs * 1e6, 1),
        "runs_wall_s": {k: [round(x[0], 3) for x in v] for k, v in runs.items()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
