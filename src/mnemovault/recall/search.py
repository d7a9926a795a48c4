"""Candidate queries for recall."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg


def vector_candidates(
    conn: psycopg.Connection[Any],
    qvec: np.ndarray[Any, Any],
    where: str,
    params: dict[str, Any],
    n: int,
    *,
    ef_search: int = 100,
) -> list[dict[str, Any]]:
    """The ``n`` rows nearest to ``qvec`` by cosine distance that satisfy ``where``, nearest
    first, as dicts with ``id``, ``created_at``, ``pinned`` and ``distance`` (in [0, 2]).

    Uses the HNSW index with pgvector's iterative index scans (``hnsw.iterative_scan =
    relaxed_order``, pgvector 0.8): when filters discard candidates the scan continues, so
    the query still returns ``n`` rows when they exist. ``relaxed_order`` may return rows
    slightly out of order, so they are re-sorted here. ``ef_search`` is raised to at least
    ``n`` (the HNSW candidate list must hold as many rows as asked for).
    """
    conn.execute(f"SET LOCAL hnsw.ef_search = {int(max(ef_search, n))}")
    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    rows = conn.execute(
        f"SELECT id, created_at, pinned, embedding <=> %(q)s AS distance FROM memories "
        f"WHERE {where} ORDER BY embedding <=> %(q)s LIMIT %(n)s",
        {**params, "q": qvec, "n": n},
    ).fetchall()
    rows.sort(key=lambda r: r["distance"])
    return rows
