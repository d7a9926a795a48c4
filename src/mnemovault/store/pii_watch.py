"""SQL of the PII watch (:mod:`mnemovault.pii.watch`, migration 0018): the vault values it
has not covered yet, the records whose keyed terms hold all of a value's terms, the marks
of what it covered and the row of each run.

Every function runs in the caller's transaction (tenant set for row-level security) and
names the tenant in its statements; :func:`tenants_pending` and :func:`try_lock` are the
operator path (the owner's connection, every tenant). Values and texts never appear here:
only placeholders, keyed term hashes and ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]

_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 2917)) AS got"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 2917))"


def try_lock(conn: Conn, tenant: str) -> bool:
    """Take the tenant's watch lock on ``conn`` (a session advisory lock on an autocommit
    owner connection, held until :func:`unlock` or the connection closes); False when
    another run of this tenant holds it."""
    row = conn.execute(_LOCK, (f"mv_piiwatch:{tenant}",)).fetchone()
    return bool(row and (row["got"] if isinstance(row, dict) else row[0]))


def unlock(conn: Conn, tenant: str) -> None:
    conn.execute(_UNLOCK, (f"mv_piiwatch:{tenant}",))


def now(conn: Conn) -> datetime:
    """The transaction's start time on the database's clock (a run's start)."""
    row = conn.execute("SELECT now() AS t").fetchone()
    assert row is not None
    return row["t"] if isinstance(row, dict) else row[0]


def tenants_pending(conn: Conn) -> list[str]:
    """Operator path: the tenants with vault values the watch has not covered, in order."""
    return [r["tenant_id"] if isinstance(r, dict) else r[0] for r in conn.execute(
        "SELECT DISTINCT tenant_id FROM pii_values WHERE watched_at IS NULL "
        "AND fingerprint IS NOT NULL ORDER BY tenant_id").fetchall()]


def pending(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """The live values not covered yet (``placeholder``, ``kind``, ``created_at``,
    ``watch_seen_at``), oldest first (the ``pii_values_watch_pending`` index)."""
    return conn.execute(
        "SELECT placeholder, kind, created_at, watch_seen_at FROM pii_values "
        "WHERE tenant_id = %s AND watched_at IS NULL AND fingerprint IS NOT NULL "
        "ORDER BY created_at, placeholder", (tenant,)).fetchall()


def pending_count(conn: Conn, tenant: str) -> int:
    row = conn.execute("SELECT count(*) AS n FROM pii_values WHERE tenant_id = %s "
                       "AND watched_at IS NULL AND fingerprint IS NOT NULL",
                       (tenant,)).fetchone()
    return int(row["n"]) if row else 0


def mark_seen(conn: Conn, tenant: str, placeholders: Sequence[str], at: datetime) -> None:
    """Record that a run first saw ``placeholders`` committed at ``at`` (once)."""
    if placeholders:
        conn.execute("UPDATE pii_values SET watch_seen_at = %s WHERE tenant_id = %s "
                     "AND placeholder = ANY(%s) AND watch_seen_at IS NULL",
                     (at, tenant, list(placeholders)))


def mark_watched(conn: Conn, tenant: str, placeholders: Sequence[str], at: datetime) -> int:
    """Mark ``placeholders`` covered at ``at``; how many were marked now."""
    if not placeholders:
        return 0
    return conn.execute("UPDATE pii_values SET watched_at = %s WHERE tenant_id = %s "
                        "AND placeholder = ANY(%s) AND watched_at IS NULL",
                        (at, tenant, list(placeholders))).rowcount


def scopes(conn: Conn, tenant: str) -> list[str]:
    """The tenant's scopes with live memories (the postings' second key column): those
    the BM25 statistics know (base rows and deltas: migrations 0009 and 0016 count the
    same live memories the postings hold), a few small rows instead of the memories."""
    return [r["scope"] for r in conn.execute(
        "SELECT scope FROM lexical_scope_stats WHERE tenant_id = %(t)s UNION "
        "SELECT scope FROM lexical_stat_deltas WHERE tenant_id = %(t)s AND lexeme IS NULL "
        "ORDER BY scope", {"t": tenant}).fetchall()]


def live_term_hits(conn: Conn, tenant: str, scope_list: Sequence[str],
                   lexemes: Sequence[str]) -> dict[uuid.UUID, set[str]]:
    """``{memory id: the keyed lexemes among ``lexemes`` it holds}`` over the postings of
    the live memories (``active``, not archived: migration 0010) of ``scope_list``: index
    scans of ``(tenant_id, scope, lexeme, ...)``, no memory row read."""
    if not lexemes or not scope_list:
        return {}
    out: dict[uuid.UUID, set[str]] = {}
    for r in conn.execute(
            "SELECT memory_id, lexeme FROM lexical_postings WHERE tenant_id = %s "
            "AND scope = ANY(%s) AND lexeme = ANY(%s)",
            (tenant, list(scope_list), list(lexemes))).fetchall():
        out.setdefault(r["memory_id"], set()).add(r["lexeme"])
    return out


def other_term_hits(conn: Conn, tenant: str, query: str) -> list[uuid.UUID]:
    """Ids of the memories that have no postings (pending review, superseded, archived)
    whose keyed terms match the tsquery literal ``query`` (an OR of the keyed lexemes):
    the memories row's ``tsv`` itself, in the database (no content is opened)."""
    return [r["id"] for r in conn.execute(
        "SELECT id FROM memories WHERE tenant_id = %s "
        "AND (status <> 'active' OR archived) AND tsv @@ %s::tsquery ORDER BY id",
        (tenant, query)).fetchall()]


def keyed_lexemes(conn: Conn, tenant: str, ids: Sequence[uuid.UUID],
                  lexemes: Sequence[str]) -> dict[uuid.UUID, set[str]]:
    """``{memory id: the keyed lexemes among ``lexemes`` its tsv holds}`` for ``ids``."""
    if not ids or not lexemes:
        return {}
    out: dict[uuid.UUID, set[str]] = {}
    for r in conn.execute(
            "SELECT m.id, u.lexeme FROM memories m, unnest(m.tsv) u "
            "WHERE m.tenant_id = %s AND m.id = ANY(%s) AND u.lexeme = ANY(%s)",
            (tenant, list(ids), list(lexemes))).fetchall():
        out.setdefault(r["id"], set()).add(r["lexeme"])
    return out


def all_ids(conn: Conn, tenant: str) -> list[uuid.UUID]:
    """Every memory id of the tenant, in order (a full scan)."""
    return [r["id"] for r in conn.execute(
        "SELECT id FROM memories WHERE tenant_id = %s ORDER BY id", (tenant,)).fetchall()]


def without_terms(conn: Conn, tenant: str) -> list[uuid.UUID]:
    """Ids of the memories whose terms are not keyed yet (before ``db reindex-terms``):
    the postings cannot speak for them."""
    return [r["id"] for r in conn.execute(
        "SELECT id FROM memories WHERE tenant_id = %s AND NOT terms_keyed ORDER BY id",
        (tenant,)).fetchall()]


def insert_run(conn: Conn, tenant: str, run_id: uuid.UUID, started_at: datetime, *,
               full: bool, counts: dict[str, int]) -> None:
    """The row of one run (counts only)."""
    conn.execute(
        "INSERT INTO pii_watch_runs (tenant_id, run_id, started_at, full_scan, "
        "values_scanned, values_done, candidates, opened, rewritten, deferred, batches) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (tenant, run_id, started_at, full, counts["values"], counts["values_done"],
         counts["candidates"], counts["opened"], counts["rewritten"], counts["deferred"],
         counts["batches"]))


def last_run(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """The tenant's latest run row, or None."""
    return conn.execute(
        "SELECT run_id, started_at, finished_at, full_scan, values_scanned, values_done, "
        "candidates, opened, rewritten, deferred, batches FROM pii_watch_runs "
        "WHERE tenant_id = %s ORDER BY finished_at DESC LIMIT 1", (tenant,)).fetchone()
