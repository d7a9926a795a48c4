"""Wake and timeline (SPEC section 5): what an agent asks for when it starts work, and a
subject's memories in time order.

:func:`wake` gathers, for a subject in a scope, the pinned records, the most used facts and
the most recent records (live and unarchived), in that order of priority, and packs them as
one fenced context pack (:func:`mnemovault.chat.context.context_pack`: the rule that records
are data, never instructions, then each record fenced) within a token budget. Tokens are
approximated as ``ceil(characters / 4)`` of each fenced record (the rule counts too): no
model is loaded to count them, and the approximation errs high for English text. Each fact
in the pack counts one access (as a recall hit does), so a fact agents wake with does not
fade (:mod:`mnemovault.librarian.fade`).

:func:`timeline` pages a subject's memories (archived included) by creation time, keyset
paginated on (created_at, id) with an opaque cursor.
"""

from __future__ import annotations

import base64
import math
import uuid
from datetime import datetime

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.auth import Principal
from mnemovault.chat.context import RULE, fence, new_nonce
from mnemovault.errors import ValidationError
from mnemovault.llm.base import ContextRecord
from mnemovault.models import Memory, TimelinePage, WakeState
from mnemovault.pii import service as pii
from mnemovault.runtime import Runtime
from mnemovault.store import memories as store

MIN_BUDGET, MAX_BUDGET, DEFAULT_BUDGET = 100, 32_000, 1_000  # the rule alone is ~60
CANDIDATES = 50  # per kind (pinned, facts, recent)


def tokens(text: str) -> int:
    """The token estimate used for budgets: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


def _within(who: Principal, scope: str, subject: str | None) -> tuple[str, str | None]:
    """The checked scope and subject (a subject-limited key's own by default), for a
    caller with ``memory:read`` within its key's limits."""
    who.require("memory:read")
    scope = checked.name(scope, "scope")
    subject = checked.optional_name(subject, "subject")
    who.check_scope(scope)
    who.check_subject(subject)
    return scope, subject if subject is not None else who.subject


def wake(rt: Runtime, who: Principal, *, scope: str, subject: str | None = None,
         budget: int = DEFAULT_BUDGET) -> WakeState:
    """The waking state of ``subject`` (or of the whole scope) in ``scope`` (module
    docstring). Needs ``memory:read``; placeholders stay placeholders (shredded values
    ``[erased]``): the pack is for a model.

    Raises:
        ValidationError: a bad scope or subject, a budget outside 100..32000.
        Forbidden: missing ``memory:read``, or outside the key's limits.
    """
    scope, subject = _within(who, scope, subject)
    if not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise ValidationError(f"budget: must be an integer in {MIN_BUDGET}..{MAX_BUDGET}",
                              field="budget")
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        found = store.wake_candidates(conn, who.tenant, tr(scope) or scope, tr(subject), CANDIDATES)
        seen: dict[uuid.UUID, Memory] = {}
        why: dict[uuid.UUID, str] = {}
        for kind, reason in (("pinned", "pinned"), ("facts", "fact"), ("recent", "recent")):
            for row in found[kind]:
                if row["id"] not in seen:
                    seen[row["id"]] = Memory.from_row(row)
                    why[row["id"]] = reason
        ordered = visibility.view(rt, conn, who, "recall", tr=tr).render(list(seen.values()))
    nonce = new_nonce()
    used = tokens(RULE)
    chosen: list[Memory] = []
    parts = [RULE]
    for m in ordered:
        block = fence(ContextRecord(id=m.id, type=m.type, date=m.created_at.date().isoformat(),
                                    content=m.content), nonce)
        cost = tokens(block) + 1
        if used + cost > budget:
            continue
        used += cost
        chosen.append(m)
        parts.append(block)
    if not chosen:
        note = "(no records fit the budget)" if ordered else "(no records)"
        if tokens("\n".join([*parts, note])) <= budget:
            parts.append(note)
    pack = "\n".join(parts)
    woken = [m.id for m in chosen if m.type == "fact"]
    if woken:  # a fact that wakes counts as used (the librarian's fading reads this)
        with rt.db.transaction(who.tenant) as conn:
            store.touch(conn, who.tenant, woken)
    return WakeState(scope=scope, subject=subject, budget=budget, tokens=tokens(pack),
                     records=chosen, reasons=[why[m.id] for m in chosen],
                     left_out=len(ordered) - len(chosen), pack=pack)


def _cursor(m: Memory) -> str:
    raw = f"{m.created_at.isoformat()}|{m.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, mid = raw.split("|")
        return datetime.fromisoformat(at), uuid.UUID(mid)
    except (ValueError, UnicodeDecodeError):
        raise ValidationError("cursor: not a cursor this endpoint returned",
                              field="cursor") from None


def timeline(rt: Runtime, who: Principal, *, scope: str, subject: str | None = None,
             since: datetime | None = None, until: datetime | None = None, limit: int = 50,
             cursor: str | None = None) -> TimelinePage:
    """The memories of ``subject`` (or of the scope) in ``scope``, oldest first by creation
    time, within ``[since, until)``; keyset paged (``limit`` 1..100, ``cursor`` from the
    previous page). Needs ``memory:read``.

    Raises:
        ValidationError: bad scope, subject, times (:mod:`mnemovault.validation`), limit or
            cursor.
    """
    scope, subject = _within(who, scope, subject)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    times = {}
    for name, value in (("since", since), ("until", until)):
        try:
            times[name] = checked.check_time(value)
        except ValueError as exc:
            raise ValidationError(f"{name}: {exc}", field=name) from None
    after = _parse_cursor(checked.name(cursor, "cursor", max_len=200)) if cursor else None
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        rows = store.timeline(conn, who.tenant, scope=tr(scope) or scope, subject=tr(subject),
                              since=times["since"], until=times["until"], after=after,
                              limit=limit + 1)
        items = visibility.view(rt, conn, who, "recall", tr=tr).render(
            [Memory.from_row(r) for r in rows[:limit]])
    return TimelinePage(items=items, next_cursor=_cursor(items[-1]) if len(rows) > limit
                        else None)
