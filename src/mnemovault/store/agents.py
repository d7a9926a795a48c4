"""SQL of self-registered agents (:mod:`mnemovault.agents`): a key's origin, and how many
memories an agent's scope holds."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def set_origin(conn: Conn, tenant: str, key_id: uuid.UUID, origin: str) -> None:
    """Record how the key was made (``issued`` or ``self_registered``)."""
    conn.execute("UPDATE api_keys SET origin = %s WHERE tenant_id = %s AND key_id = %s",
                 (origin, tenant, key_id))


def origins(conn: Conn, tenant: str, key_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """``{key id: origin}`` of the tenant's keys among ``key_ids``."""
    if not key_ids:
        return {}
    rows = conn.execute("SELECT key_id, origin FROM api_keys WHERE tenant_id = %s "
                        "AND key_id = ANY(%s)", (tenant, list(key_ids))).fetchall()
    return {r["key_id"]: r["origin"] for r in rows}


def agent(conn: Conn, tenant: str, key_id: uuid.UUID) -> dict[str, Any] | None:
    """``{"origin", "scope"}`` of one key (its scope as stored), None if unknown."""
    row: dict[str, Any] | None = conn.execute(
        "SELECT origin, scope FROM api_keys WHERE tenant_id = %s AND key_id = %s",
        (tenant, key_id)).fetchone()
    return row


def stored(conn: Conn, tenant: str, scope: str) -> int:
    """Memories of ``scope`` (as stored) that are not superseded versions."""
    row = conn.execute("SELECT count(*) AS n FROM memories WHERE tenant_id = %s "
                       "AND scope = %s AND status <> 'superseded'", (tenant, scope)).fetchone()
    return int(row["n"]) if row else 0
