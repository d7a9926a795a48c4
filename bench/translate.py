"""Read-side pseudonymisation cost: median latency of recall and of redacting 10 chat turns
in a tenant whose vault holds N values (the known-entity index a translation needs grows
with N; one operation builds it once).

    python bench/translate.py            # N = 3000, prints JSON
    python bench/translate.py --quick    # N = 300 (CI)
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

from _common import environment, progress, quiet_logging, stop_embedded


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--values", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    n = 300 if args.quick else args.values
    quiet_logging()
    from mnemovault import MemoryVault

    d = Path(tempfile.mkdtemp(prefix="mv-bench-translate-"))
    try:
        with MemoryVault.open(data_dir=d) as mv:
            who = mv.principal("tb")
            items = [{"content": f"Person {i} wrote to user{i}@example.org", "scope": "s",
                      "entities": [{"kind": "person", "value": f"Name{i} Surname{i}"}]}
                     for i in range(n)]
            for j in range(0, n, 500):
                mv.remember_many(items[j:j + 500], principal=who)
            progress(f"{n} memories, {2 * n} vault values")
            mv.recall("warm up", scope="s", principal=who)
            cases = {
                "recall": lambda: mv.recall("who wrote to user7@example.org?", scope="s", k=5,
                                            principal=who, touch=False),
                "redact_10": lambda: mv.redact([f"turn {i} from Name{i} Surname{i}"
                                                for i in range(10)], principal=who),
            }
            out: dict[str, object] = {"benchmark": "translate", "quick": args.quick,
                                      "vault_values": 2 * n, "environment": environment()}
            for name, fn in cases.items():
                ts = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    fn()
                    ts.append((time.perf_counter() - t) * 1000)
                out[f"{name}_median_ms"] = round(statistics.median(ts), 2)
            print(json.dumps(out, indent=2))
    finally:
        stop_embedded(d)
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
