"""SQL of recall's conversation-context stage: the memories remembered just before and just
after given ones (:mod:`mnemovault.recall.ranking`, ``neighbours``).

"Remembered order" is ``(created_at, id)``: ids are UUIDv7 (:mod:`mnemovault.ids`), so
memories written in one transaction (one ``created_at``) keep the order they were given
in. Each side is an index range scan of ``memories_scope_created`` bounded by the gap.
Facts are no turns of a conversation (a consolidated fact sits at the time of its last
source: :mod:`mnemovault.librarian`), so they neither lend nor borrow here."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg


def adjacent(conn: psycopg.Connection[Any], where: str, params: dict[str, Any],
             anchors: list[tuple[uuid.UUID, datetime]], *, window: int,
             max_gap: timedelta) -> list[dict[str, Any]]:
    """For each ``(id, created_at)`` anchor, up to ``window`` rows on each side of it in
    ``(created_at, id)`` order among the rows of ``where`` (:func:`mnemovault.store.search.
    filter_sql`: the same scope and filters as the recall), created at most ``max_gap``
    before or after it. Rows: ``anchor``, ``id``, ``created_at``, ``pinned`` and
    ``offset`` (-1 the row just before, +1 just after, ...)."""
    if not anchors or window <= 0:
        return []
    sql = f"""
    SELECT a.anchor, n.id, n.created_at, n.pinned, n.side
    FROM unnest(%(nb_ids)s::uuid[], %(nb_ts)s::timestamptz[]) AS a(anchor, ts)
    CROSS JOIN LATERAL (
        (SELECT id, created_at, pinned, -1 AS side
         FROM memories
         WHERE {where} AND type <> 'fact' AND created_at >= a.ts - %(nb_gap)s AND created_at <= a.ts
               AND (created_at, id) < (a.ts, a.anchor)
         ORDER BY created_at DESC, id DESC LIMIT %(nb_window)s)
        UNION ALL
        (SELECT id, created_at, pinned, 1 AS side
         FROM memories
         WHERE {where} AND type <> 'fact' AND created_at <= a.ts + %(nb_gap)s AND created_at >= a.ts
               AND (created_at, id) > (a.ts, a.anchor)
         ORDER BY created_at, id LIMIT %(nb_window)s)
    ) n
    """
    rows = conn.execute(sql, {**params, "nb_ids": [a for a, _ in anchors],
                              "nb_ts": [t for _, t in anchors], "nb_gap": max_gap,
                              "nb_window": int(window)}).fetchall()
    # the offset: the position away from the anchor on its side
    rows.sort(key=lambda r: (r["anchor"], r["side"], r["created_at"], r["id"]))
    out: list[dict[str, Any]] = []
    for anchor in dict.fromkeys(r["anchor"] for r in rows):
        mine = [r for r in rows if r["anchor"] == anchor]
        before = [r for r in mine if r["side"] < 0][::-1]  # nearest first
        after = [r for r in mine if r["side"] > 0]
        for side, group in ((-1, before), (1, after)):
            for i, r in enumerate(group, start=1):
                out.append({"anchor": anchor, "id": r["id"], "created_at": r["created_at"],
                            "pinned": r["pinned"], "offset": side * i})
    return out
