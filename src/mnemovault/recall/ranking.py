"""Score fusion for recall.

Two candidate lists come in: the nearest memories by cosine similarity and the best by
BM25 (:mod:`mnemovault.store.search`). Two ways to fuse them:

- ``convex`` (default): cosine similarities are min-max normalised over the candidates,
  BM25 scores are divided by the best one (BM25's theoretical minimum is 0, so a set of
  near-equal weak matches stays near-equal instead of being stretched to [0, 1]), and a
  memory scores ``w_v · sim' + w_t · bm25'`` (0 for a list it is not in).
  Convex combination of normalised scores (Bruch, Gai and Ingber, "An Analysis of Fusion
  Functions for Hybrid Retrieval", ACM TOIS 2023, found it at least as good as RRF and
  less sensitive to its parameter).
- ``rrf``: weighted reciprocal rank, ``w / (k + rank)`` per list (Cormack, Clarke and
  Büttcher, SIGIR 2009), scaled to [0, 1] by its maximum.

Then a recency term ``w_r · 2^(-age / half_life)`` and a pin bonus are added. The default
weights were chosen on LoCoMo with ``bench/locomo_recall.py`` (see bench/README.md):
turn recall@10 0.665 convex (w_v = 0.4, w_t = 0.6; 0.670 with min-max on both lists, which
is unstable on small scopes) against 0.661 for the best RRF (k = 5, same weights).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal


@dataclass(frozen=True)
class FusionWeights:
    method: Literal["convex", "rrf"] = "convex"
    vector: float = 0.4
    text: float = 0.6
    rrf_k: int = 5
    recency: float = 0.05
    half_life_days: float = 30.0
    pin: float = 0.05


@dataclass
class Fused:
    id: uuid.UUID
    score: float
    vector_rank: int | None
    text_rank: int | None
    similarity: float | None


def _minmax(values: list[float], lo: float | None = None) -> list[float]:
    """Scale to [0, 1] between ``lo`` (default: the minimum) and the maximum."""
    if not values:
        return []
    hi = max(values)
    lo = min(values) if lo is None else lo
    if hi <= lo:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def fuse(
    vector_hits: list[tuple[uuid.UUID, float]],
    text_hits: list[tuple[uuid.UUID, float]],
    meta: dict[uuid.UUID, tuple[datetime, bool]],
    now: datetime,
    w: FusionWeights,
) -> list[Fused]:
    """Fuse the two candidate lists into one ranking, best first (ties broken by id).

    Args:
        vector_hits: (id, cosine similarity), best first.
        text_hits: (id, BM25 score), best first.
        meta: id -> (created_at, pinned) for every candidate.
        now: the reference time for recency.
    """
    out: dict[uuid.UUID, Fused] = {}
    if w.method == "convex":
        vnorm = _minmax([s for _, s in vector_hits])
        tnorm = _minmax([s for _, s in text_hits], lo=0.0)
        vparts = [w.vector * x for x in vnorm]
        tparts = [w.text * x for x in tnorm]
        best = 1.0
    else:
        vparts = [w.vector / (w.rrf_k + r) for r in range(1, len(vector_hits) + 1)]
        tparts = [w.text / (w.rrf_k + r) for r in range(1, len(text_hits) + 1)]
        best = (w.vector + w.text) / (w.rrf_k + 1) or 1.0
    for rank, ((mid, sim), part) in enumerate(zip(vector_hits, vparts, strict=True), start=1):
        out[mid] = Fused(mid, part, rank, None, sim)
    for rank, ((mid, _), part) in enumerate(zip(text_hits, tparts, strict=True), start=1):
        f = out.get(mid)
        if f is None:
            out[mid] = Fused(mid, part, None, rank, None)
        else:
            f.score += part
            f.text_rank = rank
    for f in out.values():
        f.score /= best
        created, pinned = meta.get(f.id, (now, False))
        age_days = max((now - created).total_seconds() / 86400.0, 0.0)
        if w.recency:
            f.score += w.recency * math.pow(2.0, -age_days / w.half_life_days)
        if pinned:
            f.score += w.pin
    return sorted(out.values(), key=lambda f: (-f.score, f.id))
