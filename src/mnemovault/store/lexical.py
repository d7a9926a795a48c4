"""SQL of the re-index of the lexical terms (migration 0014): the rows whose ``tsv`` still
holds plain lexemes, rewritten with keyed ones in batches (:mod:`mnemovault.recall.reindex`).

The rewrite changes ``tsv`` and ``tsv_length`` only; 0014's triggers then run 0009's and
0010's update functions on each row, so the statistics and postings follow it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]

REINDEX_LOCK = 0x6D76_6C78  # pg_advisory_lock key of the re-index ("mvlx")


def lock_reindex(conn: Conn) -> None:
    """Wait for the re-index's session advisory lock (an owner connection's): one process
    re-indexes at a time; it is released when that connection closes."""
    conn.execute("SELECT pg_advisory_lock(%s)", (REINDEX_LOCK,))


def plain_by_tenant(conn: Conn) -> dict[str, int]:
    """Rows left to re-index, by tenant (owner connection: every tenant)."""
    rows = conn.execute("SELECT tenant_id, count(*) FROM memories WHERE NOT terms_keyed "
                        "GROUP BY tenant_id ORDER BY tenant_id").fetchall()
    return {r[0]: int(r[1]) for r in rows}


def plain_batch(conn: Conn, tenant: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``tenant`` left to re-index (``id``, ``content``), by id,
    locked ``FOR UPDATE`` (a concurrent rectify waits, then rewrites them itself)."""
    # key_id and content_sealed: a sealed row's content is opened by the row factory
    return conn.execute("SELECT id, content, key_id, content_sealed FROM memories "
                        "WHERE tenant_id = %s "
                        "AND NOT terms_keyed ORDER BY id LIMIT %s FOR UPDATE",
                        (tenant, limit)).fetchall()


def write_terms(conn: Conn, tenant: str, ids: Sequence[uuid.UUID], tsvs: Sequence[str],
                lengths: Sequence[int]) -> int:
    """Set the keyed terms of rows ``ids`` (``tsv`` literals and lengths, in order) and
    mark them done; the rows written."""
    cur = conn.execute(
        "UPDATE memories m SET tsv = v.tsv::tsvector, tsv_length = v.len, terms_keyed = true "
        "FROM unnest(%s::uuid[], %s::text[], %s::int[]) v(id, tsv, len) "
        "WHERE m.tenant_id = %s AND m.id = v.id AND NOT m.terms_keyed",
        (list(ids), list(tsvs), list(lengths), tenant))
    return cur.rowcount
