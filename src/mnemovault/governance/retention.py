"""Retention (SPEC section 10): a score from recency, use and pin; a job that archives the
memories scoring below a threshold and, optionally, forgets the ones unused for too long.

Score of a memory idle for ``t`` days (since its last access, or its creation if never
recalled) with ``n`` accesses::

    score = 2^(-t / half_life) * (w_recency + w_access * min(1, ln(1 + n) / ln(1 + sat)))

so it halves every ``half_life`` days of disuse, and use stretches its life (a memory
recalled ``sat`` times or more keeps ``(w_recency + w_access) / w_recency`` times the score
of a never-used one). Pinned memories score infinity: never archived, never deleted.
A memory is archived when it has been idle ``min_idle_days`` or more and scores below
``archive_below``. Archived memories are left out of recall, still listed (flagged) in
forget previews, and come back by ``PIN`` or an explicit recall with ``include_archived``.

The job runs per tenant in one transaction with one ``RETENTION`` audit row (counts and the
first ten ids); deletions go through the forget path with trigger ``retention``.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from mnemovault.config import Settings
from mnemovault.store import memories as memory_store
from mnemovault.store.db import tenant_of


@dataclass(frozen=True)
class Policy:
    """Retention thresholds (from :class:`~mnemovault.config.Settings`)."""

    half_life_days: float = 30.0
    recency_weight: float = 0.6
    access_weight: float = 0.4
    access_saturation: int = 10
    archive_below: float = 0.15
    min_idle_days: float = 14.0
    delete_unused_days: float | None = None

    @classmethod
    def from_settings(cls, s: Settings) -> Policy:
        return cls(half_life_days=s.retention_half_life_days,
                   recency_weight=s.retention_recency_weight,
                   access_weight=s.retention_access_weight,
                   access_saturation=s.retention_access_saturation,
                   archive_below=s.retention_archive_below,
                   min_idle_days=s.retention_min_idle_days,
                   delete_unused_days=s.retention_delete_unused_days)


def score(idle_days: float, access_count: int, pinned: bool, policy: Policy) -> float:
    """The retention score (module docstring); ``inf`` for a pinned memory."""
    if pinned:
        return math.inf
    use = min(1.0, math.log1p(max(access_count, 0)) / math.log1p(policy.access_saturation))
    decay = math.pow(2.0, max(-1000.0, -max(idle_days, 0.0) / policy.half_life_days))
    return decay * (policy.recency_weight + policy.access_weight * use)


def _params(policy: Policy, now: datetime) -> dict[str, Any]:
    return {"now": now, "half_life": policy.half_life_days, "w_r": policy.recency_weight,
            "w_a": policy.access_weight, "sat": policy.access_saturation,
            "below": policy.archive_below, "min_idle": policy.min_idle_days}


def scores(conn: psycopg.Connection[Any], ids: list[uuid.UUID], policy: Policy,
           now: datetime) -> dict[uuid.UUID, float]:
    """The score of each of ``ids`` as the job computes it (``inf`` when pinned)."""
    rows = memory_store.retention_scores(conn, tenant_of(conn), ids, _params(policy, now))
    return {r["id"]: math.inf if r["pinned"] else float(r["score"]) for r in rows}


def archive(conn: psycopg.Connection[Any], policy: Policy, now: datetime, *,
            dry_run: bool = False) -> list[uuid.UUID]:
    """Archive (or with ``dry_run`` only list) the active, unpinned, unarchived memories of
    the transaction's tenant idle ``min_idle_days`` or more that score below
    ``archive_below``. Returns their ids, sorted."""
    return memory_store.archive_below(conn, tenant_of(conn), _params(policy, now),
                                      dry_run=dry_run)


def unused(conn: psycopg.Connection[Any], policy: Policy, now: datetime) -> list[uuid.UUID]:
    """Unpinned memories idle ``delete_unused_days`` or more (none if that is unset)."""
    if policy.delete_unused_days is None:
        return []
    return memory_store.idle_unpinned(conn, tenant_of(conn), now, policy.delete_unused_days)


class Scheduler:
    """Runs ``job`` every ``interval_hours`` in a daemon thread until :meth:`stop` (the
    retention job, and the librarian's with ``name="librarian"``).

    A failing run is logged by ``job`` itself and does not stop the schedule."""

    def __init__(self, job: Callable[[], object], interval_hours: float,
                 name: str = "retention") -> None:
        self._job = job
        self._interval = interval_hours * 3600.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._name = f"mnemovault-{name}"

    def start(self) -> None:
        if self._thread is None and self._interval > 0:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._job()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
