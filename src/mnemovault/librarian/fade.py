"""Rank and fading of consolidated facts (issue 23, items 1 and 3).

A librarian fact carries a stored ``rank_boost`` that recall adds to its fused score
(:func:`mnemovault.recall.ranking.fuse`): ``librarian_fact_boost`` when written, so it
ranks above the episodes it was made from. A fact that nothing has recalled or woken for
``librarian_fade_after_days`` (idle since its last access, recorded by recall and wake, else
since it was written: the retention job's idle time, :mod:`mnemovault.governance.
retention`) fades: its boost becomes ``librarian_faded_boost`` (below zero: it now ranks
under its sources). Nothing else is special about it: the retention job scores and
archives it like any memory, and a recall or wake of it before that brings its rank back
at the next run. Pinned facts never fade (and retention never archives them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from mnemovault.config import Settings
from mnemovault.store import librarian as store


@dataclass
class Faded:
    """What one pass changed (or, for a dry run, would change)."""

    faded: list[Any] = field(default_factory=list)
    restored: list[Any] = field(default_factory=list)


def apply(conn: psycopg.Connection[Any], tenant: str, settings: Settings, now: datetime,
          *, scope: str | None = None, dry_run: bool = False) -> Faded:
    """Fade the idle facts and restore the rank of the others (module docstring), in the
    caller's transaction; with ``dry_run`` only report."""
    out = Faded()
    high, low = settings.librarian_fact_boost, settings.librarian_faded_boost
    for r in store.fade_plan(conn, tenant, now, settings.librarian_fade_after_days, scope):
        target = low if (r["idle"] and not r["pinned"]) else high
        if abs(float(r["rank_boost"]) - target) < 1e-6:
            continue
        (out.faded if target == low else out.restored).append(r["id"])
    if not dry_run:
        store.set_boost(conn, tenant, out.faded, low)
        store.set_boost(conn, tenant, out.restored, high)
    return out
