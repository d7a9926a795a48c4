"""SQL of recall's conversation-context stage: the turns just before and just after given
memories in their conversation (:mod:`mnemovault.recall.ranking`, ``neighbours``).

A conversation is the memories of one scope whose provenance names the same ``run_id``
(the clear provenance column holds its keyed hash, :func:`mnemovault.pii.sealing.
run_id_hash`, so equal run ids compare equal without being readable; the column
``conversation`` is generated from it, migration 0021). Turn order within
it is ``(created_at, id)``: ids are UUIDv7 (:mod:`mnemovault.ids`), so turns written in
one transaction (one ``created_at``, as a bulk import gives them) keep the order they were
given in. A memory without a ``run_id`` belongs to no conversation: it neither lends nor
borrows, however close its write time is to another's. Each side is one range scan of the
index ``memories_conversation`` (migration 0021), also bounded by the time gap (a
conversation resumed later is another sitting). Facts are no turns of a conversation (a
consolidated fact sits at the time of its last source: :mod:`mnemovault.librarian`), so
they neither lend nor borrow here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg


def conversations(conn: psycopg.Connection[Any], where: str, params: dict[str, Any],
                  ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """id -> conversation (the keyed hash of its ``run_id``) for those of ``ids`` among the
    rows of ``where`` that are turns of one (no fact, a ``run_id``); one lookup by primary
    key."""
    if not ids:
        return {}
    return {r["id"]: r["conversation"] for r in conn.execute(
        f"SELECT id, conversation FROM memories WHERE {where} AND id = ANY(%(nb_ids)s) "
        "AND type <> 'fact' AND conversation IS NOT NULL",
        {**params, "nb_ids": ids}).fetchall()}


def conversations_of(rows: Iterable[Mapping[str, Any]]) -> dict[uuid.UUID, str]:
    """:func:`conversations` of rows that carry ``id``, ``type`` and ``conversation``
    (recall's candidates, :data:`mnemovault.store.search.CANDIDATE_COLUMNS`): no query."""
    return {r["id"]: r["conversation"] for r in rows
            if r["type"] != "fact" and r["conversation"] is not None}


def adjacent(conn: psycopg.Connection[Any], where: str, params: dict[str, Any],
             anchors: list[tuple[uuid.UUID, datetime]], *, window: int,
             max_gap: timedelta, known: dict[uuid.UUID, str] | None = None
             ) -> list[dict[str, Any]]:
    """For each ``(id, created_at)`` anchor that has a ``run_id``, up to ``window`` rows on
    each side of it in ``(created_at, id)`` order among the rows of ``where``
    (:func:`mnemovault.store.search.filter_sql`: the same scope and filters as the recall)
    with the same ``run_id``, created at most ``max_gap`` before or after it (module
    docstring). Rows: ``anchor``, ``id``, ``created_at``, ``pinned`` and ``offset`` (-1 the
    row just before, +1 just after, ...); none for an anchor without a ``run_id``.
    ``known``: :func:`conversations` of (at least) the anchors, if the caller has it."""
    if not anchors or window <= 0:
        return []
    # the anchors' conversations (by primary key): none, no second query
    conv = (known if known is not None
            else conversations(conn, where, params, [a for a, _ in anchors]))
    anchors = [(a, t) for a, t in anchors if a in conv]
    if not anchors:
        return []
    sql = f"""
    SELECT a.anchor, n.id, n.created_at, n.pinned, n.side
    FROM unnest(%(nb_ids)s::uuid[], %(nb_ts)s::timestamptz[], %(nb_conv)s::text[])
         AS a(anchor, ts, conv)
    CROSS JOIN LATERAL (
        (SELECT id, created_at, pinned, -1 AS side
         FROM memories
         WHERE {where} AND type <> 'fact' AND conversation = a.conv
               AND created_at >= a.ts - %(nb_gap)s AND created_at <= a.ts
               AND (created_at, id) < (a.ts, a.anchor)
         ORDER BY created_at DESC, id DESC LIMIT %(nb_window)s)
        UNION ALL
        (SELECT id, created_at, pinned, 1 AS side
         FROM memories
         WHERE {where} AND type <> 'fact' AND conversation = a.conv
               AND created_at <= a.ts + %(nb_gap)s AND created_at >= a.ts
               AND (created_at, id) > (a.ts, a.anchor)
         ORDER BY created_at, id LIMIT %(nb_window)s)
    ) n
    """
    rows = conn.execute(sql, {**params, "nb_ids": [a for a, _ in anchors],
                              "nb_ts": [t for _, t in anchors],
                              "nb_conv": [conv[a] for a, _ in anchors], "nb_gap": max_gap,
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
