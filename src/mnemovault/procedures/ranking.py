"""Ranking of procedure recall (SPEC sections 5 and 9).

``score = w_sim · similarity + w_track · track_record + w_fresh · freshness`` where

- ``similarity`` is the cosine similarity of the question embeddings (in [-1, 1]);
- ``track_record`` is the posterior mean of the success rate under a Beta(a, b) prior,
  ``(successes + a) / (runs + a + b)`` (Laplace's rule of succession for a = b = 1): a
  procedure with one lucky run (0.67) does not beat one with 48 successes in 50 (0.94),
  and one that keeps failing (2 in 20: 0.14) sinks below an untried one (0.5);
- ``freshness`` is ``2^(-days since last use (or creation) / half_life)``.

The weights and the prior are settings (``MNEMOVAULT_PROCEDURE_*``); with ``w_track =
w_fresh = 0`` the ranking is similarity alone (``bench/procedures.py`` compares both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from mnemovault.config import Settings


@dataclass(frozen=True)
class Weights:
    similarity: float = 1.0
    track: float = 0.3
    freshness: float = 0.05
    half_life_days: float = 30.0
    prior_successes: float = 1.0
    prior_failures: float = 1.0

    @classmethod
    def from_settings(cls, s: Settings) -> Weights:
        return cls(similarity=s.procedure_similarity_weight, track=s.procedure_track_weight,
                   freshness=s.procedure_freshness_weight,
                   half_life_days=s.procedure_freshness_half_life_days,
                   prior_successes=s.procedure_prior_successes,
                   prior_failures=s.procedure_prior_failures)


def track_record(successes: int, runs: int, w: Weights) -> float:
    """The smoothed success rate (module docstring), in (0, 1)."""
    return (successes + w.prior_successes) / (runs + w.prior_successes + w.prior_failures)


def freshness(last: datetime, now: datetime, w: Weights) -> float:
    """``2^(-idle days / half_life)`` (1 for a future or current time)."""
    days = max((now - last).total_seconds() / 86400.0, 0.0)
    return math.pow(2.0, -min(days / w.half_life_days, 1000.0))


def score(similarity: float, track: float, fresh: float, w: Weights) -> float:
    return w.similarity * similarity + w.track * track + w.freshness * fresh
