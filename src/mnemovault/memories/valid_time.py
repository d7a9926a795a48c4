"""Valid time: when each version of a keyed fact held (issue 23, item 2).

A memory's ``key`` names one attribute (a subject's city, employer, preferred drink); its
versions form the key's **timeline**. Each version carries ``[valid_from, valid_to)``, the
stretch of world time during which it was the true statement (``valid_to`` None: still
true). ``valid_from`` is the version's event time: the ``valid_from`` (or ``occurred_at``)
its writer passed, else its ``created_at``, else the time of the write.

**The rule.** A new version with event time ``t`` is placed on its key's timeline (in the
write transaction, the key's versions locked), among the versions that hold a stretch of
it (``active`` or ``superseded`` with a non-empty interval; pending proposals are placed
when approved, displaced and rejected ones never were true):

1. ``t`` at or after the current (``active``) version's ``valid_from``, or no current
   version: the new one is current, ``[t, None)``; the old current one becomes
   ``superseded`` with ``valid_to = t`` (a contradiction replaces the fact, nothing is
   deleted).
2. ``t`` before the current version's ``valid_from`` (an out-of-order arrival: a
   statement dated before what is known now): the new one is a **historical** version,
   stored ``superseded`` and never the current one. It takes over the stretch from ``t``
   to the start of the next version: the version whose interval contains ``t`` is cut
   short at ``t`` (its end goes to the new one); when no version contains ``t`` (it is
   before the first one), the new one ends where the first one starts.

At equal times the later-recorded statement wins (the older one keeps an empty interval:
it was never the true one on its own). So the intervals of a key never overlap, they
cover the span from the earliest version on without gaps, and exactly one version (the
current one) is open-ended. Version numbers stay in arrival order (``version``,
``parent_id``: the write that recorded them), and the timeline in valid-time order.

Under the review gate a held version is not placed until it is approved
(:mod:`mnemovault.governance.review`): the approved version stays current meanwhile, and
the approval places the new one by the same rule (an approved statement dated before the
current one becomes historical). A displaced or rejected proposal gets an empty interval.

Reads: an ``as_of`` recall (:mod:`mnemovault.visibility`, purpose ``as_of``) sees the
versions whose interval contains the time and the unkeyed memories valid from (created) at
or before it; the default recall sees the current ones only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from mnemovault.errors import ValidationError
from mnemovault.store import memories as store

Conn = psycopg.Connection[Any]

CLOCK_SKEW = timedelta(minutes=5)
"""How far an explicit ``valid_from`` may lie ahead of the server's clock."""


@dataclass(frozen=True)
class Placement:
    """Where a new version goes: ``current`` (it is the key's current version: stored
    ``active``) or historical (stored ``superseded``), its ``valid_to``, the current
    version it ``retired`` (rule 1) and the historical one it ``cut`` short (rule 2)."""

    current: bool
    valid_to: datetime | None
    retired: uuid.UUID | None = None
    cut: uuid.UUID | None = None


def event_time(valid_from: datetime | None, created_at: datetime | None,
               now: datetime) -> datetime:
    """A new version's ``valid_from``: the explicit one, else ``created_at``, else ``now``;
    a ``created_at`` in the future counts as ``now``.

    Raises:
        ValidationError: an explicit ``valid_from`` later than now (beyond
            :data:`CLOCK_SKEW`): a fact cannot have become true after it was written.
    """
    if valid_from is not None:
        if valid_from.astimezone(UTC) > now + CLOCK_SKEW:
            raise ValidationError("valid_from: must not be later than the time of the "
                                  "write", field="valid_from")
        return valid_from
    if created_at is not None:
        return min(created_at, now)
    return now


def place(conn: Conn, tenant: str, scope: str, key: str, valid_from: datetime,
          now: datetime, *, exclude: uuid.UUID | None = None) -> Placement:
    """Place a new version of ``key`` (its stored hash) in ``scope`` with event time
    ``valid_from`` on the key's timeline (module docstring), changing the versions it
    displaces in the caller's transaction: the current one superseded at ``valid_from``
    (rule 1), or the one containing ``valid_from`` cut short (rule 2). ``exclude``: the
    new version's own row when it exists already (an approval)."""
    versions = store.key_timeline(conn, tenant, scope, key, exclude=exclude)
    active = next((v for v in versions if v["status"] == "active"), None)
    if active is None or valid_from >= active["valid_from"]:
        if active is not None:
            store.supersede_version(conn, tenant, active["id"], valid_to=valid_from, now=now)
        return Placement(current=True, valid_to=None,
                         retired=active["id"] if active is not None else None)
    containing = [v for v in versions if v["valid_from"] <= valid_from
                  and (v["valid_to"] is None or valid_from < v["valid_to"])]
    if containing:
        cut = containing[-1]
        store.set_valid_to(conn, tenant, cut["id"], valid_from, now)
        return Placement(current=False, valid_to=cut["valid_to"], cut=cut["id"])
    nxt = min(v["valid_from"] for v in versions if v["valid_from"] > valid_from)
    return Placement(current=False, valid_to=nxt)
