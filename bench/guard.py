"""Benchmark: the capture guard's added time per capture (SPEC section 8, issue 12).

Three measurements, in one run, on one fresh embedded PostgreSQL:

* ``guard_only``: :func:`mnemovault.guard.capture.check_items` alone on the fields of one
  capture (content, scope, tags, provenance), with the default detectors (``secrets``,
  ``government_ids``), for short texts (the texts of the set, a chat turn each) and for long
  ones (the same texts joined to about 10,000 characters). Milliseconds, median and p95.
* ``remember``: :meth:`MemoryVault.remember` of the same short texts with the default guard
  and with the guard off (``capture_detectors=[]``), interleaved so drift in the machine's
  load hits both alike (in ABBA order, so neither mode always runs second): median and p95
  of each, the difference of the medians and the ratio. The embedder is a deterministic
  random-vector stand-in, so the capture's own cost (pseudonymisation, insert, audit) is
  what the guard is compared with; a real model adds its embedding time to both.
* ``false_positives``: how many of the texts the built-in detectors flag at all (any
  severity), and how many they would refuse at the default threshold (High): the texts
  are benign, so every finding is a false positive.

Texts: the turns of LoCoMo (``../shared/datasets/locomo/locomo10.json``) when present;
otherwise (and always with ``--synthetic``) generated sentences, so the bench never needs
the data set (a ``--quick`` run without it uses the synthetic texts and says so).

Usage::

    python bench/guard.py              # 2,000 captures per mode, 2,000 guard-only scans
    python bench/guard.py --quick      # 150 per mode (CI, well under 30 s)

JSON on stdout and in ``bench/results/guard.json`` (``guard_quick.json`` for ``--quick``);
progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RandomEmbedder, environment, quiet_logging, stop_embedded

from mnemovault.config import Settings
from mnemovault.guard import capture
from mnemovault.guard.detectors import BUILTIN, Severity
from mnemovault.vault import MemoryVault

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo" / "locomo10.json"


def say(msg: str) -> None:
    print(f"[guard-bench] {msg}", file=sys.stderr, flush=True)


def locomo_texts() -> list[str]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    out = []
    for conv in data:
        for name, turns in conv["conversation"].items():
            if name.startswith("session_") and isinstance(turns, list):
                out += [t["text"] for t in turns if t.get("text")]
    return out


def synthetic_texts(n: int, rng: random.Random) -> list[str]:
    who = ["Ada", "Ben", "Chen", "Dara", "Emil", "Fatima", "Goran", "Hana"]
    what = ["moved the team meeting to Thursday at 14:30", "prefers the window seat",
            "ordered 3 boxes of tiles (order 4471-2209)", "booked room 4B for the review",
            "asked for the password reset link again", "shipped build 1.24.3-rc.2",
            "will call +44 20 7946 0958 after lunch", "paid invoice INV-2024-0042",
            "fixed the API key rotation docs", "reviewed commit 9fceb02d0ae5"]
    return [f"{rng.choice(who)} {rng.choice(what)}; {rng.choice(who)} agreed on "
            f"{rng.randint(1, 28)}/{rng.randint(1, 12)}." for _ in range(n)]


def ms(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"median": round(statistics.median(s), 4),
            "p95": round(s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)], 4), "n": len(s)}


def fields(text: str) -> dict[str, str | None]:
    return {"content": text, "scope": "bench", "subject": None, "key": None,
            "tags": "bench\nguard", "provenance.source": "bench"}


def guard_only(vault: MemoryVault, texts: list[str], n: int) -> dict[str, Any]:
    long_texts = []
    for i in range(len(texts)):
        chunk, j = [], i
        while sum(map(len, chunk)) < 10_000:
            chunk.append(texts[j % len(texts)])
            j += 1
        long_texts.append(" ".join(chunk)[:10_000])
        if len(long_texts) >= max(n // 10, 10):
            break
    out: dict[str, Any] = {}
    for name, sample, count in (("short", texts, n), ("long_10k", long_texts, max(n // 10, 10))):
        for _ in range(5):  # warm-up (regex compile, thread pool)
            capture.check_items(vault.rt, path="bench", items=[fields(sample[0])])
        times = []
        for i in range(count):
            t = time.perf_counter()
            capture.check_items(vault.rt, path="bench", items=[fields(sample[i % len(sample)])])
            times.append((time.perf_counter() - t) * 1000)
        out[name] = ms(times)
        out[name]["mean_chars"] = round(statistics.mean(len(s) for s in sample[:count]), 1)
    return out


def remember_cost(vault: MemoryVault, texts: list[str], n: int) -> dict[str, Any]:
    who = vault.principal("bench-guard")
    base = vault.settings
    off = base.model_copy(update={"capture_detectors": []})
    times: dict[str, list[float]] = {"guard": [], "no_guard": []}
    for i in range(2 * n + 12):
        mode = "guard" if i % 4 in (1, 2) else "no_guard"  # ABBA: no order bias
        vault.settings = base if mode == "guard" else off
        text = texts[(i // 2) % len(texts)]
        t = time.perf_counter()
        vault.remember(text, scope="bench", provenance={"source": "bench",
                                                        "tags": ["bench", "guard"]},
                       principal=who)
        if i >= 12:  # warm-up
            times[mode].append((time.perf_counter() - t) * 1000)
    vault.settings = base
    out: dict[str, Any] = {m: ms(v) for m, v in times.items()}
    out["added_ms_median"] = round(out["guard"]["median"] - out["no_guard"]["median"], 4)
    out["guard_over_no_guard"] = round(out["guard"]["median"] / out["no_guard"]["median"], 3)
    return out


def false_positives(texts: list[str]) -> dict[str, Any]:
    detectors = [f() for f in BUILTIN.values()]
    flagged: dict[str, int] = {}
    any_hit = refused = 0
    for text in texts:
        found = [f for d in detectors for f in d.scan({"content": text})]
        if found:
            any_hit += 1
            refused += any(f.severity >= Severity.HIGH for f in found)
            for f in found:
                flagged[f.kind] = flagged.get(f.kind, 0) + 1
    return {"texts": len(texts), "flagged": any_hit, "refused_at_high": refused,
            "by_kind": flagged}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="150 captures per mode (CI)")
    p.add_argument("--captures", type=int, default=None, help="captures per mode")
    p.add_argument("--synthetic", action="store_true", help="generated texts, not LoCoMo")
    p.add_argument("--out", type=Path, help="where to write the JSON")
    a = p.parse_args()
    quiet_logging()
    n = a.captures or (150 if a.quick else 2000)
    rng = random.Random(12)
    if not a.synthetic and LOCOMO.is_file():
        texts, source = locomo_texts(), "locomo"
    else:
        texts, source = synthetic_texts(max(n, 500), rng), "synthetic"
    rng.shuffle(texts)
    say(f"{len(texts)} texts ({source}); {n} captures per mode")
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-guard-"))
    data_dir.chmod(0o755)
    started = time.perf_counter()
    vault = MemoryVault.open(Settings(data_dir=data_dir, audit_jsonl=False),
                             embedder=RandomEmbedder())
    try:
        vault.ensure_tenant("bench-guard")
        say("guard only")
        only = guard_only(vault, texts, n)
        say(json.dumps(only))
        say("remember with and without the guard, interleaved")
        remember = remember_cost(vault, texts, n)
        say(json.dumps(remember))
        fp = false_positives(texts if not a.quick else texts[:2000])
    finally:
        vault.close()
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    report = {"benchmark": "guard", "quick": a.quick, "texts": source,
              "detectors": list(vault.settings.capture_detectors),
              "block_at_severity": vault.settings.block_at_severity,
              "guard_only_ms": only, "remember_ms": remember, "false_positives": fp,
              "seconds": round(time.perf_counter() - started, 1),
              "environment": environment()}
    text = json.dumps(report, indent=2)
    print(text)
    out = a.out or Path(__file__).resolve().parent / "results" / (
        "guard_quick.json" if a.quick else "guard.json")
    out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
