"""Benchmark: ``MemoryVault.open`` with an empty and a 1,000-entry erasure ledger.

Every open compares the erasure ledger outside the database with the database (issue 21:
a database behind the ledger is re-erased before anything is served), so an open must stay
cheap when nothing is behind. For each case this builds, in a fresh embedded PostgreSQL
(a deterministic random-vector stand-in embedder: no model):

* ``empty``: one tenant, a few memories, nothing ever forgotten (no ledger file);
* ``ledger``: the same plus ``--entries`` (default 1,000) forgets of one memory each, so
  the tenant's ledger file and table hold that many entries, spread over ``--tenants``
  tenants (default 1);

then opens and closes the vault ``--repeat`` times each with the ledger file off
(``MNEMOVAULT_LEDGER_FILE=false``: no comparison, what every open did before) and on,
alternating, so both see the same machine load (the embedded server already running, as
for every command after the first), and reports the median and the minimum of ``open()``
in milliseconds for each, and of the comparison itself (``check``: the start check's own
``ms``; ``check_again``: a second check on the same database, without the one-off read of
the tenant signing key that the first tenant transaction of every open pays, so the first
check takes it from whatever runs next). On a commit before issue 21 both cases are the
same open.

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


def time_opens(data_dir: Path, repeat: int) -> dict[str, list[float]]:
    """Opens alternating between the ledger file off (``MNEMOVAULT_LEDGER_FILE=false``: no
    comparison, as before issue 21) and on, so both see the same load; and the comparison's
    own time as the start check reports it (``check``)."""
    from mnemovault.config import Settings
    from mnemovault.subjects import ledger as ledger_mod
    from mnemovault.vault import MemoryVault

    out: dict[str, list[float]] = {"off": [], "on": [], "check": [], "check_again": []}
    for _ in range(repeat):
        for case in ("off", "on"):
            settings = Settings(data_dir=data_dir, database_url=None,
                                ledger_file=case == "on")
            t0 = time.perf_counter()
            mv = MemoryVault.open(settings, embedder=RandomEmbedder())
            out[case].append((time.perf_counter() - t0) * 1000)
            found = getattr(ledger_mod, "last_check", lambda rt: None)(mv.rt)
            if case == "on" and found is not None:
                out["check"].append(found.ms)
                # again on the same database: without the first tenant transaction's
                # one-off read of the tenant signing key (an owner connection), which the
                # first check pays for whatever runs next
                out["check_again"].append(ledger_mod.check_on_start(mv.rt).ms)
            mv.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--tenants", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true",
                    help="CI size: 100 entries, 3 opens a case")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.repeat = min(args.entries, 100), min(args.repeat, 3)
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
            runs = time_opens(d, args.repeat)
            results["cases"][case] = {
                k: {"median_ms": round(statistics.median(v), 2), "min_ms": round(min(v), 2)}
                for k, v in runs.items() if v}
            progress(f"{case}: {results['cases'][case]}")
            stop_embedded(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
