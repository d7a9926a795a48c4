"""SQL of recall over the ``memories`` table: the filter clause, the nearest rows by
cosine distance (HNSW) and the full-text candidates (BM25 in SQL).

The fusion of the two lists and every ranking rule live in :mod:`mnemovault.recall`."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from mnemovault.store.db import tenant_of


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


HNSW_EF_SEARCH_MAX = 1000  # pgvector refuses a larger hnsw.ef_search


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
    ``n`` (the HNSW candidate list must hold as many rows as asked for), and capped at
    pgvector's limit of 1000 (callers cap ``n`` likewise).
    """
    ef = min(max(int(ef_search), int(n), 1), HNSW_EF_SEARCH_MAX)
    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
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
    ``N``, ``avgdl`` and ``df`` are the scope's corpus statistics over its live memories
    (active, not archived), kept by the database in every transaction that changes
    ``memories`` (migration 0009: ``lexical_scope_stats``, ``lexical_df``), so the query
    reads only the statistics rows of its own terms and the memories that match one of
    them, never the whole scope. ``tf`` is the lexeme's position count and ``|d|`` the
    document's distinct lexemes (the stored ``tsv_length``).

    ``params`` must hold ``tenant`` and ``scope`` (as :func:`filter_sql` makes them).
    A scope without a statistics row (empty, or a database where migration 0009 keeps
    none) is ranked by :func:`text_candidates_recount` instead.
    Each row also carries ``qmax = Σ idf(t) · (k1 + 1)`` over every term of the query, the
    score of a document that held all of them with saturated frequency; a term the scope
    lacks counts with ``df = 0`` (the highest idf), so a query whose specific words match
    nothing has a high ``qmax`` that its best match stays far below (the fusion's gate,
    :mod:`mnemovault.recall.ranking`).
    """
    stats = conn.execute(
        "WITH q AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(qtext)s))) "
        "SELECT q.lexeme, coalesce(d.df, 0) AS df, coalesce(d.max_tf, 0) AS max_tf, "
        "s.doc_count, s.total_length FROM q "
        "LEFT JOIN lexical_scope_stats s ON s.tenant_id = %(tenant)s AND s.scope = %(scope)s "
        "LEFT JOIN LATERAL (SELECT df, max_tf FROM lexical_df WHERE tenant_id = %(tenant)s "
        "AND scope = %(scope)s AND lexeme = q.lexeme) d ON true ORDER BY q.lexeme",
        {"qtext": qtext, "tenant": params["tenant"], "scope": params["scope"]}).fetchall()
    if not stats:  # no query term survives stemming and stop words
        return []
    docs = float(stats[0]["doc_count"] or 0)
    if docs <= 0:  # an empty scope, or no statistics kept (Citus: migration 0009)
        return text_candidates_recount(conn, qtext, where, params, n, k1=k1, b=b)
    avgdl = max(float(stats[0]["total_length"]) / docs, 1.0)
    idf = {r["lexeme"]: math.log(1 + (docs - r["df"] + 0.5) / (r["df"] + 0.5)) for r in stats}
    qmax = sum(idf.values()) * (k1 + 1)
    present = sorted((r for r in stats if r["df"] > 0), key=lambda r: (r["df"], r["lexeme"]))
    if not present:
        return []
    score = {"lexemes": [r["lexeme"] for r in present],
             "idfs": [idf[r["lexeme"]] for r in present], "avgdl": avgdl, "qmax": qmax,
             "n": n, "k1": k1, "b": b}
    # MaxScore (Turtle and Flood, "Query evaluation: strategies and optimizations", IP&M
    # 1995): score first the memories holding one of the rarest terms (enough of them to
    # fill n). The n-th score found, θ, is at most the true n-th score. A memory holding
    # none of the first j terms scores at most the sum of the other terms' upper bounds;
    # with j the first cut where that sum is below θ, the memories holding one of the
    # first j terms contain the top n, exactly.
    first, seen = 0, 0
    while first < len(present) and seen < 2 * n:
        seen += int(present[first]["df"])
        first += 1
    if first == len(present):
        return _bm25(conn, where, params, present, score)
    bounds = [_term_bound(idf[r["lexeme"]], int(r["max_tf"]), k1, b) for r in present]
    rest = [sum(bounds[j:]) for j in range(len(present))] + [0.0]
    rows = _bm25(conn, where, params, present[:first], score)
    theta = float(rows[-1]["score"]) if len(rows) == n else 0.0
    cut = next(j for j in range(first, len(present) + 1) if rest[j] < theta or
               j == len(present))
    if cut == first:
        return rows
    return _bm25(conn, where, params, present[:cut], score)


def _term_bound(idf: float, max_tf: int, k1: float, b: float) -> float:
    """The most one term can add to a BM25 score: its highest term frequency in the
    shortest possible document (``|d| → 0``)."""
    tf = max(max_tf, 1)
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b))


def _bm25(conn: psycopg.Connection[Any], where: str, params: dict[str, Any],
          match: list[dict[str, Any]], score: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``n`` best by BM25 over every query term, among the rows of ``where`` that hold
    one of the ``match`` terms."""
    # the OR of the terms as a constant: the planner sees it and can use the GIN index
    tsq = " | ".join("'" + r["lexeme"].replace("\\", "\\\\").replace("'", "''") + "'"
                     for r in match)
    sql = f"""
    WITH idf(lexeme, idf) AS (
        SELECT * FROM unnest(%(lexemes)s::text[], %(idfs)s::float8[])
    ), matched AS (
        SELECT id, created_at, pinned, tsv, tsv_length::float8 AS dl
        FROM memories WHERE tsv @@ %(tsq)s::tsquery AND {where}
    )
    SELECT m.id, m.created_at, m.pinned,
           sum(i.idf * t.tf * (%(k1)s + 1)
               / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / %(avgdl)s))) AS score,
           %(qmax)s::float8 AS qmax
    FROM matched m
         CROSS JOIN LATERAL (SELECT u.lexeme,
                                    coalesce(array_length(u.positions, 1), 1)::float8 AS tf
                             FROM unnest(m.tsv) u) t
         JOIN idf i ON i.lexeme = t.lexeme
    GROUP BY m.id, m.created_at, m.pinned
    ORDER BY score DESC, m.id
    LIMIT %(n)s
    """
    return conn.execute(sql, {**params, **score, "tsq": tsq}).fetchall()


def text_candidates_recount(
    conn: psycopg.Connection[Any], qtext: str, where: str, params: dict[str, Any], n: int,
    *, k1: float = BM25_K1, b: float = BM25_B,
) -> list[dict[str, Any]]:
    """The same ranking as :func:`text_candidates` with the corpus statistics recounted
    from the rows that satisfy ``where`` (the whole scope is read): the reference for
    tests and benchmarks."""
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
    ), qmax AS (
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


def lexical_stats(conn: psycopg.Connection[Any], scope: str) -> dict[str, Any]:
    """The maintained corpus statistics of ``scope`` in the current tenant: ``doc_count``,
    ``total_length`` (0 for an empty scope) and ``df`` (lexeme -> document frequency)."""
    tenant = tenant_of(conn)
    row = conn.execute("SELECT doc_count, total_length FROM lexical_scope_stats "
                       "WHERE tenant_id = %s AND scope = %s", (tenant, scope)).fetchone()
    df = {r["lexeme"]: int(r["df"]) for r in conn.execute(
        "SELECT lexeme, df FROM lexical_df WHERE tenant_id = %s AND scope = %s",
        (tenant, scope))}
    return {"doc_count": int(row["doc_count"]) if row else 0,
            "total_length": int(row["total_length"]) if row else 0, "df": df}


def lexical_recount(conn: psycopg.Connection[Any], scope: str) -> dict[str, Any]:
    """The same statistics recounted from the live memories of ``scope`` (the reference
    for :func:`lexical_stats`)."""
    tenant = tenant_of(conn)
    row = conn.execute("SELECT count(*) AS n, coalesce(sum(tsv_length), 0) AS len "
                       "FROM memories WHERE tenant_id = %s AND scope = %s "
                       "AND status = 'active' AND NOT archived", (tenant, scope)).fetchone()
    df = {r["lexeme"]: int(r["df"]) for r in conn.execute(
        "SELECT u.lexeme, count(*) AS df FROM memories m, unnest(m.tsv) u "
        "WHERE m.tenant_id = %s AND m.scope = %s AND m.status = 'active' "
        "AND NOT m.archived GROUP BY u.lexeme", (tenant, scope))}
    assert row is not None  # an aggregate always answers one row
    return {"doc_count": int(row["n"]), "total_length": int(row["len"]), "df": df}
