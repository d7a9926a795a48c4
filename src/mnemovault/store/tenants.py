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


def touch_key(conn: Conn, tenant: str, key_id: uuid.UUID) -> None:
    """Record that a key was just used: ``last_used_at`` = now, written at most once a
    minute per key (so authenticating does not write on every request)."""
    conn.execute(
        "UPDATE api_keys SET last_used_at = now() WHERE tenant_id = %s AND key_id = %s "
        "AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
        (tenant, key_id))


def keys_page(conn: Conn, tenant: str, *, after: uuid.UUID | None,
              limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` API keys of ``tenant``, oldest first (``created_at``, then
    ``key_id``), after the key ``after`` (None: from the start). Metadata only: never the
    hash. ``scope`` and ``subject_id`` as stored (pseudonymised)."""
    cols = ("SELECT key_id, role, name, permissions, scope, subject_id, created_at, "
            "last_used_at, revoked_at FROM api_keys WHERE tenant_id = %s")
    if after is None:
        return conn.execute(cols + " ORDER BY created_at, key_id LIMIT %s",
                            (tenant, limit)).fetchall()
    return conn.execute(
        cols + " AND (created_at, key_id) > (SELECT created_at, key_id FROM api_keys "
        "WHERE tenant_id = %s AND key_id = %s) ORDER BY created_at, key_id LIMIT %s",
        (tenant, tenant, after, limit)).fetchall()


def key_exists(conn: Conn, tenant: str, key_id: uuid.UUID) -> bool:
    """Whether ``tenant`` has a key ``key_id`` (revoked or not)."""
    return conn.execute("SELECT 1 FROM api_keys WHERE tenant_id = %s AND key_id = %s",
                        (tenant, key_id)).fetchone() is not None


def revoke_key(conn: Conn, tenant: str, key_id: uuid.UUID) -> dict[str, Any] | None:
    """Revoke a key (idempotent): ``revoked_at`` (kept if already set), ``role`` and
    ``already_revoked``; None if ``tenant`` has no such key. Locks the row, so two
    concurrent revocations agree on which one revoked it."""
    row = conn.execute(
        "SELECT role, revoked_at FROM api_keys WHERE tenant_id = %s AND key_id = %s "
        "FOR UPDATE", (tenant, key_id)).fetchone()
    if row is None:
        return None
    if row["revoked_at"] is not None:
        return {**row, "already_revoked": True}
    done = conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE tenant_id = %s AND key_id = %s "
        "RETURNING revoked_at", (tenant, key_id)).fetchone()
    assert done is not None  # the row is locked: it is still there
    return {"role": row["role"], "revoked_at": done["revoked_at"], "already_revoked": False}
