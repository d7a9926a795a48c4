#!/usr/bin/env python
"""Cost of an embedding injection detector (issue 20 study; not a benchmark: .ci/run skips
``_*.py``): embedding every detector window of a text at 1 torch thread (the traced
``LocalEmbedder`` and eager), the write path's own embedding of the whole text, and a
logistic regression / 256-unit MLP over the vectors, in ms per KB of text (6 texts a
collection of bench/_injection_data.py). Usage: ``python bench/_injection_embed_cost.py``.
"""

from __future__ import annotations

import os
import random
import time

import numpy as np
from _injection_data import load_all

from mnemovault.embed.local import LocalEmbedder
from mnemovault.guard import learned

os.environ["HF_HUB_OFFLINE"] = "1"


def main() -> None:
    rng = random.Random(3)
    texts = []
    for co in load_all(7):
        texts += [t for t, _ in rng.sample(co.samples, min(6, len(co.samples)))]
    rng.shuffle(texts)
    kb = sum(len(t.encode()) for t in texts) / 1024
    wins = [[t[w.start:w.end] for w in learned.windows(t)] for t in texts]
    nwin = sum(map(len, wins))
    wkb = sum(len(x.encode()) for ws in wins for x in ws) / 1024
    print(f"{len(texts)} texts, {kb:.0f} KB, {nwin} windows, {wkb:.0f} KB of windows "
          f"({wkb / kb:.2f}x)", flush=True)
    e = LocalEmbedder(threads=1)
    for _ in range(10):
        e.embed(["warm up", "the traced graph"])  # past TRACE_AFTER_CALLS
    print("traced:", bool(e._traced), flush=True)
    for mode in ("traced", "eager"):
        if mode == "eager":
            e._traced = False
        t0 = time.perf_counter()
        for ws in wins:
            e.embed(ws)
        d = time.perf_counter() - t0
        print(f"embed every window, one text a call, {mode}: {d * 1000 / kb:.1f} ms/KB of text",
              flush=True)
    e._traced, e._calls = None, 0
    for _ in range(10):
        e.embed(["warm up"])
    t0 = time.perf_counter()
    for t in texts:
        e.embed([t])
    d = time.perf_counter() - t0
    print(f"write path's embedding (whole text, first 256 tokens), traced: "
          f"{d * 1000 / kb:.1f} ms/KB", flush=True)
    g = np.random.default_rng(0)
    x = g.standard_normal((nwin, 384)).astype(np.float32)
    w = g.standard_normal(384).astype(np.float32)
    w1 = g.standard_normal((384, 256)).astype(np.float32)
    w2 = g.standard_normal(256).astype(np.float32)
    mu, sd = x.mean(0), x.std(0)
    bounds = np.cumsum([0] + [len(ws) for ws in wins])

    def lr(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(((v - mu) / sd) @ w)))

    def mlp(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(np.maximum(((v - mu) / sd) @ w1, 0) @ w2)))

    for name, f in (("lr", lr), ("mlp256", mlp)):
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for i in range(len(wins)):
                f(x[bounds[i]:bounds[i + 1]]).max()
            best = min(best, time.perf_counter() - t0)
        print(f"classifier {name} on the windows' vectors, one text a call: "
              f"{best * 1000 / kb:.4f} ms/KB", flush=True)
    print("loadavg", os.getloadavg())


if __name__ == "__main__":
    main()
