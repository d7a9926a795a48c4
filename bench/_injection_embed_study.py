#!/usr/bin/env python
"""Study for issue 20 (not a benchmark: .ci/run skips ``_*.py``): a classifier over the
all-MiniLM-L6-v2 sentence embedding of each window, instead of or beside the hashed
features of :mod:`mnemovault.guard.learned`, under bench/train_injection.py's protocol.

Same collections (bench/_injection_data.py, seed 7), same windows
(:func:`mnemovault.guard.learned.windows`), same labels and the same at most
``MAX_WINDOWS`` training windows a text (drawn with the same random stream), the same
weighting (each collection to the same total within attacks and within benign text), the same
leave-one-collection-out scores (each trainable collection scored by a model trained on the
other trainable ones; the test-only collections by the model trained on all of them) and the
same threshold rule (the lowest threshold, i.e. highest pooled recall, keeping the
development collections' benign false positives <= 0.01 and hard benign <= 0.03; the grid
of train_injection.py extended by 0.991-0.999 so a model whose scores crowd near 1 is
not cut off at 0.99). A text is flagged when any of its windows scores at or above it.

Variants (``--variants``):

- ``hashed``: the shipped detector's model (train_injection.train), recomputed here;
- ``emb_lr``: logistic regression (lbfgs, standardised embedding, ``--emb-C``);
- ``emb_hashed``: logistic regression (liblinear, C=4) over the hashed features and the unit
  embedding times ``--alpha``, side by side;
- ``emb_mlp``: an MLP (scikit-learn, one hidden layer of ``--hidden``, relu, adam,
  L2 ``--mlp-alpha``) over the standardised embedding.

Each is reported alone (``learned``), OR the phrase rules (``either``, the default
sanitiser's shape), and the phrase rules alone.

The embedding of every window text used must be cached first (``--cache DIR``:
``texts.json``, the distinct window texts sorted by length, and ``*.npy`` / ``*.idx.npy``
chunks: vectors and their rows), by bench/_injection_embed_cache.py with the same ``--cap``.

Usage::

    python bench/_injection_embed_cache.py --dir /tmp/emb --cap 100
    python bench/_injection_embed_study.py --cache /tmp/emb --cap 100 --variants hashed,emb_lr

JSON on stdout (and ``--out``), a markdown summary on stderr.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import progress
from _injection_data import DEV, Collection, load_all
from train_injection import (
    C_VALUE,
    GRID,
    MAX_WINDOWS,
    SEED,
    _matrix,
    heuristic_flags,
    table,
    window_label,
)
from train_injection import choose_threshold as choose_on_dev
from train_injection import train as train_hashed

from mnemovault.guard import learned

FINE_GRID = GRID + [round(0.99 + i / 1000, 3) for i in range(1, 10)]


class Prep:
    """train_injection.Prepared, keeping for every window of every text its embedding row
    and its feature slots, and which of them are the training windows."""

    def __init__(self, coll: Collection, rng: random.Random, key: dict[str, int]) -> None:
        self.coll = coll
        self.win_emb: list[int] = []  # every window: its row in the embedding cache
        self.win_slots: list[list[int]] = []
        self.win_text: list[int] = []
        self.train_idx: list[int] = []  # rows of the above that are trained on
        self.labels: list[int] = []
        attack = coll.role == "attack"
        for n, (text, span) in enumerate(coll.samples):
            ws = learned.windows(text)
            first = len(self.win_emb)
            labelled = []
            for j, w in enumerate(ws):
                self.win_emb.append(key[text[w.start:w.end]])
                self.win_slots.append(sorted(w.slots))
                self.win_text.append(n)
                labelled.append((first + j, window_label(w, attack, span)))
            if len(labelled) > MAX_WINDOWS:  # exactly as train_injection.Prepared
                pos = [x for x in labelled if x[1]]
                rest = [x for x in labelled if not x[1]]
                keep = pos[:MAX_WINDOWS] + rng.sample(rest, max(0, MAX_WINDOWS - len(pos)))
                labelled = keep[:MAX_WINDOWS] if pos else rng.sample(labelled, MAX_WINDOWS)
            for i, y in labelled:
                self.train_idx.append(i)
                self.labels.append(y)
        self.n_texts = len(coll.samples)
        self.win_text_arr = np.asarray(self.win_text, dtype=np.int64)

    # the shape train_injection.train expects
    @property
    def rows(self) -> list[list[int]]:
        return [self.win_slots[i] for i in self.train_idx]


def load_cache(cache: Path) -> tuple[dict[str, int], np.ndarray]:
    texts = json.loads((cache / "texts.json").read_text(encoding="utf-8"))
    emb = np.full((len(texts), 384), np.nan, dtype=np.float32)
    for f in sorted(cache.glob("*.idx.npy")):
        idx = np.load(f)
        emb[idx] = np.load(f.with_name(f.name.replace(".idx.npy", ".npy")))
    return {t: i for i, t in enumerate(texts)}, emb


def _weights(parts: list[Prep]) -> np.ndarray:
    """train_injection.train's sample weights: each collection to the same total within
    attacks and within benign text."""
    out: list[float] = []
    roles = {"attack": [p for p in parts if p.coll.role == "attack"],
             "benign": [p for p in parts if p.coll.role != "attack"]}
    order = roles["attack"] + roles["benign"]
    for p in order:
        members = roles["attack" if p.coll.role == "attack" else "benign"]
        n = len(p.train_idx)
        out.extend([1.0 / (n * len(members)) if n else 0.0] * n)
    w = np.asarray(out)
    return w * len(w) / max(1e-12, w.sum()), order  # type: ignore[return-value]


class Variant:
    name = ""

    def fit(self, parts: list[Prep], emb: np.ndarray) -> Any: ...

    def window_scores(self, model: Any, p: Prep, emb: np.ndarray) -> np.ndarray: ...


class Hashed(Variant):
    name = "hashed"

    def fit(self, parts: list[Prep], emb: np.ndarray) -> Any:
        return train_hashed(parts, C_VALUE)  # type: ignore[arg-type]

    def window_scores(self, model: Any, p: Prep, emb: np.ndarray) -> np.ndarray:
        x = _matrix(p.win_slots)
        z = model.bias + x @ model.weights.astype(np.float64)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


class EmbLR(Variant):
    name = "emb_lr"

    def __init__(self, c: float) -> None:
        self.c = c

    def _xy(self, parts: list[Prep], emb: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
        sw, order = _weights(parts)
        x = np.concatenate([emb[np.asarray(p.win_emb)[p.train_idx]] for p in order])
        y = np.concatenate([np.asarray(p.labels) for p in order])
        return x, y, sw

    def fit(self, parts: list[Prep], emb: np.ndarray) -> Any:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        x, y, sw = self._xy(parts, emb)
        clf = make_pipeline(StandardScaler(),
                            LogisticRegression(C=self.c, max_iter=3000))
        clf.fit(x, y, logisticregression__sample_weight=sw)
        return clf

    def window_scores(self, model: Any, p: Prep, emb: np.ndarray) -> np.ndarray:
        return model.predict_proba(emb[np.asarray(p.win_emb)])[:, 1]


class EmbMLP(EmbLR):
    name = "emb_mlp"

    def __init__(self, hidden: int, alpha: float, seed: int) -> None:
        self.hidden, self.alpha, self.seed = hidden, alpha, seed

    def fit(self, parts: list[Prep], emb: np.ndarray) -> Any:
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        x, y, sw = self._xy(parts, emb)
        clf = make_pipeline(StandardScaler(), MLPClassifier(
            hidden_layer_sizes=(self.hidden,), alpha=self.alpha, max_iter=60,
            batch_size=256, random_state=self.seed))
        clf.fit(x, y, mlpclassifier__sample_weight=sw)
        return clf


class EmbHashed(Variant):
    name = "emb_hashed"

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def _x(self, slots: list[list[int]], e: np.ndarray) -> Any:
        from scipy.sparse import csr_matrix, hstack

        return hstack([_matrix(slots), csr_matrix(self.alpha * e)], format="csr")

    def fit(self, parts: list[Prep], emb: np.ndarray) -> Any:
        from sklearn.linear_model import LogisticRegression

        sw, order = _weights(parts)
        slots = [r for p in order for r in p.rows]
        e = np.concatenate([emb[np.asarray(p.win_emb)[p.train_idx]] for p in order])
        y = np.concatenate([np.asarray(p.labels) for p in order])
        clf = LogisticRegression(C=C_VALUE, max_iter=2000, solver="liblinear")
        clf.fit(self._x(slots, e), y, sample_weight=sw)
        return clf

    def window_scores(self, model: Any, p: Prep, emb: np.ndarray) -> np.ndarray:
        return model.predict_proba(self._x(p.win_slots, emb[np.asarray(p.win_emb)]))[:, 1]


def text_scores(win: np.ndarray, p: Prep) -> list[float]:
    out = np.zeros(p.n_texts)
    np.maximum.at(out, p.win_text_arr, win)
    return [float(x) for x in out]


def choose_threshold(scores: dict[str, list[float]], colls: dict[str, Collection],
                     grid: list[float] = FINE_GRID) -> float:
    """train_injection.choose_threshold over ``grid``."""
    return choose_on_dev(scores, colls, grid)


def loco(variant: Variant, prepared: dict[str, Prep], emb: np.ndarray) -> dict[str, list[float]]:
    trainable = [n for n, p in prepared.items() if p.coll.trainable]
    scores: dict[str, list[float]] = {}
    for name in trainable:
        t1 = time.perf_counter()
        model = variant.fit([prepared[n] for n in trainable if n != name], emb)
        scores[name] = text_scores(variant.window_scores(model, prepared[name], emb),
                                   prepared[name])
        progress(f"  {variant.name} without {name}: {time.perf_counter() - t1:.1f} s")
    full = variant.fit([prepared[n] for n in trainable], emb)
    for name, p in prepared.items():
        if not p.coll.trainable:
            scores[name] = text_scores(variant.window_scores(full, p, emb), p)
    return scores


def summary_line(name: str, res: dict[str, Any]) -> str:
    s = res["summary"]
    ben = [r for r in res["collections"] if r["role"] == "benign"]
    benign = max(r["learned"] for r in ben)
    benign_e = max(r["both"] for r in ben)
    t = f"{res['threshold']}" + ("" if res.get("threshold_feasible", True) else
                                  ", no threshold meets the DEV limits")
    return (f"| {name} (t={t}) | {s['attack']['learned']:.3f} / "
            f"{s['attack_report']['learned']:.3f} (min {s['attack_min_collection_learned']:.3f})"
            f" | {s['hard_benign']['learned']:.3f} / {s['hard_benign_report']['learned']:.3f} | "
            f"{benign:.4f} |\n| {name} OR rules | {s['attack']['both']:.3f} / "
            f"{s['attack_report']['both']:.3f} (min {s['attack_min_collection_both']:.3f}) | "
            f"{s['hard_benign']['both']:.3f} / {s['hard_benign_report']['both']:.3f} | "
            f"{benign_e:.4f} |")


def collection_table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    head = "| collection | role | n | " + " | ".join(
        f"{v} | {v} OR rules" for v in names) + " | rules |"
    lines = [head, "|" + "---|" * (3 + 2 * len(names) + 1)]
    first = results[names[0]]["collections"]
    for i, row in enumerate(first):
        cells = []
        for v in names:
            r = results[v]["collections"][i]
            cells += [f"{r['learned']:.3f}", f"{r['both']:.3f}"]
        dev = " (dev)" if row["dev"] else ("" if row["trained_on_others"] else " (test only)")
        lines.append(f"| {row['collection']}{dev} | {row['role']} | {row['n']} | "
                     + " | ".join(cells) + f" | {row['heuristic']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--variants", default="hashed,emb_lr,emb_hashed")
    ap.add_argument("--emb-C", type=float, default=1.0)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--mlp-alpha", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--cap", type=int, default=0,
                    help="at most this many texts a collection (a fixed draw per collection)")
    ap.add_argument("--scores-dir", type=Path, default=None,
                    help="cache each variant's leave-one-out scores here (pickle)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    key, emb = load_cache(args.cache)
    colls = load_all(args.seed)
    if args.cap:
        for co in colls:
            idx = list(range(len(co.samples)))
            random.Random(f"cap:{co.name}").shuffle(idx)
            co.samples = [co.samples[i] for i in sorted(idx[:args.cap])]
    rng = random.Random(args.seed)
    prepared = {co.name: Prep(co, rng, key) for co in colls}
    by_name = {co.name: co for co in colls}
    used = np.unique(np.concatenate([np.asarray(p.win_emb) for p in prepared.values()]))
    missing = int(np.isnan(emb[used, 0]).sum())
    if missing and args.variants != "hashed":
        raise SystemExit(f"{missing} of {len(used)} window texts are not embedded yet")
    hflags_path = args.scores_dir / f"heuristic_cap{args.cap}.pkl" if args.scores_dir else None
    if hflags_path and hflags_path.exists():
        hflags = pickle.loads(hflags_path.read_bytes())
    else:
        hflags = heuristic_flags(colls)
        if hflags_path:
            hflags_path.write_bytes(pickle.dumps(hflags))
    variants: dict[str, Variant] = {
        "hashed": Hashed(), "emb_lr": EmbLR(args.emb_C), "emb_hashed": EmbHashed(args.alpha),
        "emb_mlp": EmbMLP(args.hidden, args.mlp_alpha, args.seed)}
    results: dict[str, dict[str, Any]] = {}
    for vname in args.variants.split(","):
        v = variants[vname]
        tag = {"emb_lr": f"C{args.emb_C}", "emb_hashed": f"a{args.alpha}",
               "emb_mlp": f"h{args.hidden}a{args.mlp_alpha}"}.get(vname, "")
        path = args.scores_dir / f"{vname}{tag}_cap{args.cap}.pkl" if args.scores_dir else None
        if path and path.exists():
            scores = pickle.loads(path.read_bytes())
        else:
            t0 = time.perf_counter()
            scores = loco(v, prepared, emb)
            progress(f"{vname}: {time.perf_counter() - t0:.0f} s")
            if path:
                path.write_bytes(pickle.dumps(scores))
        order = [co.name for co in colls]
        scores = {n: scores[n] for n in order}
        t = choose_threshold(scores, by_name)
        res = table(scores, by_name, t, hflags)
        # whether t keeps the DEV constraints (else no grid value did: t is the grid's top)
        res["threshold_feasible"] = all(
            sum(x >= t for x in scores[n]) / max(1, len(scores[n]))
            <= (0.03 if by_name[n].role == "hard_benign" else 0.01)
            for n in DEV if n in scores and by_name[n].role != "attack")
        res["at_thresholds"] = {str(x): {n: round(sum(s >= x for s in sc) / max(1, len(sc)), 3)
                                         for n, sc in scores.items()}
                                for x in (0.5, 0.8, 0.9, 0.95, 0.99)}
        results[f"{vname}{tag}"] = res
    out = {"seed": args.seed, "cap": args.cap, "dev": list(DEV), "variants": results}
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    progress("| variant | attacks all / non-dev (weakest) | hard benign all / non-dev | "
             "benign (worst collection) |\n|---|---:|---:|---:|")
    for name, res in results.items():
        progress(summary_line(name, res))
    progress(collection_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
