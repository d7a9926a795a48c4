"""Benchmark: contradicting facts with supersession in valid time (issue 23, item 2) against
the same facts remembered without keys (no supersession), in the same run.

The data set is made here, deterministically from ``--seed``: ``--subjects`` people
(default 200; ``--quick`` 20), one scope each (as a deployment with one scope per end
user), each with three attributes that change over time: where they live (moves), where
they work (jobs) and what they like to drink (preferences). Each attribute takes 3 to 5
successive values (distinct), the first dated in 2019-2020 and each later one 60 to 400
days after the one before. Each statement is one memory ("The user moved to Lisbon."),
its event time its ``valid_from`` and ``created_at``. A share of the subjects
(``--shuffled``, default 0.2) has its statements arrive in a random order (out-of-order
arrivals: :mod:`mnemovault.memories.valid_time`, rule 2); the others in date order.

Two tenants hold the same statements:

* ``keyed``: each attribute is a ``key`` (``city``, ``employer``, ``drink``): a later
  statement supersedes the current one, an earlier one becomes a historical version;
* ``unkeyed``: no key, so every statement stays live (recall ranks them by meaning, words
  and recency: the ``created_at`` is the event time).

Questions, per subject and attribute, one phrasing each (no value in it):

* ``now``: recall (k = 5) in the subject's scope; correct when the top hit states the
  current (latest) value;
* ``as_of``: recall with ``as_of`` a time drawn uniformly between the attribute's first
  statement and now; correct when the top hit states the value true then. The unkeyed
  tenant is asked with the same ``as_of`` (its filter keeps the statements made by then).

Reported for each tenant and question kind: ``accuracy@1`` (share of questions whose top
hit is the right value), ``stale_share@5`` (stale statements of the asked attribute, i.e.
its other values, as a share of all hits in the top 5), ``questions_with_stale@5`` (share
of questions with at least one stale statement of the attribute in the top 5), and recall
latency (median and p95, ms). JSON on stdout and in ``bench/results/contradictions.json``
(``"quick"`` says which size); progress on stderr.

Usage::

    python bench/contradictions.py            # 200 subjects x 3 attributes x 3-5 changes
    python bench/contradictions.py --quick    # CI: 20 subjects (< 60 s)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, progress, quiet_logging, stop_embedded

from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

# attribute: (statement template, question, values)
ATTRIBUTES: dict[str, tuple[str, str, list[str]]] = {
    "city": ("The user moved to {v} and lives there now.",
             "Which city does the user live in?",
             ["Lisbon", "Oslo", "Nairobi", "Lima", "Perth", "Kyoto", "Quebec", "Cairo",
              "Tallinn", "Seville", "Hanoi", "Denver", "Porto", "Krakow", "Bergen"]),
    "employer": ("The user started a new job at {v}.",
                 "Where does the user work?",
                 ["Northwind Traders", "Globex", "Initech", "Umbrella Labs", "Stark Foundry",
                  "Wayne Logistics", "Acme Bakery", "Hooli", "Vandelay Imports",
                  "Soylent Foods", "Cyberdyne Clinics", "Tyrell Freight"]),
    "drink": ("These days the user's favourite drink is {v}.",
              "What does the user like to drink?",
              ["green tea", "espresso", "oat latte", "sparkling water", "rooibos",
               "hot chocolate", "matcha", "lemonade", "chai", "cold brew", "kombucha"]),
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Statement:
    subject: str
    attribute: str
    value: str
    at: datetime
    text: str


def generate(n: int, shuffled: float, rng: random.Random
             ) -> tuple[dict[str, list[Statement]], set[str]]:
    """Per subject its statements in arrival order; the subjects whose arrive shuffled."""
    out: dict[str, list[Statement]] = {}
    mixed: set[str] = set()
    for i in range(n):
        subject = f"user{i:04d}"
        items: list[Statement] = []
        for attr, (template, _, values) in ATTRIBUTES.items():
            at = datetime(2019, 1, 1, tzinfo=UTC) + timedelta(days=rng.randint(0, 700))
            for v in rng.sample(values, rng.randint(3, 5)):
                items.append(Statement(subject, attr, v, at, template.format(v=v)))
                at += timedelta(days=rng.randint(60, 400))
        if rng.random() < shuffled:
            rng.shuffle(items)
            mixed.add(subject)
        else:
            items.sort(key=lambda s: s.at)
        out[subject] = items
    return out, mixed


def true_at(items: list[Statement], attr: str, at: datetime) -> Statement | None:
    """The statement of ``attr`` valid at ``at`` (the latest one dated at or before it)."""
    past = [s for s in items if s.attribute == attr and s.at <= at]
    return max(past, key=lambda s: s.at) if past else None


def load(vault: MemoryVault, tenant: str, data: dict[str, list[Statement]], *,
         keyed: bool) -> None:
    who = vault.principal(tenant)
    for n, (subject, items) in enumerate(data.items()):
        vault.remember_many([
            {"content": s.text, "scope": subject, "subject": subject, "type": "fact",
             "created_at": s.at, **({"key": s.attribute, "valid_from": s.at} if keyed else {})}
            for s in items], principal=who)
        if n % 50 == 49:
            progress(f"[contradictions] {tenant}: {n + 1} subjects remembered")


def ask(vault: MemoryVault, tenant: str, data: dict[str, list[Statement]],
        questions: list[tuple[str, str, datetime | None]]) -> list[dict[str, Any]]:
    """One outcome per question (subject, attribute, as_of or None for now): whether the
    top hit is the value true then, how many stale statements of the attribute are in the
    top 5, how many hits, the latency."""
    who = vault.principal(tenant)
    out = []
    for subject, attr, as_of in questions:
        items = data[subject]
        truth = true_at(items, attr, as_of or NOW)
        assert truth is not None
        others = {s.text for s in items if s.attribute == attr and s.text != truth.text}
        t = time.perf_counter()
        hits = vault.recall(ATTRIBUTES[attr][1], scope=subject, k=5, principal=who,
                            as_of=as_of, touch=False)
        ms = (time.perf_counter() - t) * 1000
        texts = [h.memory.content for h in hits]
        out.append({"subject": subject, "right": bool(texts) and texts[0] == truth.text,
                    "stale": sum(1 for x in texts if x in others), "shown": len(texts),
                    "ms": ms})
    return out


def summary(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy@1, stale share in the top 5, share of questions with a stale hit, latency."""
    q = len(outcomes)
    shown = sum(o["shown"] for o in outcomes)
    ms = sorted(o["ms"] for o in outcomes)
    return {"questions": q, "accuracy@1": round(sum(o["right"] for o in outcomes) / q, 4),
            "stale_share@5": round(sum(o["stale"] for o in outcomes) / shown, 4)
            if shown else 0.0,
            "questions_with_stale@5": round(sum(o["stale"] > 0 for o in outcomes) / q, 4),
            "recall_ms": {"median": round(statistics.median(ms), 2),
                          "p95": round(ms[int(0.95 * (q - 1))], 2)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--subjects", type=int, default=None)
    ap.add_argument("--shuffled", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    quiet_logging()
    n = a.subjects or (20 if a.quick else 200)
    rng = random.Random(a.seed)
    data, mixed = generate(n, a.shuffled, rng)
    questions_now = [(s, attr, None) for s in data for attr in ATTRIBUTES]
    questions_past = []
    for s, items in data.items():
        for attr in ATTRIBUTES:
            first = min(x.at for x in items if x.attribute == attr)
            span = (NOW - first).total_seconds()
            questions_past.append((s, attr, first + timedelta(seconds=rng.uniform(0, span))))
    data_dir = Path(tempfile.mkdtemp(prefix="mv-bench-contra-"))
    started = time.perf_counter()
    results: dict[str, Any] = {}
    opened = warmed = 0.0
    try:
        vault = MemoryVault.open(Settings(data_dir=data_dir, database_url=None,
                                          audit_jsonl=False))
        try:
            opened = round(time.perf_counter() - started, 1)
            vault.ensure_tenant("warmup")  # the embedder's first load, outside the timings
            vault.remember("warm up", scope="warmup", principal=vault.principal("warmup"))
            warmed = round(time.perf_counter() - started, 1)
            progress(f"[contradictions] opened in {opened} s, warm in {warmed} s")
            for tenant, keyed in (("keyed", True), ("unkeyed", False)):
                vault.ensure_tenant(tenant)
                t = time.perf_counter()
                load(vault, tenant, data, keyed=keyed)
                loaded = round(time.perf_counter() - t, 1)
                now, past = (ask(vault, tenant, data, questions_now),
                             ask(vault, tenant, data, questions_past))
                results[tenant] = {"load_seconds": loaded, "now": summary(now),
                                   "as_of": summary(past)}
                if mixed:  # the subjects whose statements arrived out of order, alone
                    results[tenant]["out_of_order_subjects"] = {
                        "subjects": len(mixed),
                        "now": summary([o for o in now if o["subject"] in mixed]),
                        "as_of": summary([o for o in past if o["subject"] in mixed])}
                progress(f"[contradictions] {tenant}: {results[tenant]}")
        finally:
            vault.close()
            stop_embedded(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    statements = sum(len(v) for v in data.values())
    report = {
        "benchmark": "contradictions", "quick": a.quick,
        "command": "python bench/contradictions.py" + (" --quick" if a.quick else ""),
        "set": {"subjects": n, "attributes": list(ATTRIBUTES), "statements": statements,
                "changes_per_attribute": "3-5", "shuffled_subjects": len(mixed),
                "seed": a.seed, "k": 5},
        "results": results, "startup_seconds": {"open": opened, "warm": warmed},
        "embedder": vault.settings.embedder,
        "seconds": round(time.perf_counter() - started, 1), "environment": environment(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    out = a.out or Path(__file__).resolve().parent / "results" / "contradictions.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
