"""SQL of the BM25 statistics' deltas (migration 0016): how the statistics are read (base
rows plus the deltas not folded yet) and the fold of a scope's deltas into its base rows.

No import of the rest of the store: :mod:`mnemovault.store.db` runs the folds after
commits and :mod:`mnemovault.store.search` reads the statistics through these queries."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import psycopg

# A scope's statistics as the base rows (migration 0009) plus the sum of the deltas not
# folded into them yet (migration 0016): what the old triggers kept, at every snapshot.
SCOPE_STATS = (
    "SELECT coalesce((SELECT doc_count FROM lexical_scope_stats WHERE tenant_id = %(tenant)s "
    "AND scope = %(scope)s), 0) + coalesce(sum(x.n), 0)::bigint AS doc_count, "
    "coalesce((SELECT total_length FROM lexical_scope_stats WHERE tenant_id = %(tenant)s "
    "AND scope = %(scope)s), 0) + coalesce(sum(x.len), 0)::bigint AS total_length "
    "FROM lexical_stat_deltas x WHERE x.tenant_id = %(tenant)s AND x.scope = %(scope)s "
    "AND x.lexeme IS NULL")
# one lexeme's (``{lexeme}``, an SQL expression): df and the max_tf bound
TERM_STATS = (
    "SELECT (coalesce(b.df, 0) + coalesce(x.n, 0))::bigint AS df, "
    "greatest(coalesce(b.max_tf, 0), coalesce(x.tf, 0)) AS max_tf "
    "FROM (SELECT sum(n)::bigint AS n, max(tf) AS tf FROM lexical_stat_deltas "
    "WHERE tenant_id = %(tenant)s AND scope = %(scope)s AND lexeme = {lexeme}) x "
    "LEFT JOIN lexical_df b ON b.tenant_id = %(tenant)s AND b.scope = %(scope)s "
    "AND b.lexeme = {lexeme}")


FOLD_EVERY = 64
"""Writes of a tenant (in one process) between two opportunistic folds of its deltas
(:func:`fold`, from :meth:`mnemovault.store.db.Database.transaction`). A write is an
audited commit, or each statement that appended deltas (:func:`note_writes`) when a
commit made more: the deltas a recall sums for a lexeme (or for the scope's document
count) are one row per such statement, so it is their number that bounds a recall's
work, not the number of commits (one commit of ``insert`` rows makes one statement a
row; a bulk load made of a few large commits left every recall summing its deltas)."""

FOLD_ROWS = 10_000
"""Memories written (live, counted in the deltas) by a tenant in one process after which
its deltas are folded even if fewer than :data:`FOLD_EVERY` writes were made: one
statement of :func:`mnemovault.store.memories.insert_many` appends a row per distinct
lexeme of up to 1,000 memories, and this keeps each fold (one short transaction) small."""

# Deltas appended in the current Database.transaction, by tenant: [statements, rows]
# (set and read by mnemovault.store.db.Database.transaction)
_writes: ContextVar[dict[str, list[int]] | None] = ContextVar("mnemovault_stat_writes",
                                                              default=None)


def note_writes(tenant: str, statements: int, rows: int) -> None:
    """Called by the store's inserts into ``memories``: ``statements`` statements that fire
    the statistics' triggers, over ``rows`` memories, in the current transaction (counted
    towards the next fold after it commits; nothing outside a transaction)."""
    pending = _writes.get()
    if pending is not None and statements > 0:
        have = pending.setdefault(tenant, [0, 0])
        have[0] += statements
        have[1] += rows

_FOLD_LOCK = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 2916)) AS got"


def fold(conn: psycopg.Connection[Any], tenant: str, scope: str, *,
                        wait: bool = False) -> int | None:
    """Fold the deltas of ``scope`` (migration 0016) into its base rows, in the caller's
    transaction (meant to be a short one of its own); how many delta rows were folded, or
    None when another fold of the scope holds its advisory lock (``wait``: wait for it).

    ``DELETE ... RETURNING`` takes exactly the deltas this transaction sees (those of
    transactions still open stay for the next fold); their sums are added to the base
    rows (the scope row first, then the lexemes in order) and base rows reaching 0 are
    removed. Writers never lock the base rows (only folds do), so a fold makes no writer
    wait; a fold that fails rolls back whole."""
    key = f"mv_lexfold:{tenant}:{scope}"
    if wait:
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 2916))", (key,))
    else:
        got = conn.execute(_FOLD_LOCK, (key,)).fetchone()
        if not got or not (got["got"] if isinstance(got, dict) else got[0]):
            return None
    p = {"tenant": tenant, "scope": scope}
    rows = conn.execute(
        "WITH d AS (DELETE FROM lexical_stat_deltas WHERE tenant_id = %(tenant)s "
        "AND scope = %(scope)s RETURNING lexeme, n, len, tf) "
        "SELECT lexeme, sum(n)::bigint AS n, sum(len)::bigint AS len, max(tf) AS tf, "
        "count(*) AS rows FROM d GROUP BY lexeme ORDER BY lexeme NULLS FIRST", p).fetchall()
    if not rows:
        return 0
    folded = sum(int(r["rows"]) for r in rows)
    scope_row = next((r for r in rows if r["lexeme"] is None), None)
    terms = [r for r in rows if r["lexeme"] is not None]
    if scope_row is not None and (scope_row["n"] or scope_row["len"]):
        conn.execute(
            "INSERT INTO lexical_scope_stats AS s (tenant_id, scope, doc_count, total_length) "
            "VALUES (%(tenant)s, %(scope)s, %(n)s, %(len)s) ON CONFLICT (tenant_id, scope) "
            "DO UPDATE SET doc_count = s.doc_count + excluded.doc_count, "
            "total_length = s.total_length + excluded.total_length",
            {**p, "n": scope_row["n"], "len": scope_row["len"]})
        conn.execute("DELETE FROM lexical_scope_stats WHERE tenant_id = %(tenant)s "
                     "AND scope = %(scope)s AND doc_count <= 0", p)
    for i in range(0, len(terms), 500):
        chunk = [r for r in terms[i:i + 500] if r["n"] or r["tf"]]
        if not chunk:
            continue
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
        conn.execute(
            "INSERT INTO lexical_df AS d (tenant_id, scope, lexeme, df, max_tf) VALUES "
            + values + " ON CONFLICT (tenant_id, scope, lexeme) DO UPDATE "
            "SET df = d.df + excluded.df, max_tf = greatest(d.max_tf, excluded.max_tf)",
            [v for r in chunk for v in (tenant, scope, r["lexeme"], r["n"], r["tf"])])
    # (a lexeme added and removed within the folded deltas sums to 0 with a tf: its row
    # may have been created at 0 just now)
    gone = [r["lexeme"] for r in terms if r["n"] <= 0]
    if gone:
        conn.execute("DELETE FROM lexical_df WHERE tenant_id = %(tenant)s "
                     "AND scope = %(scope)s AND lexeme = ANY(%(lex)s) AND df <= 0",
                     {**p, "lex": gone})
    return folded


def delta_scopes(conn: psycopg.Connection[Any], tenant: str) -> list[str]:
    """The scopes of ``tenant`` with deltas not folded yet."""
    return [r["scope"] for r in conn.execute(
        "SELECT DISTINCT scope FROM lexical_stat_deltas WHERE tenant_id = %s ORDER BY scope",
        (tenant,))]
