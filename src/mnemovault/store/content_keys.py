"""SQL of the PostgreSQL content-key store (:class:`mnemovault.pii.keystore.PostgresKeyStore`):
one table, ``mv_content_keys``, in a separate small database (``MNEMOVAULT_KEY_STORE``),
never in the application's. Rows are plain tuples: (tenant_id, key_id, scope_fp,
subject_fp, kek_version, nonce, wrapped, created_at, destroyed_at). Every function runs on
an autocommit connection handed in."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]
Row = tuple[Any, ...]

SCHEMA = """
CREATE TABLE IF NOT EXISTS mv_content_keys (
    tenant_id text NOT NULL,
    key_id text PRIMARY KEY,
    scope_fp text NOT NULL,
    subject_fp text,
    kek_version integer,
    nonce bytea,
    wrapped bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz,
    CHECK ((destroyed_at IS NULL) = (wrapped IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS mv_content_keys_owner ON mv_content_keys
    (tenant_id, scope_fp, coalesce(subject_fp, '')) WHERE destroyed_at IS NULL;
"""

_COLS = ("tenant_id, key_id, scope_fp, subject_fp, kek_version, nonce, wrapped, created_at, "
         "destroyed_at")


def create_schema(conn: Conn) -> None:
    conn.execute(SCHEMA)


def current(conn: Conn, tenant: str, scope_fp: str, subject_fp: str | None) -> str | None:
    row = conn.execute(
        "SELECT key_id FROM mv_content_keys WHERE tenant_id = %s AND scope_fp = %s AND "
        "coalesce(subject_fp, '') = %s AND destroyed_at IS NULL",
        (tenant, scope_fp, subject_fp or "")).fetchone()
    return row[0] if row else None


def insert(conn: Conn, tenant: str, key_id: str, scope_fp: str, subject_fp: str | None,
           kek_version: int, nonce: bytes, wrapped: bytes) -> bool:
    """False when the owner has a live key already (nothing stored)."""
    return conn.execute(
        "INSERT INTO mv_content_keys (tenant_id, key_id, scope_fp, subject_fp, kek_version, "
        "nonce, wrapped) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING "
        "RETURNING key_id",
        (tenant, key_id, scope_fp, subject_fp, kek_version, nonce, wrapped)).fetchone() \
        is not None


def read(conn: Conn, tenant: str, key_ids: Sequence[str]) -> list[Row]:
    return conn.execute(f"SELECT {_COLS} FROM mv_content_keys WHERE tenant_id = %s AND "
                        "key_id = ANY(%s)", (tenant, list(key_ids))).fetchall()


def destroy(conn: Conn, tenant: str, key_ids: Sequence[str]) -> None:
    """The wrapped bytes set to NULL (tombstones stay; unknown ids get one), then a
    ``VACUUM`` of the table so the dead row versions' space is reused."""
    conn.execute(
        "INSERT INTO mv_content_keys (tenant_id, key_id, scope_fp, destroyed_at) "
        "SELECT %s, k, '', now() FROM unnest(%s::text[]) k "
        "ON CONFLICT (key_id) DO UPDATE SET nonce = NULL, wrapped = NULL, kek_version = NULL, "
        "destroyed_at = coalesce(mv_content_keys.destroyed_at, now())",
        (tenant, list(key_ids)))
    with contextlib.suppress(psycopg.Error):  # not the owner? the KEK protects old rows
        conn.execute("VACUUM mv_content_keys")


def rewrap(conn: Conn, key_id: str, kek_version: int, nonce: bytes, wrapped: bytes) -> None:
    conn.execute("UPDATE mv_content_keys SET kek_version = %s, nonce = %s, wrapped = %s "
                 "WHERE key_id = %s AND destroyed_at IS NULL",
                 (kek_version, nonce, wrapped, key_id))


def entries(conn: Conn, tenant: str | None) -> list[Row]:
    return conn.execute(f"SELECT {_COLS} FROM mv_content_keys WHERE (%s::text IS NULL OR "
                        "tenant_id = %s) ORDER BY tenant_id, key_id", (tenant, tenant)).fetchall()


def owned(conn: Conn, tenant: str, scope_fp: str, subject_fp: str | None) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT key_id FROM mv_content_keys WHERE tenant_id = %s AND scope_fp = %s AND "
        "(%s::text IS NULL OR subject_fp = %s) AND destroyed_at IS NULL ORDER BY key_id",
        (tenant, scope_fp, subject_fp, subject_fp)).fetchall()]


def versions(conn: Conn) -> dict[int, int]:
    return {r[0]: r[1] for r in conn.execute(
        "SELECT kek_version, count(*) FROM mv_content_keys WHERE destroyed_at IS NULL "
        "GROUP BY kek_version").fetchall()}


SEAL_LOCK = 0x6D76_7365_616C  # "mvseal": one in-place sealing at a time (app database)


def try_lock_seal(conn: Conn) -> bool:
    """The in-place sealing's session lock (:func:`mnemovault.subjects.keys.seal_existing`)
    on ``conn`` (an owner connection of the application database)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (SEAL_LOCK,)).fetchone()
    return bool(row and row[0])
