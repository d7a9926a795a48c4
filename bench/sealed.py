"""Benchmark: the cost of sealed content (issue 21 item 1), with and without it in one run,
and the erase of a subject with N memories: time, and the files still holding any of its
bytes before scrub.

In a fresh embedded PostgreSQL with a deterministic random-vector embedder (the bench
measures the store, not embedding), two tenants are filled with the same ``--size``
memories (default 10,000; ``--quick``: 500) through ``remember_many`` in batches of 500:
tenant ``sealed`` with content sealing on (the product), tenant ``plain`` with it off (the
baseline: the write path's sealer replaced by one that stores no ciphertext, and the row
factory's opener removed, so reads do what main did). Then, alternating the two modes
round by round:

* ``recall``: ``--queries`` recalls (k=10) of words from the stored texts; p50 and p95 ms;
* ``remember_single``: one memory per call; p50 ms;
* ``remember_batch``: ``remember_many`` of 100; p50 ms per batch.

Ratios are sealed / plain (target: at most 1.10). Then ``erase``: a subject with
``--erase-size`` memories (default 1,000; ``--quick``: 100), each holding a canary string,
is erased with sealing on; reported: the erase's time, and the files of the data directory
(``pg/`` and the key store) that still hold any canary (plaintext) before ``scrub``
(target: none; the plaintext column is written empty: ``store/memories.py``,
``KEEP_PLAINTEXT``).

Usage::

    python bench/sealed.py --quick
    python bench/sealed.py --out bench/results/sealed.json

JSON on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RandomEmbedder, environment, progress, quiet_logging, stop_embedded

_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
          "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
          "zulu diabetes clinic lunch meeting project travel budget garden music")
WORDS = _WORDS.split(" ")


class _NoSeal:
    """The baseline's write sealer: no key, no ciphertext."""

    def content(self, scope: str, subject: str | None, row_id: object,
                text: str) -> tuple[None, None]:
        return None, None

    def memory_key(self, scope: str, subject: str | None, row_id: object,
                   key: str | None) -> tuple[str | None, None]:
        return key, None

    def provenance(self, scope: str, subject: str | None, row_id: object,
                   provenance: dict[str, Any]) -> tuple[dict[str, Any], None]:
        return provenance, None


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--erase-size", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    quiet_logging()
    size = args.size or (500 if args.quick else 10_000)
    queries = args.queries or (30 if args.quick else 200)
    erase_n = args.erase_size or (100 if args.quick else 1000)

    from mnemovault.config import Settings
    from mnemovault.memories import write as write_mod
    from mnemovault.pii import service as pii_service
    from mnemovault.store import memories as memory_store
    from mnemovault.vault import MemoryVault

    data = Path(tempfile.mkdtemp(prefix="mv-bench-sealed-"))
    mv = MemoryVault.open(Settings(data_dir=data, ledger_dir=data.parent / (data.name + "-l")),
                          embedder=RandomEmbedder())  # type: ignore[arg-type]
    real_writer = pii_service.content_writer
    real_hook = mv.rt.db.row_hook
    keep = memory_store.KEEP_PLAINTEXT

    def mode(sealed: bool) -> None:
        if sealed:
            write_mod.pii.content_writer = real_writer  # type: ignore[attr-defined]
            mv.rt.db.row_hook = real_hook
            memory_store.KEEP_PLAINTEXT = keep
        else:
            write_mod.pii.content_writer = lambda rt, conn, t: _NoSeal()  # type: ignore[attr-defined,assignment,misc]
            mv.rt.db.row_hook = None
            memory_store.KEEP_PLAINTEXT = True  # main's plaintext column

    rng = random.Random(7)
    res: dict[str, Any] = {"benchmark": "sealed", "quick": args.quick, "size": size,
                           "queries": queries, "env": environment()}
    try:
        for name, sealed in (("sealed", True), ("plain", False)):
            mv.ensure_tenant(name)
            mode(sealed)
            who = mv.principal(name)
            t0 = time.perf_counter()
            for i in range(0, size, 500):
                mv.remember_many([{"content": _text(rng), "scope": "s",
                                   "subject": f"p{j % 50}"}
                                  for j in range(i, min(size, i + 500))], principal=who)
            progress(f"built {name}: {size} in {time.perf_counter() - t0:.1f} s")
        timings: dict[str, dict[str, list[float]]] = {
            m: {"recall": [], "remember_single": [], "remember_batch": []}
            for m in ("sealed", "plain")}
        qs = [" ".join(rng.sample(WORDS, 2)) for _ in range(queries)]
        for rnd in range(queries):
            for name in (("sealed", "plain") if rnd % 2 == 0 else ("plain", "sealed")):
                mode(name == "sealed")
                who = mv.principal(name)
                t = time.perf_counter()
                mv.recall(qs[rnd], scope="s", k=10, principal=who)
                timings[name]["recall"].append((time.perf_counter() - t) * 1000)
                if rnd % 3 == 0:
                    t = time.perf_counter()
                    mv.remember(_text(rng), scope="s", subject="p1", principal=who)
                    timings[name]["remember_single"].append((time.perf_counter() - t) * 1000)
                if rnd % 10 == 0:
                    batch = [{"content": _text(rng), "scope": "s", "subject": f"p{j}"}
                             for j in range(100)]
                    t = time.perf_counter()
                    mv.remember_many(batch, principal=who)
                    timings[name]["remember_batch"].append((time.perf_counter() - t) * 1000)
        mode(True)
        out: dict[str, Any] = {}
        for name, t in timings.items():
            out[name] = {"recall_p50_ms": _pct(t["recall"], 0.5),
                         "recall_p95_ms": _pct(t["recall"], 0.95),
                         "remember_single_p50_ms": round(statistics.median(
                             t["remember_single"]), 3),
                         "remember_batch100_p50_ms": round(statistics.median(
                             t["remember_batch"]), 3)}
        out["ratio_sealed_over_plain"] = {
            k: round(out["sealed"][k] / out["plain"][k], 3) for k in out["sealed"]}
        res["cost"] = out

        # the erase of a subject with erase_n memories
        mv.ensure_tenant("erase")
        who = mv.principal("erase")
        canaries = [f"canary-{uuid.uuid4().hex[:16]}" for _ in range(erase_n)]
        for i in range(0, erase_n, 500):
            mv.remember_many([{"content": f"{c} {_text(rng)}", "scope": "s", "subject": "gone"}
                              for c in canaries[i:i + 500]], principal=who)
        mv.remember_many([{"content": _text(rng), "scope": "s", "subject": "stays"}
                          for _ in range(100)], principal=who)
        t = time.perf_counter()
        mv.subjects.erase("gone", scope="s", principal=who)
        erase_ms = (time.perf_counter() - t) * 1000
        mv.close()
        stop_embedded(data)
        needles = [c.encode() for c in canaries]
        holding: list[str] = []
        for p in data.rglob("*"):
            if p.is_file() and not p.is_symlink():
                try:
                    blob = p.read_bytes()
                except OSError:
                    continue
                if any(n in blob for n in needles):
                    holding.append(str(p.relative_to(data)))
        res["erase"] = {"memories": erase_n, "ms": round(erase_ms, 1),
                        "files_with_plaintext_before_scrub": len(holding),
                        "files": sorted(holding)[:20],
                        "plaintext_column_still_written": memory_store.KEEP_PLAINTEXT}
    finally:
        mode(True)
        with contextlib.suppress(Exception):  # closed above
            mv.close()
        stop_embedded(data)
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(data.parent / (data.name + "-l"), ignore_errors=True)
    text = json.dumps(res, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
