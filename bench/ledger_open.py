"""Benchmark: ``MemoryVault.open`` with an empty and a 1,000-entry erasure ledger.

Every open compares the erasure ledger outside the database with the database (issue 21:
a database behind the ledger is re-erased before anything is served), so an open must stay
cheap when nothing is behind. For each case this builds, in a fresh embedded PostgreSQL
(a deterministic random-vector stand-in embedder: no model):

* ``empty``: one tenant, a few memories, nothing ever forgotten (no ledger file);
* ``ledger``: the same plus ``--entries`` (default 1,000) forgets of one memory each, so
  the tenant's ledger file and table hold that many entries, spread over ``--tenants``
  tenants (default 1);

then opens and closes the vault ``--repeat`` times (the embedded server already running,
as for every command after the first) and reports the median and the minimum of
``open()`` in milliseconds. Run it on two commits to compare.

Usage::

    python bench/ledger_open.py                  # 1,000 entries, 15 opens per case
    python bench/ledger_open.py --entries 1000 --tenants 50 --repeat 9

JSON on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, progress, quiet_logging, stop_embedded


def build(data_dir: Path, entries: int, tenants: int) -> None:
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    mv = MemoryVault.open(Settings(data_dir=data_dir, database_url=None),
                          embedder=RandomEmbedder())
    try:
        names = [f"b{i}" for i in range(max(tenants, 1))]
        for t in names:
            mv.ensure_tenant(t)
            who = mv.principal(t)
            mv.remember_many([{"content": f"kept {i}", "scope": "s"} for i in range(5)],
                             principal=who)
        for n, t in enumerate(names):
            share = entries // len(names) + (1 if n < entries % len(names) else 0)
            if not share:
                continue
            who = mv.principal(t)
            ids = [r.id for r in mv.remember_many(
                [{"content": f"gone {i}", "scope": "s"} for i in range(share)], principal=who)]
            for i in ids:
                mv.forget([i], principal=who)
    finally:
        mv.close()


def time_opens(data_dir: Path, repeat: int) -> list[float]:
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    settings = Settings(data_dir=data_dir, database_url=None)
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mv = MemoryVault.open(settings, embedder=RandomEmbedder())
        out.append((time.perf_counter() - t0) * 1000)
        mv.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    quiet_logging()
    results: dict[str, Any] = {"benchmark": "ledger_open", "entries": args.entries,
                               "tenants": args.tenants, "repeat": args.repeat,
                               "environment": environment(), "cases": {}}
    root = Path(tempfile.mkdtemp(prefix="mv-bench-ledger-"))
    root.chmod(0o755)
    try:
        for case, n in (("empty", 0), ("ledger", args.entries)):
            d = root / case
            progress(f"{case}: building ({n} entries)")
            build(d, n, args.tenants)
            time_opens(d, 2)  # warm: the server is running, files cached
            ms = time_opens(d, args.repeat)
            results["cases"][case] = {"median_ms": round(statistics.median(ms), 2),
                                      "min_ms": round(min(ms), 2)}
            progress(f"{case}: median {statistics.median(ms):.1f} ms, min {min(ms):.1f} ms")
            stop_embedded(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
