"""SQL of recall over the ``memories`` table: the filter clause, the nearest rows by
cosine distance (HNSW) and the full-text candidates (BM25 in SQL).

The fusion of the two lists and every ranking rule live in :mod:`mnemovault.recall`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import psycopg


def filter_sql(tenant: str, scope: str, *, include_archived: bool = False,
               subject: str | None = None, types: list[str] | None = None,
               tags: list[str] | None = None, since: datetime | None = None,
               until: datetime | None = None) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (and its parameters) of the live memories of one scope that pass
    the recall filters: active only, not archived unless ``include_archived``.

    The tenant is named here as well as by row-level security: the planner then sees its
    real row count (a tenant-sized scope goes to the HNSW index, a small one to the B-tree
    and an exact sort), and isolation is enforced twice (SPEC section 11)."""
    clauses = ["tenant_id = %(tenant)s", "scope = %(scope)s", "status = 'active'"]
    params: dict[str, Any] = {"tenant": tenant, "scope": scope}
    if not include_archived:
        clauses.append("NOT archived")
    if subject is not None:
        clauses.append("subject_id = %(subject)s")
        params["subject"] = subject
    if types:
        clauses.append("type = ANY(%(types)s)")
        params["types"] = list(types)
    if tags:
        clauses.append("provenance -> 'tags' ?| %(tags)s")
        params["tags"] = list(tags)
    if since is not None:
        clauses.append("created_at >= %(since)s")
        params["since"] = since
    if until is not None:
        clauses.append("created_at < %(until)s")
        params["until"] = until
    return " AND ".join(clauses), params


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


def text_candidates_cd(
    conn: psycopg.Connection[Any], qtext: str, where: str, params: dict[str, Any], n: int
) -> list[dict[str, Any]]:
    """Full-text candidates ranked by PostgreSQL's ``ts_rank_cd`` (cover density) over an
    OR of the query's lexemes (English stemming, stop words removed)."""
    return conn.execute(
        f"SELECT id, created_at, pinned FROM memories, "
        f"(SELECT replace(plainto_tsquery('english', %(qtext)s)::text, '&', '|') AS qs) s "
        f"WHERE qs <> '' AND tsv @@ qs::tsquery AND {where} "
        f"ORDER BY ts_rank_cd(tsv, qs::tsquery) DESC, id LIMIT %(n)s",
        {**params, "qtext": qtext, "n": n},
    ).fetchall()


BM25_K1 = 1.2
BM25_B = 0.75


def text_candidates(
    conn: psycopg.Connection[Any], qtext: str, where: str, params: dict[str, Any], n: int,
    *, k1: float = BM25_K1, b: float = BM25_B,
) -> list[dict[str, Any]]:
    """Full-text candidates ranked by Okapi BM25 (Robertson and Zaragoza, "The
    Probabilistic Relevance Framework: BM25 and Beyond", 2009), computed in SQL over the
    stored ``tsvector`` (English stemming, stop words removed):

    ``score(d) = Σ_t idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl))`` with
    ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` (the Lucene form, never negative).
    ``N``, ``df`` and ``avgdl`` are taken over the rows that satisfy ``where`` (one scope),
    ``tf`` is the lexeme's position count and ``|d|`` the document's distinct lexemes
    (the stored ``tsv_length``).
    """
    sql = f"""
    WITH q AS (
        SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(qtext)s))
    ), qs AS (
        SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query FROM q
    ), stats AS (
        SELECT count(*)::float8 AS n, greatest(avg(tsv_length), 1)::float8 AS avgdl
        FROM memories WHERE {where}
    ), matched AS (
        SELECT id, created_at, pinned, tsv, tsv_length::float8 AS dl
        FROM memories, qs WHERE tsv @@ qs.query AND {where}
    ), terms AS (
        SELECT m.id, u.lexeme, coalesce(array_length(u.positions, 1), 1)::float8 AS tf
        FROM matched m, unnest(m.tsv) u WHERE u.lexeme IN (SELECT lexeme FROM q)
    ), df AS (
        SELECT lexeme, count(*)::float8 AS df FROM terms GROUP BY lexeme
    )
    , qmax AS (
        SELECT sum(ln(1 + (s.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5)))
               * (%(k1)s + 1) AS qmax
        FROM q LEFT JOIN df ON df.lexeme = q.lexeme CROSS JOIN stats s
    )
    SELECT m.id, m.created_at, m.pinned,
           sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
               * t.tf * (%(k1)s + 1)
               / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl))) AS score,
           min(qm.qmax) AS qmax
    FROM matched m JOIN terms t ON t.id = m.id JOIN df ON df.lexeme = t.lexeme
         CROSS JOIN stats s CROSS JOIN qmax qm
    GROUP BY m.id, m.created_at, m.pinned
    ORDER BY score DESC, m.id
    LIMIT %(n)s
    """
    return conn.execute(sql, {**params, "qtext": qtext, "n": n, "k1": k1, "b": b}).fetchall()
