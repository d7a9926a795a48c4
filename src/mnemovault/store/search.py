"""SQL of recall over the ``memories`` table: the filter clause, the nearest rows by
cosine distance (HNSW) and the full-text candidates (BM25 in SQL).

The fusion of the two lists and every ranking rule live in :mod:`mnemovault.recall`.

The lexical functions take the query as its terms: the distinct keyed hashes of its
lexemes (:func:`mnemovault.recall.terms.query`), the form ``memories.tsv``, the postings
and the statistics hold them in (migration 0014); no word of a query reaches the
database."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from mnemovault.store.db import tenant_of
from mnemovault.store.lexstats import SCOPE_STATS, TERM_STATS
from mnemovault.store.visibility import valid_at

_STATUSES = ("active", "pending_review", "superseded")  # memories.status (migration 0001)

CANDIDATE_COLUMNS = ("id", "created_at", "pinned", "type", "conversation", "rank_boost")
"""What every candidate row carries beside its score: what the fusion reads (write time,
pin), what the context stage reads (a turn of which conversation: ``type``,
``conversation``, :mod:`mnemovault.store.neighbours`) and the librarian's ``rank_boost``,
so that recall asks no second query about its candidates."""


def _columns(alias: str = "") -> str:
    return ", ".join(alias + c for c in CANDIDATE_COLUMNS)


def filter_sql(tenant: str, scope: str, *, include_archived: bool = False,
               subject: str | None = None, types: list[str] | None = None,
               tags: list[str] | None = None, since: datetime | None = None,
               until: datetime | None = None, statuses: Sequence[str] = ("active",),
               as_of: datetime | None = None) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (and its parameters) of the live memories of one scope that pass
    the recall filters: in ``statuses`` (what the visibility rule lets the recall see,
    :func:`mnemovault.visibility.recall_statuses`: active only unless it asks ``as_of`` a
    time), not archived unless ``include_archived``; with ``as_of``, only the versions
    valid then (:func:`mnemovault.store.visibility.valid_at`).

    The statuses are written as literals (the planner matches them against the partial
    indexes). The tenant is named here as well as by row-level security: the planner then
    sees its real row count (a tenant-sized scope goes to the HNSW index, a small one to
    the B-tree and an exact sort), and isolation is enforced twice (SPEC section 11)."""
    if not statuses or any(st not in _STATUSES for st in statuses):
        raise ValueError(f"statuses: among {', '.join(_STATUSES)}")
    status = (f"status = '{statuses[0]}'" if len(statuses) == 1 else
              "status IN (" + ", ".join(f"'{st}'" for st in statuses) + ")")
    clauses = ["tenant_id = %(tenant)s", "scope = %(scope)s", status]
    params: dict[str, Any] = {"tenant": tenant, "scope": scope}
    if as_of is not None:
        clauses.append(valid_at(params, as_of).removeprefix(" AND "))
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
    first, as dicts with the :data:`CANDIDATE_COLUMNS` and ``distance`` (in [0, 2]).

    Uses the HNSW index with pgvector's iterative index scans (``hnsw.iterative_scan =
    relaxed_order``, pgvector 0.8): when filters discard candidates the scan continues, so
    the query still returns ``n`` rows when they exist. ``relaxed_order`` may return rows
    slightly out of order, so they are re-sorted here. ``ef_search`` is raised to at least
    ``n`` (the HNSW candidate list must hold as many rows as asked for), and capped at
    pgvector's limit of 1000 (callers cap ``n`` likewise).
    """
    ef = min(max(int(ef_search), int(n), 1), HNSW_EF_SEARCH_MAX)
    # one round trip for both settings (no parameters: one simple query, two statements)
    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}; "
                 "SET LOCAL hnsw.iterative_scan = relaxed_order")
    rows = conn.execute(
        f"SELECT {_columns()}, embedding <=> %(q)s AS distance FROM memories "
        f"WHERE {where} ORDER BY embedding <=> %(q)s LIMIT %(n)s",
        {**params, "q": qvec, "n": n},
    ).fetchall()
    rows.sort(key=lambda r: r["distance"])
    return rows


def _terms(terms: Sequence[str]) -> list[str]:
    """The query's distinct terms (refusing a plain string: its characters are no terms)."""
    if isinstance(terms, str):
        raise TypeError("the lexical query is its terms (mnemovault.recall.terms.query), "
                        "not a text")
    return sorted(set(terms))


def _tsquery(terms: Sequence[str]) -> str:
    """The OR of ``terms`` as tsquery text (each quoted)."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


def text_candidates_cd(
    conn: psycopg.Connection[Any], terms: Sequence[str], where: str, params: dict[str, Any],
    n: int,
) -> list[dict[str, Any]]:
    """Full-text candidates ranked by PostgreSQL's ``ts_rank_cd`` (cover density) over an
    OR of the query's terms."""
    qs = _tsquery(_terms(terms))
    if not qs:
        return []
    return conn.execute(
        f"SELECT {_columns()} FROM memories "
        f"WHERE tsv @@ %(qs)s::tsquery AND {where} "
        f"ORDER BY ts_rank_cd(tsv, %(qs)s::tsquery) DESC, id LIMIT %(n)s",
        {**params, "qs": qs, "n": n},
    ).fetchall()


BM25_K1 = 1.2
BM25_B = 0.75


def text_candidates(
    conn: psycopg.Connection[Any], terms: Sequence[str], where: str, params: dict[str, Any],
    n: int,
    *, k1: float = BM25_K1, b: float = BM25_B, explain: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Full-text candidates ranked by Okapi BM25 (Robertson and Zaragoza, "The
    Probabilistic Relevance Framework: BM25 and Beyond", 2009), computed in SQL over the
    stored ``tsvector`` (English stemming, stop words removed):

    ``score(d) = Σ_t idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl))`` with
    ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` (the Lucene form, never negative).
    ``N``, ``avgdl`` and ``df`` are the scope's corpus statistics over its live memories
    (active, not archived), kept by the database in every transaction that changes
    ``memories`` (migration 0009's base rows ``lexical_scope_stats``, ``lexical_df`` plus
    the deltas of migration 0016: :mod:`mnemovault.store.lexstats`). ``tf`` is the
    lexeme's position count and ``|d|`` the document's distinct lexemes (the stored
    ``tsv_length``). Scores sum the terms' contributions in increasing order, so memories
    with equal contributions tie exactly and go by id.

    Without filters (``where`` as :func:`filter_sql` makes it for the scope alone) the top
    ``n`` comes from the postings of migration 0010 (:func:`_postings_top`: exact, reading
    the postings of the terms that can matter and scoring few memories). With filters,
    or where a term has statistics but no postings, the memories that hold a term are scored
    from their ``tsvector`` with MaxScore over terms (below): row-level security keeps the
    planner off the GIN index (``@@`` is not leakproof), so that reads the whole scope.
    ``explain``, when given, is filled with what the query did (``path``: ``"postings"``
    or ``"scan"``; for the postings its terms, passes, θ and counts).

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
        "WITH q AS (SELECT DISTINCT lexeme FROM unnest(%(terms)s::text[]) lexeme) "
        "SELECT q.lexeme, coalesce(d.df, 0) AS df, coalesce(d.max_tf, 0) AS max_tf, "
        "s.doc_count, s.total_length, EXISTS (SELECT 1 FROM lexical_postings p "
        "WHERE p.tenant_id = %(tenant)s AND p.scope = %(scope)s AND p.lexeme = q.lexeme) "
        "AS posted FROM q "
        f"CROSS JOIN ({SCOPE_STATS}) s "
        f"CROSS JOIN LATERAL ({TERM_STATS.format(lexeme='q.lexeme')}) d ORDER BY q.lexeme",
        {"terms": _terms(terms), "tenant": params["tenant"],
         "scope": params["scope"]}).fetchall()
    if not stats:  # no query term survives stemming and stop words
        return []
    docs = float(stats[0]["doc_count"] or 0)
    if docs <= 0:  # an empty scope, or no statistics kept (e.g. before migration 0009)
        if explain is not None:
            explain.clear()
            explain["path"] = "recount"
        return text_candidates_recount(conn, terms, where, params, n, k1=k1, b=b)
    avgdl = max(float(stats[0]["total_length"]) / docs, 1.0)
    idf = {r["lexeme"]: math.log(1 + (docs - r["df"] + 0.5) / (r["df"] + 0.5)) for r in stats}
    qmax = sum(idf.values()) * (k1 + 1)
    present = sorted((r for r in stats if r["df"] > 0), key=lambda r: (r["df"], r["lexeme"]))
    if not present:
        return []
    if explain is not None:
        explain.clear()
    # the postings path where they are kept (on Citus too: store/citus.py installs 0010's
    # triggers on the shards); a term of the statistics without postings: the path over
    # memories answers
    if _unfiltered(where, params) and all(r["posted"] for r in present):
        top = _postings_top(conn, params, present, idf, avgdl, qmax, n, k1, b, explain)
        if top is not None:
            return top
    if explain is not None:
        explain["path"] = "scan"
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


def _unfiltered(where: str, params: dict[str, Any]) -> bool:
    """Whether ``where`` is :func:`filter_sql`'s clause of a scope's live memories with no
    other filter: exactly the rows that ``lexical_postings`` holds (migration 0010)."""
    return (set(params) == {"tenant", "scope"}
            and where == filter_sql(params["tenant"], params["scope"])[0])


POSTINGS_TF_GROUPS = 16  # term frequencies probed one by one for the bounds; above: one group
POSTINGS_DL_CAP = 256  # per-length bounds are tabulated for 0..cap; longer memories share one
POSTINGS_PROBE_COST = 3.0  # a primary-key probe of one memory, in postings read by a scan
POSTINGS_READ_ALL = 4000  # at most this many postings in all: one pass over all, no bounds

_HEADS_SQL = """
SELECT t.lexeme, g.tf, h.dl FROM unnest(%(lexemes)s::text[], %(max_tf)s::int[]) t(lexeme, max_tf)
     CROSS JOIN LATERAL generate_series(least(greatest(t.max_tf, 1), %(groups)s), 1, -1) g(tf)
     CROSS JOIN LATERAL (SELECT p.dl FROM lexical_postings p
                         WHERE p.tenant_id = %(tenant)s AND p.scope = %(scope)s
                           AND p.lexeme = t.lexeme AND p.tf = g.tf
                         ORDER BY p.dl LIMIT 1) h
UNION ALL
SELECT t.lexeme, h.tf, 0 FROM unnest(%(lexemes)s::text[]) t(lexeme)
     CROSS JOIN LATERAL (SELECT p.tf FROM lexical_postings p
                         WHERE p.tenant_id = %(tenant)s AND p.scope = %(scope)s
                           AND p.lexeme = t.lexeme AND p.tf > %(groups)s
                         ORDER BY p.tf DESC LIMIT 1) h
"""

# the contributions of every query term to the memory ``x.memory_id``: its postings in one
# index-only probe of the primary key (OFFSET 0 keeps the planner from turning the probes
# into a scan of the terms' whole postings)
_EXACT_SQL = """
    SELECT a.idf * q.tf * (%(k1)s + 1)
           / (q.tf + %(k1)s * (1 - %(b)s + %(b)s * q.dl / %(avgdl)s)) AS c
    FROM lexical_postings q JOIN a ON a.lexeme = q.lexeme
    WHERE q.tenant_id = %(tenant)s AND q.memory_id = x.memory_id OFFSET 0"""

# One pass of MaxScore over the postings (see _postings_top). ``part``: the essential
# terms' partial score of every memory holding one of them (an index-only scan per term);
# ``seed``: the best of those by partial score, scored exactly (one primary-key probe
# each; with no non-essential term the partial score is the score, and the n-th best of
# ``part`` is read without probes); θ: their n-th exact score, or ``floor`` if higher, at
# most the true n-th score;
# ``cand``: the memories whose partial score plus the most the non-essential terms can add
# at their length (``bne``, by length) reaches θ. The non-essential terms' part of their
# scores comes from a probe per candidate when there are few (at most ``probe_max``),
# else from one scan of those terms' postings, summed per memory and joined to the
# candidates by hash (MATERIALIZED: a semi-join to ``cand`` let the planner turn the scan
# into a heap probe per candidate, 14 µs each). The planner runs only the branch whose
# one-time filter holds. The best by that score (and all within ``eps`` of the n-th)
# are scored again summing the contributions in increasing order (``ORDER BY``), so that
# equal contributions give bit-identical sums and ties go by id, as in the recount.
_PASS_SQL = """
WITH e(lexeme, idf) AS (SELECT * FROM unnest(%(e_lx)s::text[], %(e_idf)s::float8[])),
a(lexeme, idf) AS (SELECT * FROM unnest(%(a_lx)s::text[], %(a_idf)s::float8[])),
ne(lexeme, idf) AS (SELECT * FROM unnest(%(ne_lx)s::text[], %(ne_idf)s::float8[])),
part AS MATERIALIZED (
    SELECT p.memory_id, max(p.dl) AS dl,
           sum(e.idf * p.tf * (%(k1)s + 1)
               / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.dl / %(avgdl)s))) AS ps
    FROM e JOIN lexical_postings p ON p.tenant_id = %(tenant)s AND p.scope = %(scope)s
                                   AND p.lexeme = e.lexeme
    GROUP BY p.memory_id
), seed AS MATERIALIZED (
    SELECT memory_id FROM part ORDER BY ps DESC, memory_id LIMIT %(seeds)s
), seed_score AS (
    SELECT x.memory_id, sum(w.c) AS score FROM seed x CROSS JOIN LATERAL (%(exact)s) w
    GROUP BY x.memory_id ORDER BY score DESC LIMIT %(n)s
), ps_top AS (
    SELECT ps FROM part ORDER BY ps DESC LIMIT %(n)s
), theta AS MATERIALIZED (
    SELECT greatest(%(floor)s::float8, CASE
        WHEN %(ps_exact)s THEN (SELECT CASE WHEN count(*) >= %(n)s THEN min(ps) ELSE 0 END
                                FROM ps_top)
        ELSE (SELECT CASE WHEN count(*) >= %(n)s THEN min(score) ELSE 0 END
              FROM seed_score) END) AS theta
), cand AS MATERIALIZED (
    SELECT part.memory_id, part.ps FROM part, theta
    WHERE part.ps + (%(bne)s::float8[])[least(part.dl, %(cap)s) + 1] >= theta.theta - %(eps)s
), ncand AS MATERIALIZED (
    SELECT count(*) AS k FROM cand
), ne_probe AS (
    SELECT x.memory_id, sum(w.c) AS s FROM cand x CROSS JOIN LATERAL (%(exact_ne)s) w
    WHERE (SELECT k FROM ncand) <= %(probe_max)s
    GROUP BY x.memory_id
), ne_scan AS MATERIALIZED (
    SELECT p.memory_id, sum(ne.idf * p.tf * (%(k1)s + 1)
               / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.dl / %(avgdl)s))) AS s
    FROM ne JOIN lexical_postings p ON p.tenant_id = %(tenant)s AND p.scope = %(scope)s
                                    AND p.lexeme = ne.lexeme
    WHERE (SELECT k FROM ncand) > %(probe_max)s
    GROUP BY p.memory_id
), fast AS MATERIALIZED (
    SELECT c.memory_id, c.ps + coalesce(np.s, ns.s, 0) AS score
    FROM cand c LEFT JOIN ne_probe np ON np.memory_id = c.memory_id
         LEFT JOIN ne_scan ns ON ns.memory_id = c.memory_id
), best AS (
    SELECT x.memory_id FROM fast x
    WHERE x.score >= (SELECT coalesce(min(t.score), 0) FROM (
                          SELECT score FROM fast ORDER BY score DESC LIMIT %(n)s) t) - %(eps)s
), scored AS (
    SELECT x.memory_id, sum(w.c ORDER BY w.c) AS score FROM best x
         CROSS JOIN LATERAL (%(exact)s) w
    GROUP BY x.memory_id
    ORDER BY score DESC, x.memory_id LIMIT %(n)s
)
SELECT {columns}, s.score, %(qmax)s::float8 AS qmax,
       t.theta, (SELECT k FROM ncand) AS cands, (SELECT count(*) FROM part) AS parts
FROM scored s JOIN memories m ON m.tenant_id = %(tenant)s AND m.id = s.memory_id
     CROSS JOIN theta t
ORDER BY s.score DESC, s.memory_id
"""

_PASS_SQL = (_PASS_SQL.replace("%(exact)s", _EXACT_SQL).replace("{columns}", _columns("m."))
             .replace("%(exact_ne)s", _EXACT_SQL.replace("JOIN a ON a.", "JOIN ne a ON a.")))


def _weight(idf: float, tf: float, dl: float, avgdl: float, k1: float, b: float) -> float:
    """One term's BM25 contribution (as the SQL computes it)."""
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))


def _estimate_theta(present: list[dict[str, Any]], idf: dict[str, float], n: int) -> float:
    """A guess of the n-th score (not a bound: the pass checks what it implies): a memory
    of average length holding the most specific terms that, were terms independent, about
    ``n`` memories would hold together, less a margin."""
    docs = max(float(present[0]["doc_count"] or 0), 1.0)
    guess, expected = 0.0, docs
    for r in sorted(present, key=lambda r: (-idf[r["lexeme"]], r["lexeme"])):
        expected *= float(r["df"]) / docs
        if expected < n:
            break
        guess += idf[r["lexeme"]]
    return 0.9 * guess


def _postings_top(conn: psycopg.Connection[Any], params: dict[str, Any],
                  present: list[dict[str, Any]], idf: dict[str, float], avgdl: float,
                  qmax: float, n: int, k1: float, b: float,
                  explain: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The exact BM25 top ``n`` of a scope's live memories from ``lexical_postings``
    (migration 0010), MaxScore over postings (Turtle and Flood, "Query evaluation:
    strategies and optimizations", IP&M 1995), or None when the postings are not kept
    (a present term has none, e.g. a Citus cluster not yet distributed).

    The bounds are exact: the first posting of each (term, tf) group in the B-tree is the
    group's shortest memory, so a term adds at most ``max w(tf, that dl)`` to any score,
    and to a memory of length ``dl`` at most the best of the groups whose shortest memory
    is not longer. The terms whose bounds sum below θ (a lower bound of the n-th score,
    estimated first and checked after) are non-essential: a memory holding none of the
    others scores below θ, and so cannot be in the top n. Only the essential terms'
    postings are read in full; the rare memories whose partial score plus the
    non-essential bound at their length reaches θ get exact scores. When the check fails
    (θ came out below the non-essential bound), the pass is repeated once with the
    non-essential terms chosen by the θ found, which is then known to hold. The first θ is
    :func:`_estimate_theta`'s guess; the pass's own (exact scores of the best by partial
    score, or with every term essential the partial scores themselves) is a bound."""
    tenant, scope = params["tenant"], params["scope"]
    lexemes = [r["lexeme"] for r in present]
    df = {r["lexeme"]: int(r["df"]) for r in present}
    eps = 1e-9 * max(1.0, qmax)
    cap = POSTINGS_DL_CAP
    if sum(df.values()) <= POSTINGS_READ_ALL:  # few postings: read them all, in one pass
        return _postings_pass(conn, params, lexemes, [], idf, df, avgdl, qmax, n, k1, b,
                              0.0, [0.0] * (cap + 1), eps, 1, explain)[0]
    heads = conn.execute(_HEADS_SQL, {
        "lexemes": lexemes, "max_tf": [int(r["max_tf"]) for r in present],
        "groups": POSTINGS_TF_GROUPS, "tenant": tenant, "scope": scope}).fetchall()
    groups: dict[str, list[tuple[int, int]]] = {lx: [] for lx in lexemes}
    for h in heads:
        groups[h["lexeme"]].append((int(h["tf"]), int(h["dl"])))
    if any(not g for g in groups.values()):
        return None  # a term the statistics know has no postings: they are not kept
    # by_len[t][d]: the most term t adds to a memory of length d (d = cap: any d >= cap),
    # computed as _weight does, operation by operation (the same doubles), over all d at once
    by_len: dict[str, np.ndarray[Any, Any]] = {}
    lengths = np.arange(cap, dtype=np.float64)
    for lx, gs in groups.items():
        row = np.zeros(cap + 1)
        for tf, dmin in gs:
            w = idf[lx] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / avgdl))
            w[:min(dmin, cap)] = 0.0  # this group holds no memory shorter than dmin
            np.maximum(row[:cap], w, out=row[:cap])
            row[cap] = max(row[cap], _weight(idf[lx], tf, max(cap, dmin), avgdl, k1, b))
        by_len[lx] = row
    bound = {lx: float(row.max()) for lx, row in by_len.items()}
    order = sorted(lexemes, key=lambda lx: (bound[lx], lx))  # weakest first

    def split(theta: float) -> int:
        """How many of the weakest terms are non-essential for ``theta`` (never all)."""
        total, j = 0.0, 0
        while j < len(order) - 1 and total + bound[order[j]] < theta - eps:
            total += bound[order[j]]
            j += 1
        return j

    # The split comes from the estimate alone. (A first lower bound from exact scores of
    # the heads of each term's postings, a query of its own, cost more than it saved: on
    # the bench's 100k scope it changed the split of 10 queries in 100, and BM25 without
    # it took 0.91x as long per query, p95 35.7 -> 31.8 ms, with the same rankings.)
    floor, cut = 0.0, split(_estimate_theta(present, idf, n))
    for attempt in (1, 2):
        ne = order[:cut]
        bne = np.zeros(cap + 1)
        for lx in ne:  # in order, as a sum over them would add
            bne += by_len[lx]
        rows, theta = _postings_pass(conn, params, order[cut:], ne, idf, df, avgdl, qmax, n,
                                     k1, b, floor, bne.tolist(), eps, attempt, explain)
        if not ne or (rows and sum(bound[lx] for lx in ne) < theta - eps):
            return rows
        floor, cut = theta, split(theta)
    raise AssertionError("unreachable: the second pass's split holds by construction")


def _postings_pass(conn: psycopg.Connection[Any], params: dict[str, Any], ess: list[str],
                   ne: list[str], idf: dict[str, float], df: dict[str, int], avgdl: float,
                   qmax: float, n: int, k1: float, b: float, floor: float, bne: list[float],
                   eps: float, attempt: int, explain: dict[str, Any] | None
                   ) -> tuple[list[dict[str, Any]], float]:
    """One run of :data:`_PASS_SQL` with essential terms ``ess`` and non-essential ``ne``:
    its rows (the top n, exact if θ holds) and θ."""
    lexemes = ess + ne
    probe_max = int(sum(df[lx] for lx in ne) / POSTINGS_PROBE_COST)
    rows = conn.execute(_PASS_SQL, {
        "e_lx": ess, "e_idf": [idf[lx] for lx in ess],
        "ne_lx": ne, "ne_idf": [idf[lx] for lx in ne], "probe_max": probe_max,
        "a_lx": lexemes, "a_idf": [idf[lx] for lx in lexemes],
        "k1": k1, "b": b, "avgdl": avgdl, "tenant": params["tenant"],
        "scope": params["scope"], "n": n, "seeds": 2 * n, "floor": floor, "bne": bne,
        "ps_exact": not ne,
        "cap": POSTINGS_DL_CAP, "eps": eps, "qmax": qmax}).fetchall()
    theta = float(rows[0]["theta"]) if rows else 0.0
    if explain is not None:
        cands = int(rows[0]["cands"]) if rows else 0
        explain.update(path="postings", passes=attempt, essential=ess, nonessential=ne,
                       theta=theta, candidates=cands,
                       # where θ came from: the partial scores (exact: no non-essential
                       # term) or exact scores of the best by them; the non-essential
                       # terms' part: a probe per candidate or a scan of their postings
                       theta_from="seeds" if ne else "partial",
                       nonessential_by=(("probe" if cands <= probe_max else "scan")
                                        if ne else None),
                       partial=int(rows[0]["parts"]) if rows else 0,
                       read=sum(df[lx] for lx in ess), df=sum(df.values()))
    for r in rows:
        del r["theta"], r["cands"], r["parts"]
    return rows, theta


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
    tsq = _tsquery([r["lexeme"] for r in match])
    sql = f"""
    WITH idf(lexeme, idf) AS (
        SELECT * FROM unnest(%(lexemes)s::text[], %(idfs)s::float8[])
    ), matched AS (
        SELECT {_columns()}, tsv, tsv_length::float8 AS dl
        FROM memories WHERE tsv @@ %(tsq)s::tsquery AND {where}
    )
    SELECT {_columns("m.")}, sum(w.c ORDER BY w.c) AS score,
           %(qmax)s::float8 AS qmax
    FROM matched m
         CROSS JOIN LATERAL (
             SELECT i.idf * t.tf * (%(k1)s + 1)
                    / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / %(avgdl)s)) AS c
             FROM (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1)::float8 AS tf
                   FROM unnest(m.tsv) u) t
                  JOIN idf i ON i.lexeme = t.lexeme) w
    GROUP BY {_columns("m.")}
    ORDER BY score DESC, m.id
    LIMIT %(n)s
    """
    return conn.execute(sql, {**params, **score, "tsq": tsq}).fetchall()


def text_candidates_recount(
    conn: psycopg.Connection[Any], terms: Sequence[str], where: str, params: dict[str, Any],
    n: int,
    *, k1: float = BM25_K1, b: float = BM25_B,
) -> list[dict[str, Any]]:
    """The same ranking as :func:`text_candidates` with the corpus statistics recounted
    from the rows that satisfy ``where`` (the whole scope is read): the reference for
    tests and benchmarks."""
    sql = f"""
    WITH q AS (
        SELECT DISTINCT lexeme FROM unnest(%(terms)s::text[]) lexeme
    ), qs AS (
        SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query FROM q
    ), stats AS (
        SELECT count(*)::float8 AS n, greatest(avg(tsv_length), 1)::float8 AS avgdl
        FROM memories WHERE {where}
    ), matched AS (
        SELECT {_columns()}, tsv, tsv_length::float8 AS dl
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
    SELECT {_columns("x.")}, sum(x.c ORDER BY x.c) AS score,
           min(x.qmax) AS qmax
    FROM (SELECT {_columns("m.")}, qm.qmax,
                 ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
                 * t.tf * (%(k1)s + 1)
                 / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * m.dl / s.avgdl)) AS c
          FROM matched m JOIN terms t ON t.id = m.id JOIN df ON df.lexeme = t.lexeme
               CROSS JOIN stats s CROSS JOIN qmax qm) x
    GROUP BY {_columns("x.")}
    ORDER BY score DESC, x.id
    LIMIT %(n)s
    """
    if not _terms(terms):
        return []
    return conn.execute(sql, {**params, "terms": _terms(terms), "n": n, "k1": k1,
                              "b": b}).fetchall()


def lexical_stats(conn: psycopg.Connection[Any], scope: str) -> dict[str, Any]:
    """The maintained corpus statistics of ``scope`` in the current tenant (base rows plus
    deltas, as the BM25 query reads them): ``doc_count``, ``total_length`` (0 for an empty
    scope) and ``df`` (lexeme -> document frequency; lexemes at 0 left out)."""
    p = {"tenant": tenant_of(conn), "scope": scope}
    row = conn.execute(SCOPE_STATS, p).fetchone()
    df = {r["lexeme"]: int(r["df"]) for r in conn.execute(
        "SELECT lexeme, sum(df)::bigint AS df FROM (SELECT lexeme, df FROM lexical_df "
        "WHERE tenant_id = %(tenant)s AND scope = %(scope)s UNION ALL "
        "SELECT lexeme, n FROM lexical_stat_deltas WHERE tenant_id = %(tenant)s "
        "AND scope = %(scope)s AND lexeme IS NOT NULL) u GROUP BY lexeme "
        "HAVING sum(df) <> 0", p)}
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


def hop_sources(conn: psycopg.Connection[Any], ids: Sequence[Any], where: str,
                params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What recall's second step (:mod:`mnemovault.recall.multihop`) reads of the first
    step's best hits ``ids``, through the same ``where`` as the first step (a memory the
    filters or the visibility rule exclude gives nothing): their embeddings (rows ``id``,
    ``embedding``), and their lexemes (the keyed hashes of ``tsv``) with the number of
    those hits holding each (``hits``), its document frequency in the scope (``df``, the
    maintained statistics BM25 reads) and the scope's ``doc_count``."""
    p = {**params, "hop_ids": list(ids)}
    vecs = conn.execute(
        f"SELECT id, embedding FROM memories WHERE {where} AND id = ANY(%(hop_ids)s)",
        p).fetchall()
    lexemes = conn.execute(
        f"WITH h AS MATERIALIZED (SELECT tsv FROM memories WHERE {where} "
        "AND id = ANY(%(hop_ids)s)), "
        "u AS (SELECT x.lexeme, count(*) AS hits FROM h, unnest(h.tsv) x GROUP BY x.lexeme) "
        "SELECT u.lexeme, u.hits, d.df, s.doc_count FROM u "
        f"CROSS JOIN ({SCOPE_STATS}) s "
        f"CROSS JOIN LATERAL ({TERM_STATS.format(lexeme='u.lexeme')}) d",
        p).fetchall()
    return vecs, lexemes
