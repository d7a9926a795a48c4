#!/usr/bin/env python
"""Recall's second step (``recall_multihop``, :mod:`mnemovault.recall.multihop`): off vs
on, per LoCoMo category and on the other sets, with leave-one-set-out discipline.

The sets and their loaders are ``bench/recall_eval.py``'s (LoCoMo turns with their session
``run_id``, MADial-Bench with its two query protocols, the seeded preference set), imported
once into one embedded vault (``--data-dir`` keeps it for the next run). The metrics are
``bench/locomo_recall.py``'s (turn and session recall@k per LoCoMo category) and
``recall_eval.py``'s ``recall_at`` for the other sets. Every figure is a live
``MemoryVault.recall`` (k = 20, ``touch=False``), with the setting off and on alternating
per query (so the latency comparison sees the same load).

Tuning: the grid of hits x terms x weight is scored on LoCoMo's first conversation only
(``conv-26``: turn recall@10 over categories 1-5, ties by category 1); the best point is
then reported, off vs on, on LoCoMo conversations 2-10 (per category), MADial-Bench and
the preference set, none of which chose it.

Usage::

    python bench/multihop.py --data-dir /tmp/mv-mhop --out bench/results/multihop.json
    python bench/multihop.py --quick    # a small grid, 60 held-out LoCoMo questions, and
                                        # only the scopes its questions read
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_eval as rev
from _common import environment, quiet_logging, stop_embedded
from locomo_recall import CATEGORY_NAMES, GROUPS, KS, normalise_questions, session_of

GRID_HITS = (3, 5)
GRID_TERMS = (4, 8)
GRID_WEIGHTS = (0.35, 0.5)
TUNE_SCOPE = "conv-26"  # LoCoMo's first conversation

_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def locomo_scores(qs: list[tuple[rev.Query, int]], ranked: list[list[str]]) -> dict[str, Any]:
    """Turn and session recall@k per LoCoMo category group (locomo_recall's groups)."""
    out: dict[str, Any] = {}
    for name, cats in GROUPS.items():
        idx = [i for i, (_, c) in enumerate(qs) if c in cats]
        sub = [qs[i][0] for i in idx]
        rk = [ranked[i] for i in idx]
        out[name] = {"turn": rev.recall_at(sub, rk), "session": rev.recall_at(sub, rk,
                                                                               session_of)}
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    quiet_logging()
    import tempfile

    import numpy as np

    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

    corpus = rev.Corpus()
    rev.load_locomo(rev.LOCOMO, False, corpus)
    rev.load_madial(rev.MADIAL, False, corpus)
    rev.load_preferences(False, corpus)
    samples = json.loads(rev.LOCOMO.read_text(encoding="utf-8"))
    questions, _ = normalise_questions(samples)
    loc = [q for q in corpus.queries if q.set == "locomo"]
    assert len(loc) == len(questions)
    category = {id(q): int(x["category"]) for q, x in zip(loc, questions, strict=True)}
    tune = [q for q in loc if q.scope == TUNE_SCOPE]
    held = [q for q in corpus.queries if not (q.set == "locomo" and q.scope == TUNE_SCOPE)]
    grid = list(itertools.product(GRID_HITS, GRID_TERMS, GRID_WEIGHTS))
    if args.quick:
        tune, grid = tune[:60], [(3, 8, 0.35), (5, 16, 0.5)]
        held = [q for q in held if q.set == "locomo"][:60] + [
            q for q in held if q.set != "locomo"][::8]
        # only the scopes those questions read (a quarter of the corpus: CI's time)
        read = {q.scope for q in (*tune, *held)}
        corpus.items = [it for it in corpus.items if it.get("scope") in read]

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="mv-mhop-"))
    base = Settings().model_copy(update={"database_url": None, "data_dir": data_dir})
    vault = MemoryVault.open(base)
    result: dict[str, Any] = {"benchmark": "multihop", "quick": args.quick,
                              "environment": environment(), "tune_scope": TUNE_SCOPE}
    try:
        vault.embedder.embed(["warm up"])
        tenant = vault.settings.tenant
        with vault.db.transaction(tenant) as conn:
            have = conn.execute("SELECT count(*) AS n FROM memories").fetchone()["n"]
        if have == 0:
            t0 = time.perf_counter()
            for i in range(0, len(corpus.items), args.batch):
                vault.remember_many(corpus.items[i: i + args.batch], trigger="import")
                progress(f"imported {min(i + args.batch, len(corpus.items))}"
                         f"/{len(corpus.items)}")
            result["import_seconds"] = round(time.perf_counter() - t0, 1)
        elif have != len(corpus.items):
            raise SystemExit(f"{data_dir} holds {have} memories, expected {len(corpus.items)}")
        off = vault.settings.model_copy(update={"recall_multihop": False})

        def on(h: int, t: int, wt: float) -> Any:
            return off.model_copy(update={"recall_multihop": True, "recall_multihop_hits": h,
                                          "recall_multihop_terms": t,
                                          "recall_multihop_weight": wt})

        def run(qs: list[rev.Query], settings: Any) -> tuple[list[list[str]], list[float]]:
            ranked, secs = [], []
            vault.settings = settings
            for q in qs:
                t = time.perf_counter()
                hits = vault.recall(q.text, scope=q.scope, k=20, touch=False)
                secs.append(time.perf_counter() - t)
                ranked.append([str(h.memory.provenance.get("doc")) for h in hits])
            vault.settings = off
            return ranked, secs

        # -- tuning on conv-26 only ---------------------------------------------------------
        tq = [(q, category[id(q)]) for q in tune]
        r_off, _ = run(tune, off)
        base_s = locomo_scores(tq, r_off)
        rows = [{"setting": "off", "turn@10": base_s["1-5"]["turn"]["@10"],
                 "turn@10_cat1": base_s["1"]["turn"]["@10"]}]
        for h, t, wt in grid:
            r, _ = run(tune, on(h, t, wt))
            s = locomo_scores(tq, r)
            rows.append({"hits": h, "terms": t, "weight": wt,
                         "turn@10": s["1-5"]["turn"]["@10"],
                         "turn@10_cat1": s["1"]["turn"]["@10"],
                         "turn@5": s["1-5"]["turn"]["@5"]})
            progress(f"tune {rows[-1]}")
        best = max(rows[1:], key=lambda r: (r["turn@10"], r["turn@10_cat1"]))
        result["tuning"] = {"questions": len(tune), "grid": rows, "chosen": best,
                            "rule": "max turn recall@10 (categories 1-5) on conv-26, "
                                    "ties by category 1"}
        chosen = on(best["hits"], best["terms"], best["weight"])
        progress(f"chosen {best}")

        # -- held out: off vs on, alternating per query ----------------------------------
        ranked: dict[str, list[list[str]]] = {"off": [], "on": []}
        secs: dict[str, list[float]] = {"off": [], "on": []}
        for i, q in enumerate(held):
            for name, st in (("off", off), ("on", chosen)) if i % 2 == 0 else (
                    ("on", chosen), ("off", off)):
                r, s = run([q], st)
                ranked[name] += r
                secs[name] += s
            if (i + 1) % 250 == 0:
                progress(f"held out {i + 1}/{len(held)}")
        sets: dict[str, Any] = {}
        for name in ("off", "on"):
            by: dict[str, Any] = {}
            lq = [(q, category[id(q)]) for q in held if q.set == "locomo"]
            lr = [r for q, r in zip(held, ranked[name], strict=True) if q.set == "locomo"]
            by["locomo_conv2_10"] = locomo_scores(lq, lr)
            for s in ("madial_dialogue", "madial_last_turn", "preference"):
                sq = [q for q in held if q.set == s]
                sr = [r for q, r in zip(held, ranked[name], strict=True) if q.set == s]
                by[s] = rev.recall_at(sq, sr)
            sets[name] = by
        result["held_out"] = sets
        delta: dict[str, Any] = {}
        for g in GROUPS:
            for lvl in ("turn", "session"):
                delta[f"locomo {lvl} cat {g}"] = {
                    f"@{k}": _minus(sets["on"]["locomo_conv2_10"][g][lvl][f"@{k}"],
                                    sets["off"]["locomo_conv2_10"][g][lvl][f"@{k}"])
                    for k in KS}
        for s in ("madial_dialogue", "madial_last_turn", "preference"):
            delta[s] = {f"@{k}": _minus(sets["on"][s][f"@{k}"], sets["off"][s][f"@{k}"])
                        for k in KS}
        result["delta_on_minus_off"] = delta
        result["losses_over_0.01_at_5_10"] = [
            (name, k, d[k]) for name, d in delta.items() for k in ("@5", "@10")
            if d[k] is not None and d[k] < -0.01]
        result["category_names"] = CATEGORY_NAMES
        ms = {n: np.asarray(v) * 1000 for n, v in secs.items()}
        lq_idx = [i for i, q in enumerate(held) if q.set == "locomo"]
        added = [(secs["on"][i] - secs["off"][i]) * 1000 for i in lq_idx]
        result["latency_ms"] = {
            **{n: {"p50": round(float(np.median(v)), 2),
                   "p95": round(float(np.percentile(v, 95)), 2)} for n, v in ms.items()},
            "locomo_median_added_per_recall": round(statistics.median(added), 2),
            "note": "wall time of one recall, off and on alternating per query"}
        result["chosen_settings"] = {k: getattr(chosen, k) for k in (
            "recall_multihop", "recall_multihop_hits", "recall_multihop_terms",
            "recall_multihop_weight")}
    finally:
        vault.close()
        if args.data_dir is None:
            import shutil

            stop_embedded(data_dir)
            shutil.rmtree(data_dir, ignore_errors=True)
    result["environment"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds_total"] = round(time.perf_counter() - _T0, 1)
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
