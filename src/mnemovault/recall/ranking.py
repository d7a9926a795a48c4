"""Score fusion for recall.

Each candidate list (vector similarity, full-text rank) contributes a weighted reciprocal
rank, ``w / (k + rank)`` (Cormack, Clarke and Büttcher, "Reciprocal Rank Fusion outperforms
Condorcet and individual Rank Learning Methods", SIGIR 2009; k = 60 there). The sum is
scaled to [0, 1] by its maximum possible value, then a recency term
``w_r · 2^(-age / half_life)`` and a small pin bonus are added. Weights are settings; the
defaults were chosen on LoCoMo with ``bench/locomo_recall.py``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class FusionWeights:
    rrf_k: int = 60
    vector: float = 1.0
    text: float = 0.5
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


def fuse(
    vector_hits: list[tuple[uuid.UUID, float]],
    text_hits: list[uuid.UUID],
    meta: dict[uuid.UUID, tuple[datetime, bool]],
    now: datetime,
    w: FusionWeights,
) -> list[Fused]:
    """Fuse ranked lists into one ranking, best first.

    Args:
        vector_hits: (id, cosine similarity), best first.
        text_hits: ids, best full-text rank first.
        meta: id -> (created_at, pinned) for every candidate.
        now: the reference time for recency.
    """
    out: dict[uuid.UUID, Fused] = {}
    for rank, (mid, sim) in enumerate(vector_hits, start=1):
        out[mid] = Fused(mid, w.vector / (w.rrf_k + rank), rank, None, sim)
    for rank, mid in enumerate(text_hits, start=1):
        f = out.get(mid)
        if f is None:
            out[mid] = Fused(mid, w.text / (w.rrf_k + rank), None, rank, None)
        else:
            f.score += w.text / (w.rrf_k + rank)
            f.text_rank = rank
    best = (w.vector + w.text) / (w.rrf_k + 1) or 1.0
    for f in out.values():
        f.score /= best
        created, pinned = meta.get(f.id, (now, False))
        age_days = max((now - created).total_seconds() / 86400.0, 0.0)
        if w.recency:
            f.score += w.recency * math.pow(2.0, -age_days / w.half_life_days)
        if pinned:
            f.score += w.pin
    return sorted(out.values(), key=lambda f: (-f.score, f.id))
