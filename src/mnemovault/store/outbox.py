"""SQL of the ``outbox`` table: events written in the same transaction as the change that
caused them (SPEC section 1), processed later by a worker.

A worker finds the tenants with pending events on the owner's connection
(:func:`tenants_with_pending`, the one cross-tenant read), then handles each tenant's
events under that tenant's row-level security: :func:`claim` takes the oldest pending event
of the given kinds for a lease (``FOR UPDATE SKIP LOCKED``, so two workers never take the
same event, and an event whose worker died is taken up again once its lease ends);
:func:`done` or :func:`failed` records the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.store.db import owner_connection

Conn = psycopg.Connection[Any]


def insert(conn: Conn, tenant: str, kind: str, payload: dict[str, Any]) -> int:
    """Add an event of ``kind`` with ``payload`` (JSON); its id."""
    row = conn.execute(
        "INSERT INTO outbox (tenant_id, kind, payload) VALUES (%s, %s, %s) RETURNING id",
        (tenant, kind, Jsonb(payload))).fetchone()
    assert row is not None
    return int(row["id"])


def tenants_with_pending(url: str, kinds: Sequence[str]) -> list[str]:
    """Tenants with an unprocessed event of one of ``kinds`` whose lease (if any) has ended,
    sorted. Operator path: the owner's connection (the app role sees no row without a
    tenant set)."""
    with owner_connection(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT DISTINCT tenant_id FROM outbox WHERE processed_at IS NULL "
            "AND kind = ANY(%s) AND (claimed_until IS NULL OR claimed_until < now()) "
            "ORDER BY tenant_id", (list(kinds),))]


def claim(conn: Conn, tenant: str, kinds: Sequence[str],
          lease_seconds: float) -> dict[str, Any] | None:
    """Take the tenant's oldest pending event of one of ``kinds`` for ``lease_seconds``
    (skipping events another transaction holds, and events still leased): ``{"id", "kind",
    "payload", "attempts"}`` (``attempts`` counts this one), or None."""
    return conn.execute(
        "UPDATE outbox SET attempts = attempts + 1, "
        "claimed_until = now() + make_interval(secs => %s) "
        "WHERE tenant_id = %s AND id = (SELECT id FROM outbox WHERE tenant_id = %s "
        "AND processed_at IS NULL AND kind = ANY(%s) "
        "AND (claimed_until IS NULL OR claimed_until < now()) "
        "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "RETURNING id, kind, payload, attempts",
        (lease_seconds, tenant, tenant, list(kinds))).fetchone()


def extend(conn: Conn, tenant: str, event_id: int, lease_seconds: float) -> None:
    """Renew a claimed event's lease (a long job calls this as it makes progress)."""
    conn.execute("UPDATE outbox SET claimed_until = now() + make_interval(secs => %s) "
                 "WHERE tenant_id = %s AND id = %s AND processed_at IS NULL",
                 (lease_seconds, tenant, event_id))


def done(conn: Conn, tenant: str, event_id: int) -> None:
    """Mark an event processed."""
    conn.execute("UPDATE outbox SET processed_at = now(), claimed_until = NULL, "
                 "last_error = NULL WHERE tenant_id = %s AND id = %s", (tenant, event_id))


def failed(conn: Conn, tenant: str, event_id: int, error: str, *, final: bool,
           retry_after_seconds: float) -> None:
    """Record a failed attempt: ``final`` closes the event (processed, with ``last_error``);
    otherwise it is retried once ``retry_after_seconds`` have passed."""
    conn.execute(
        "UPDATE outbox SET last_error = %s, "
        "processed_at = CASE WHEN %s THEN now() END, "
        "claimed_until = CASE WHEN %s THEN NULL "
        "ELSE now() + make_interval(secs => %s) END "
        "WHERE tenant_id = %s AND id = %s",
        (error, final, final, retry_after_seconds, tenant, event_id))


def events(conn: Conn, tenant: str, kind: str | None = None) -> list[dict[str, Any]]:
    """``tenant``'s events (of ``kind``, if given), oldest first: ``id``, ``kind``,
    ``payload``, ``created_at``, ``processed_at``, ``attempts``, ``last_error``."""
    return list(conn.execute(
        "SELECT id, kind, payload, created_at, processed_at, attempts, last_error "
        "FROM outbox WHERE tenant_id = %s AND (%s::text IS NULL OR kind = %s) ORDER BY id",
        (tenant, kind, kind)).fetchall())
