"""SQL of the ``tenants`` and ``api_keys`` tables."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from mnemovault.store.db import owner_connection

Conn = psycopg.Connection[Any]


def ensure(conn: Conn, tenant: str) -> None:
    """Create the tenant row if it does not exist (idempotent)."""
    conn.execute(
        "INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT (tenant_id) DO NOTHING",
        (tenant,))


def live(url: str) -> list[str]:
    """Every tenant not soft-deleted, sorted. Operator path: runs on its own connection as
    the database owner (the app role sees no tenant row without a tenant set)."""
    with owner_connection(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT tenant_id FROM tenants WHERE deleted_at IS NULL ORDER BY tenant_id")]


def insert_key(conn: Conn, *, tenant: str, key_id: uuid.UUID, key_hash: bytes, role: str,
               name: str | None, permissions: list[str] | None = None,
               scope: str | None = None, subject: str | None = None) -> None:
    """Store a new API key (its secret's hash only), optionally narrowed to
    ``permissions`` (None: the role's), one ``scope`` and one ``subject`` (as stored:
    pseudonymised)."""
    conn.execute(
        "INSERT INTO api_keys (tenant_id, key_id, key_hash, role, name, permissions, scope, "
        "subject_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (tenant, key_id, key_hash, role, name, permissions, scope, subject))


def key(conn: Conn, tenant: str, key_id: uuid.UUID) -> dict[str, Any] | None:
    """An API key with its tenant's state: ``key_hash``, ``role``, ``permissions``,
    ``scope``, ``subject_id``, ``revoked_at`` and the tenant's ``deleted_at``; or None."""
    return conn.execute(
        "SELECT k.key_hash, k.role, k.permissions, k.scope, k.subject_id, k.revoked_at, "
        "t.deleted_at FROM api_keys k JOIN tenants t USING (tenant_id) "
        "WHERE k.tenant_id = %s AND k.key_id = %s",
        (tenant, key_id)).fetchone()
