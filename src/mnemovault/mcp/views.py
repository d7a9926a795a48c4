"""``timeline`` and ``wake`` over the facade's existing calls, until :class:`MemoryVault`
has methods of its own for them (the capability is being written in
:mod:`mnemovault.recall.wake`); then these two functions become one-line calls of those
methods, and the tools in :mod:`mnemovault.mcp.server` keep their names and arguments.

Both are read-only: they page through :meth:`MemoryVault.list` (oldest id first, keyset
pagination, access statistics untouched) with the caller's principal, so a key sees here
exactly what it may list over the HTTP API.

* :func:`timeline` is one page of that list, filtered by ``created_at`` client-side.
* :func:`wake` (SPEC section 5, "Wake") scans the list for the subject, picks the pinned
  memories, then the most recent facts, then the most recent other memories, and fences
  them as one context pack (:func:`mnemovault.chat.context.context_pack`: it begins with
  the rule that records are data, never instructions) within a token budget. Tokens are
  estimated as ``ceil(len(text) / 4)`` (about four characters a token for English text
  under the common BPE tokenizers; an estimate, not a count). The scan stops after
  :data:`WAKE_SCAN_LIMIT` memories (``complete`` is false then): the list runs oldest
  first, so a subject with more memories than that needs the facade's own newest-first
  query, which is what this stand-in should be re-pointed to.
"""

from __future__ import annotations

import math
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mnemovault.auth import Principal
from mnemovault.chat.context import RULE, context_pack, fence, new_nonce
from mnemovault.errors import ValidationError
from mnemovault.llm.base import ContextRecord
from mnemovault.models import Memory
from mnemovault.validation import TIME_RULE, check_time

if TYPE_CHECKING:
    from mnemovault import MemoryVault

WAKE_SCAN_LIMIT = 5_000
"""At most this many memories are read to build one wake pack (50 pages of 100)."""
WAKE_KEEP = 200
"""At most this many pinned, fact and other candidates are kept each (newest win)."""
PAGE = 100


def estimate_tokens(text: str) -> int:
    """Approximate tokens of ``text``: ``ceil(len(text) / 4)`` (see the module docstring)."""
    return math.ceil(len(text) / 4)


def memory_item(m: Memory) -> dict[str, Any]:
    """A memory as a tool returns it (JSON-ready; content as stored: placeholders, and
    ``[erased]`` for shredded values)."""
    return {"id": str(m.id), "scope": m.scope, "subject": m.subject, "type": m.type,
            "key": m.key, "version": m.version, "pinned": m.pinned, "archived": m.archived,
            "status": m.status, "created_at": m.created_at.isoformat(), "content": m.content}


def parse_time(value: str | None, field: str) -> datetime | None:
    """An ISO 8601 timestamp (naive: UTC) within the bounds every timestamp obeys.

    Raises:
        ValidationError: names ``field``.
    """
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{field}: must be an ISO 8601 timestamp", field=field) from None
    try:
        return check_time(parsed)
    except ValueError:
        raise ValidationError(f"{field}: {TIME_RULE}", field=field) from None


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def timeline(vault: MemoryVault, who: Principal, *, scope: str, subject: str | None,
             since: str | None, until: str | None, cursor: str | None,
             limit: int) -> dict[str, Any]:
    """One page of memories in storage order (oldest id first), those created in
    ``[since, until)`` kept: ``{"items": [...], "next_cursor": id or None}``. A page may
    hold fewer than ``limit`` items when the filter drops some; pass ``next_cursor`` back
    to go on.

    Raises:
        ValidationError: a bad timestamp, limit or cursor (names the field).
        Forbidden: missing ``memory:read``, or a scope outside the key's limits.
    """
    lo, hi = parse_time(since, "since"), parse_time(until, "until")
    page = vault.list(scope=scope, subject=subject, limit=limit, cursor=cursor,
                      principal=who)
    items = [m for m in page.items
             if (lo is None or _aware(m.created_at) >= lo)
             and (hi is None or _aware(m.created_at) < hi)]
    return {"items": [memory_item(m) for m in items],
            "next_cursor": str(page.next_cursor) if page.next_cursor else None}


def _newest_first(memories: deque[Memory]) -> list[Memory]:
    return sorted(memories, key=lambda m: (_aware(m.created_at), str(m.id)), reverse=True)


def wake(vault: MemoryVault, who: Principal, *, scope: str, subject: str | None,
         budget_tokens: int) -> dict[str, Any]:
    """The waking state (module docstring): ``pack`` (the fenced context pack), ``records``
    (id, type, why it was chosen, created_at, in pack order), ``tokens_estimated``,
    ``budget_tokens``, ``omitted`` (candidates that did not fit), ``scanned`` and
    ``complete`` (false when the scan stopped at :data:`WAKE_SCAN_LIMIT`).

    Raises:
        ValidationError: bad scope or subject (names the field).
        Forbidden: missing ``memory:read``, or a scope outside the key's limits.
    """
    pinned: deque[Memory] = deque(maxlen=WAKE_KEEP)
    facts: deque[Memory] = deque(maxlen=WAKE_KEEP)
    recent: deque[Memory] = deque(maxlen=WAKE_KEEP)
    cursor = None
    scanned = 0
    complete = True
    while True:
        page = vault.list(scope=scope, subject=subject, limit=PAGE, cursor=cursor,
                          principal=who)
        scanned += len(page.items)
        for m in page.items:
            if m.archived or m.status != "active":
                continue
            (pinned if m.pinned else facts if m.type == "fact" else recent).append(m)
        cursor = page.next_cursor
        if cursor is None:
            break
        if scanned >= WAKE_SCAN_LIMIT:
            complete = False
            break
    nonce = new_nonce()
    used = estimate_tokens(RULE)
    chosen: list[ContextRecord] = []
    listed: list[dict[str, Any]] = []
    omitted = 0
    for reason, group in (("pinned", pinned), ("fact", facts), ("recent", recent)):
        for m in _newest_first(group):
            record = ContextRecord(id=m.id, type=m.type,
                                   date=_aware(m.created_at).date().isoformat(),
                                   content=m.content)
            cost = estimate_tokens(fence(record, nonce)) + 1  # and its newline
            if used + cost > budget_tokens:
                omitted += 1
                continue
            used += cost
            chosen.append(record)
            listed.append({"id": str(m.id), "type": m.type, "reason": reason,
                           "created_at": m.created_at.isoformat()})
    pack = context_pack(chosen, nonce)
    return {"pack": pack, "records": listed, "tokens_estimated": estimate_tokens(pack),
            "budget_tokens": budget_tokens, "omitted": omitted, "scanned": scanned,
            "complete": complete}
