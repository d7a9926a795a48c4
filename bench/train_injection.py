#!/usr/bin/env python
"""Train the learned injection detector (:mod:`mnemovault.guard.learned`) and validate it
across collections: reproduces ``src/mnemovault/guard/injection_model.npz`` and its manifest
``injection_model.json``.

Data: the collections of bench/_injection_data.py (local BIPIA, NotInject, LoCoMo, MADial;
fetched sets under ``MNEMOVAULT_INJECTION_DATA``, their sources, commits and licences in
bench/README.md). Only collections whose licence allows it are trained on (``trainable``).

Training: every text is cut into the detector's windows (:func:`mnemovault.guard.learned.
windows`, the same code the product runs); a window of an attack text is an attack (of a
text built by inserting an attack into a benign context: only the windows overlapping the
attack), every other window benign; at most :data:`MAX_WINDOWS` windows a text. Logistic
regression (scikit-learn, L2, ``C``), each collection weighted to the same total, attacks and
benign text to the same total. A text is flagged when any window scores at or above the
threshold.

Validation (``cross_collection``): leave one collection out: for each trainable collection,
train on the other trainable ones and score it; the test-only collections are scored by the
model trained on all trainable ones (it never saw them either). The threshold is the
highest-recall one that keeps the *development* collections (:data:`_injection_data.DEV`)
within 0.01 false positives on benign text and 0.03 on hard benign text; every other
collection is only reported.

Usage::

    python bench/train_injection.py                 # LOCO table, then train and write weights
    python bench/train_injection.py --no-write      # the table only
    python bench/train_injection.py --quick         # small samples (no weights written)

JSON on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from _common import progress
from _injection_data import DEV, Collection, fetched_present, load_all

from mnemovault.guard import learned

MAX_WINDOWS = 8
C_VALUE = 4.0
SEED = 7
GRID = [round(x, 3) for x in np.arange(0.30, 0.991, 0.01)]


def window_label(w: Any, attack: bool, span: tuple[int, int] | None) -> int:
    """A window's training label: 1 for a window of an attack text that holds its attack
    (the whole text when ``span`` is None; else at least 40 characters of the span, or all
    of a shorter one), 0 otherwise."""
    if not attack:
        return 0
    if span is None:
        return 1
    overlap = min(w.end, span[1]) - max(w.start, span[0])
    return 1 if overlap >= min(40, span[1] - span[0]) else 0


class Prepared:
    """A collection's texts as windows: feature rows, labels, and which text each is of."""

    def __init__(self, coll: Collection, rng: random.Random) -> None:
        self.coll = coll
        self.rows: list[list[int]] = []
        self.labels: list[int] = []
        self.text_of: list[int] = []
        self.text_rows: list[list[int]] = []  # every window of every text, for scoring
        attack = coll.role == "attack"
        for n, (text, span) in enumerate(coll.samples):
            ws = learned.windows(text)
            rows = [sorted(w.slots) for w in ws]
            self.text_rows.append(rows)  # type: ignore[arg-type]
            labelled = []
            for w, r in zip(ws, rows, strict=True):
                labelled.append((r, window_label(w, attack, span)))
            if len(labelled) > MAX_WINDOWS:
                pos = [x for x in labelled if x[1]]
                rest = [x for x in labelled if not x[1]]
                keep = pos[:MAX_WINDOWS] + rng.sample(rest, max(0, MAX_WINDOWS - len(pos)))
                labelled = keep[:MAX_WINDOWS] if pos else rng.sample(labelled, MAX_WINDOWS)
            for r, y in labelled:
                self.rows.append(r)
                self.labels.append(y)
                self.text_of.append(n)


def _matrix(rows: list[list[int]]) -> Any:
    from scipy.sparse import csr_matrix

    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    idx = np.fromiter((i for r in rows for i in r), dtype=np.int64, count=int(indptr[-1]))
    data = np.concatenate([np.full(len(r), 1.0 / math.sqrt(len(r)) if r else 0.0,
                                   dtype=np.float32) for r in rows]) if rows else np.zeros(0)
    return csr_matrix((data, idx, indptr), shape=(len(rows), learned.DIMENSION))


def train(parts: Iterable[Prepared], c: float = C_VALUE) -> learned.Model:
    from sklearn.linear_model import LogisticRegression

    parts = list(parts)
    rows: list[list[int]] = []
    ys: list[int] = []
    weights: list[float] = []
    roles = {"attack": [p for p in parts if p.coll.role == "attack"],
             "benign": [p for p in parts if p.coll.role != "attack"]}
    for members in roles.values():
        for p in members:
            n = len(p.rows)
            w = 1.0 / (n * len(members)) if n else 0.0
            rows.extend(p.rows)
            ys.extend(p.labels)
            weights.extend([w] * n)
    sw = np.asarray(weights) * len(rows) / max(1e-12, sum(weights))
    clf = LogisticRegression(C=c, max_iter=2000, solver="liblinear")
    clf.fit(_matrix(rows), np.asarray(ys), sample_weight=sw)
    return learned.Model(clf.coef_[0].astype(np.float32), float(clf.intercept_[0]))


def text_scores(model: learned.Model, p: Prepared) -> list[float]:
    return [max((model.score(frozenset(r)) for r in rows), default=0.0)
            for rows in p.text_rows]


def _group(coll: Collection) -> str:
    if coll.role == "attack":
        return "attack"
    return "hard_benign" if coll.role == "hard_benign" else f"benign_{coll.kind}"


def choose_threshold(scores: dict[str, list[float]], colls: dict[str, Collection],
                     grid: list[float] = GRID) -> float:
    """The threshold of ``grid`` with the highest pooled attack recall on the DEV collections
    that keeps their benign false positives <= 0.01 and hard benign <= 0.03 (each
    collection); the highest of ``grid`` when none does."""
    best, best_recall = grid[-1], -1.0
    for t in grid:
        ok, hit, n = True, 0, 0
        for name in DEV:
            if name not in scores:
                continue
            s = scores[name]
            rate = sum(x >= t for x in s) / max(1, len(s))
            role = colls[name].role
            if role == "attack":
                hit += sum(x >= t for x in s)
                n += len(s)
            elif rate > (0.03 if role == "hard_benign" else 0.01):
                ok = False
        recall = hit / max(1, n)
        if ok and recall > best_recall:
            best, best_recall = t, recall
    return best


def heuristic_flags(colls: Iterable[Collection]) -> dict[str, list[bool]]:
    """Whether the phrase rules flag each text (the product ORs both detectors)."""
    from mnemovault.guard.sanitise import HeuristicDetector

    h = HeuristicDetector()
    return {co.name: [bool(h.detect(t)) for t, _ in co.samples] for co in colls}


def table(scores: dict[str, list[float]], colls: dict[str, Collection], threshold: float,
          heuristic: dict[str, list[bool]] | None = None) -> dict[str, Any]:
    """Per collection: the share the learned detector flags (``learned``), the phrase rules
    (``heuristic``) and either (``both``: the default sanitiser); pooled by group."""
    rows = []
    pooled: dict[str, dict[str, int]] = {}
    for name, s in scores.items():
        c = colls[name]
        h = (heuristic or {}).get(name) or [False] * len(s)
        counts = {"learned": sum(x >= threshold for x in s), "heuristic": sum(h),
                  "both": sum(x >= threshold or y for x, y in zip(s, h, strict=True)),
                  "n": len(s)}
        rows.append({"collection": name, "role": c.role, "kind": c.kind, "n": len(s),
                     **{k: round(counts[k] / max(1, len(s)), 4)
                        for k in ("learned", "heuristic", "both")},
                     "trained_on_others": c.trainable, "dev": name in DEV})
        for key in (_group(c), f"{_group(c)}_report" if name not in DEV else None):
            if key:
                got = pooled.setdefault(key, {"n": 0, "learned": 0, "heuristic": 0, "both": 0})
                for k, v in counts.items():
                    got[k] += v
    summary: dict[str, Any] = {
        k: {"n": v["n"], **{m: round(v[m] / max(1, v["n"]), 4)
                            for m in ("learned", "heuristic", "both")}}
        for k, v in sorted(pooled.items())}
    attack_rows = [r for r in rows if r["role"] == "attack"]
    for m in ("learned", "heuristic", "both"):
        summary[f"attack_min_collection_{m}"] = min((r[m] for r in attack_rows), default=None)
    return {"threshold": threshold, "collections": rows, "summary": summary}


def cross_collection(colls: list[Collection], seed: int = SEED, c: float = C_VALUE,
                     threshold: float | None = None) -> dict[str, Any]:
    """Leave-one-collection-out scores and the table (module docstring)."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    prepared = {co.name: Prepared(co, rng) for co in colls}
    progress(f"windows of {len(colls)} collections: {time.perf_counter() - t0:.1f} s")
    by_name = {co.name: co for co in colls}
    trainable = [n for n, co in by_name.items() if co.trainable]
    scores: dict[str, list[float]] = {}
    for name in trainable:
        t1 = time.perf_counter()
        model = train((prepared[n] for n in trainable if n != name), c)
        scores[name] = text_scores(model, prepared[name])
        progress(f"  without {name}: {time.perf_counter() - t1:.1f} s")
    full = train((prepared[n] for n in trainable), c)
    for name, co in by_name.items():
        if not co.trainable:
            scores[name] = text_scores(full, prepared[name])
    chosen = threshold if threshold is not None else choose_threshold(scores, by_name)
    out = table(scores, by_name, chosen, heuristic_flags(colls))
    out["threshold_chosen_on"] = list(DEV) if threshold is None else "given"
    out["at_thresholds"] = {str(t): {n: round(sum(x >= t for x in s) / max(1, len(s)), 3)
                                     for n, s in scores.items()}
                            for t in (0.5, 0.6, 0.7, 0.8, 0.9)}
    out["C"] = c
    out["seed"] = seed
    out["_full_model"] = full
    out["_prepared"] = prepared
    return out


def write_weights(model: learned.Model, manifest: dict[str, Any]) -> None:
    np.savez_compressed(learned.WEIGHTS, weights=model.weights.astype(np.float32),
                        bias=np.float64(model.bias))
    manifest["weights_sha256"] = hashlib.sha256(learned.WEIGHTS.read_bytes()).hexdigest()
    learned.MANIFEST.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n",
                                encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="60 texts a collection; no weights")
    ap.add_argument("--no-write", action="store_true", help="do not write the weights")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--C", type=float, default=C_VALUE)
    args = ap.parse_args(argv)
    if not fetched_present():
        print(json.dumps({"skipped": True, "reason": "fetched data sets not found "
                          "(MNEMOVAULT_INJECTION_DATA; bench/README.md)"}))
        return 0 if args.quick else 2
    colls = load_all(args.seed)
    if args.quick:
        rng = random.Random(args.seed)
        for co in colls:
            co.samples = rng.sample(co.samples, min(60, len(co.samples)))
    result = cross_collection(colls, args.seed, args.C)
    full = result.pop("_full_model")
    result.pop("_prepared")
    sources = [{"collection": co.name, "role": co.role, "kind": co.kind,
                "trainable": co.trainable, "texts": len(co.samples), "source": co.source,
                "licence": co.licence} for co in colls]
    manifest = {
        "detector": learned.NAME, "family": learned.FAMILY,
        "features_version": learned.FEATURES_VERSION, "dimension": learned.DIMENSION,
        "window": learned.WINDOW, "model": "logistic regression (scikit-learn liblinear, L2)",
        "C": args.C, "seed": args.seed, "max_windows_per_text": MAX_WINDOWS,
        "trained_on": [co.name for co in colls if co.trainable],
        "date": dt.date.today().isoformat(), "data": sources,
        "threshold": result["threshold"], "threshold_chosen_on": result["threshold_chosen_on"],
        "cross_collection": result,
        "reproduce": "python bench/train_injection.py",
    }
    if not (args.quick or args.no_write):
        write_weights(full, manifest)
        progress(f"wrote {learned.WEIGHTS} and {learned.MANIFEST}")
    print(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
