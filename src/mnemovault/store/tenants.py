"""SQL of the ``tenants``, ``api_keys`` and ``tenant_exports`` tables, the reads of a tenant
export, and the hard delete of a tenant.

Tenant-scoped functions run on an application connection under row-level security. The
hard delete (:func:`purge_connection`, :func:`tenant_tables`, :func:`delete_rows`, ...)
is an operator path on the owner's connection: the application role may never delete
audit rows, keys or tenants, and the purge must reach every table with a ``tenant_id``
column, including tables added after this module was written (read from the catalog).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from mnemovault.store.db import owner_connection

Conn = psycopg.Connection[Any]

SYSTEM_TENANT = "_system"
"""The reserved tenant whose audit chain keeps what outlives a hard-deleted tenant
(migration 0007). Outside the application's tenant id rule: no caller can name it."""

PURGE_LOCK = 0x6D76_7075_7267  # "mvpurg": pg_try_advisory_lock key of the purge job


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
            "SELECT tenant_id FROM tenants WHERE deleted_at IS NULL AND tenant_id <> %s "
            "ORDER BY tenant_id", (SYSTEM_TENANT,))]


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


def touch_key(conn: Conn, tenant: str, key_id: uuid.UUID) -> bool:
    """Record that a key was just used: ``last_used_at`` = now, written at most once a
    minute per key (so authenticating does not write on every request). True when this
    statement wrote it."""
    return conn.execute(
        "UPDATE api_keys SET last_used_at = now() WHERE tenant_id = %s AND key_id = %s "
        "AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
        (tenant, key_id)).rowcount == 1


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


def key_metadata(conn: Conn, tenant: str, key_id: uuid.UUID) -> dict[str, Any] | None:
    """One API key's metadata (the columns of :func:`keys_page`: never the hash), revoked
    or not; None if ``tenant`` has no such key."""
    return conn.execute(
        "SELECT key_id, role, name, permissions, scope, subject_id, created_at, "
        "last_used_at, revoked_at FROM api_keys WHERE tenant_id = %s AND key_id = %s",
        (tenant, key_id)).fetchone()


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


def live_owner_keys(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """The tenant's unrevoked ``owner`` keys (``key_id``, ``role``, ``permissions``,
    ``scope``, ``subject_id``), locked ``FOR UPDATE`` in key id order: two revocations
    that each leave the other key as the tenant's last owner run one after the other, and
    the second sees the first's."""
    return conn.execute(
        "SELECT key_id, role, permissions, scope, subject_id FROM api_keys "
        "WHERE tenant_id = %s AND role = 'owner' AND revoked_at IS NULL "
        "ORDER BY key_id FOR UPDATE", (tenant,)).fetchall()


# -- soft delete ---------------------------------------------------------------------------
def lifecycle(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """The tenant's ``created_at``, ``deleted_at`` and ``delete_after``; None if absent."""
    return conn.execute(
        "SELECT created_at, deleted_at, delete_after FROM tenants WHERE tenant_id = %s",
        (tenant,)).fetchone()


def soft_delete(conn: Conn, tenant: str, *, now: datetime,
                delete_after: datetime) -> dict[str, Any] | None:
    """Mark the tenant deleted at ``now``, to be purged from ``delete_after`` (a tenant
    already marked keeps its times): ``{"deleted_at", "delete_after", "already_deleted"}``,
    or None if the tenant does not exist. Locks the row, so concurrent requests agree."""
    row = conn.execute(
        "SELECT deleted_at, delete_after FROM tenants WHERE tenant_id = %s FOR UPDATE",
        (tenant,)).fetchone()
    if row is None:
        return None
    if row["deleted_at"] is not None:
        return {**row, "already_deleted": True}
    conn.execute("UPDATE tenants SET deleted_at = %s, delete_after = %s WHERE tenant_id = %s",
                 (now, delete_after, tenant))
    return {"deleted_at": now, "delete_after": delete_after, "already_deleted": False}


def lock_lifecycle(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """:func:`lifecycle`, with the row locked until the transaction ends."""
    return conn.execute(
        "SELECT created_at, deleted_at, delete_after FROM tenants WHERE tenant_id = %s "
        "FOR UPDATE", (tenant,)).fetchone()


def restore(conn: Conn, tenant: str) -> None:
    """Undo a soft delete (the caller holds the row locked)."""
    conn.execute("UPDATE tenants SET deleted_at = NULL, delete_after = NULL "
                 "WHERE tenant_id = %s", (tenant,))


# -- export jobs ---------------------------------------------------------------------------
_JOB = ("SELECT job_id, state, destination, requested_by, attempts, files_done, files_total, "
        "rows_done, rows_total, manifest_sha256, error, created_at, started_at, finished_at "
        "FROM tenant_exports")


def insert_export(conn: Conn, tenant: str, job_id: uuid.UUID, *, destination: str,
                  requested_by: str) -> None:
    """A new export job, ``queued``."""
    conn.execute("INSERT INTO tenant_exports (tenant_id, job_id, destination, requested_by) "
                 "VALUES (%s, %s, %s, %s)", (tenant, job_id, destination, requested_by))


def export_job(conn: Conn, tenant: str, job_id: uuid.UUID) -> dict[str, Any] | None:
    """One export job (every column but the tenant), or None."""
    return conn.execute(_JOB + " WHERE tenant_id = %s AND job_id = %s",
                        (tenant, job_id)).fetchone()


def start_export(conn: Conn, tenant: str, job_id: uuid.UUID, *, rows_total: int,
                 files_total: int) -> None:
    """The job is ``running`` (one more attempt), with its totals; progress restarts."""
    conn.execute(
        "UPDATE tenant_exports SET state = 'running', attempts = attempts + 1, "
        "started_at = now(), rows_total = %s, files_total = %s, rows_done = 0, "
        "files_done = 0, error = NULL WHERE tenant_id = %s AND job_id = %s",
        (rows_total, files_total, tenant, job_id))


def export_progress(conn: Conn, tenant: str, job_id: uuid.UUID, *, rows_done: int,
                    files_done: int) -> None:
    """Record how far the job is."""
    conn.execute("UPDATE tenant_exports SET rows_done = %s, files_done = %s "
                 "WHERE tenant_id = %s AND job_id = %s",
                 (rows_done, files_done, tenant, job_id))


def finish_export(conn: Conn, tenant: str, job_id: uuid.UUID, *, manifest_sha256: str,
                  destination: str, rows_done: int, files_done: int) -> None:
    """The job is ``done``, with where it went, the manifest's SHA-256 (hex) and its final
    counts (the totals too: rows written meanwhile, an optional file)."""
    conn.execute(
        "UPDATE tenant_exports SET state = 'done', finished_at = now(), manifest_sha256 = %s, "
        "destination = %s, rows_done = %s, rows_total = %s, files_done = %s, "
        "files_total = %s, error = NULL WHERE tenant_id = %s AND job_id = %s",
        (manifest_sha256, destination, rows_done, rows_done, files_done, files_done, tenant,
         job_id))


def fail_export(conn: Conn, tenant: str, job_id: uuid.UUID, *, error: str,
                final: bool) -> None:
    """Record a failed attempt: ``failed`` when ``final``, else ``queued`` for a retry."""
    conn.execute(
        "UPDATE tenant_exports SET state = CASE WHEN %s THEN 'failed' ELSE 'queued' END, "
        "finished_at = CASE WHEN %s THEN now() END, error = %s "
        "WHERE tenant_id = %s AND job_id = %s", (final, final, error, tenant, job_id))


# -- what an export reads (the tenant named, and under row-level security) ----------------
def export_counts(conn: Conn, tenant: str) -> dict[str, int]:
    """Rows of each exported kind: ``memories``, ``vault``, ``audit``, ``checkpoints``."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM memories WHERE tenant_id = %(t)s) AS memories, "
        "(SELECT count(*) FROM pii_values WHERE tenant_id = %(t)s) AS vault, "
        "(SELECT count(*) FROM audit_log WHERE tenant_id = %(t)s) AS audit, "
        "(SELECT count(*) FROM audit_checkpoints WHERE tenant_id = %(t)s) AS checkpoints",
        {"t": tenant}).fetchone()
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def memories_after(conn: Conn, tenant: str, after: uuid.UUID | None,
                   limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` memories with ``id > after`` (None: from the first), by id, each as
    ``{"id": uuid, "row": {column: JSON value}}``: every column but the embedding and the
    derived full-text columns (columns added by later migrations are included as they
    come); ``content``, ``key`` and ``provenance`` opened from their sealed forms
    (``[erased]`` under a destroyed key)."""
    rows = conn.execute(
        "SELECT id, to_jsonb(m) - 'embedding' - 'tsv' - 'tsv_length' - 'terms_keyed' "
        "- 'conversation' "
        "- 'tenant_id' - 'content_sealed' - 'key_sealed' - 'provenance_sealed' AS row, "
        "content, key, provenance, key_id, content_sealed, key_sealed, provenance_sealed "
        "FROM memories m WHERE tenant_id = %s AND (%s::uuid IS NULL OR id > %s) "
        "ORDER BY id LIMIT %s", (tenant, after, after, limit)).fetchall()
    for r in rows:  # the content as opened by the row factory (sealed: its plaintext)
        r["row"]["content"] = r.pop("content")
        r["row"]["key"] = r.pop("key")
        r["row"]["provenance"] = r.pop("provenance")
        for k in ("key_id", "key_hash"):
            r.pop(k, None)
        r.pop("erased", None)
    return list(rows)


def vault_after(conn: Conn, tenant: str, after: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` vault entries with ``placeholder > after``, by placeholder, as
    stored (still encrypted): ``placeholder``, ``kind``, ``created_at``, ``shredded_at``,
    ``nonce``, ``ciphertext``, ``fingerprint``, ``ntokens``, ``head`` and the entry's wrapped
    data key (``kek_version``, ``dek_nonce``, ``wrapped_dek``; None once shredded)."""
    return list(conn.execute(
        "SELECT v.placeholder, v.kind, v.created_at, v.shredded_at, v.nonce, v.ciphertext, "
        "v.fingerprint, v.ntokens, v.head, d.kek_version, d.nonce AS dek_nonce, d.wrapped_dek "
        "FROM pii_values v LEFT JOIN pii_deks d USING (tenant_id, placeholder) "
        "WHERE v.tenant_id = %s AND v.placeholder > %s ORDER BY v.placeholder LIMIT %s",
        (tenant, after, limit)).fetchall())


def wrapped_secrets(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """The tenant's wrapped secret (``kek_version``, ``nonce``, ``wrapped_secret``)."""
    return list(conn.execute(
        "SELECT kek_version, nonce, wrapped_secret, created_at FROM pii_tenant_keys "
        "WHERE tenant_id = %s", (tenant,)).fetchall())


def checkpoints(conn: Conn, tenant: str) -> list[dict[str, Any]]:
    """Every signed checkpoint of the tenant's audit chain, by size."""
    return list(conn.execute(
        "SELECT size, root, note, created_at FROM audit_checkpoints WHERE tenant_id = %s "
        "ORDER BY size", (tenant,)).fetchall())


# -- hard delete (operator path: the owner's connection) -----------------------------------
@contextmanager
def purge_connection(url: str) -> Iterator[Conn | None]:
    """An owner connection (autocommit; open a transaction per tenant with
    ``conn.transaction()``) holding the purge job's session advisory lock, or None when
    another process holds it (then nothing is to be done here)."""
    with owner_connection(url, autocommit=True, row_factory=dict_row) as conn:
        got = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (PURGE_LOCK,)).fetchone()
        if not (got and got["got"]):
            yield None
            return
        try:
            yield conn
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (PURGE_LOCK,))


def expired(conn: Conn, now: datetime) -> list[str]:
    """Soft-deleted tenants whose grace period has ended by ``now``, oldest first."""
    return [r["tenant_id"] for r in conn.execute(
        "SELECT tenant_id FROM tenants WHERE deleted_at IS NOT NULL AND delete_after <= %s "
        "AND tenant_id <> %s ORDER BY delete_after, tenant_id", (now, SYSTEM_TENANT))]


def lock_expired(conn: Conn, tenant: str, now: datetime) -> dict[str, Any] | None:
    """The tenant's row, locked, if it is soft-deleted and expired by ``now`` (a concurrent
    cancel or purge that got there first makes this None)."""
    return conn.execute(
        "SELECT deleted_at, delete_after FROM tenants WHERE tenant_id = %s "
        "AND deleted_at IS NOT NULL AND delete_after <= %s FOR UPDATE",
        (tenant, now)).fetchone()


APPEND_AFTER_MEMORIES = ("lexical_stat_deltas",)
"""Tables the triggers on ``memories`` append to when memories are deleted (migration
0016's statistics deltas): a purge empties them once more after every table
(:func:`delete_appended`)."""


def tenant_tables(conn: Conn) -> list[str]:
    """Every table of the current schema with a ``tenant_id`` column (partitions left to
    their parent), ordered so that a table comes before every table it references by a
    foreign key (delete in this order and no foreign key is ever violated); ``tenants``
    last."""
    tables = {r["relname"] for r in conn.execute(
        "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE a.attname = 'tenant_id' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') "
        "AND NOT c.relispartition AND n.nspname = current_schema()")}
    refs: dict[str, set[str]] = {t: set() for t in tables}
    for r in conn.execute(
            "SELECT c.relname AS child, p.relname AS parent FROM pg_constraint k "
            "JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class p ON p.oid = k.confrelid "
            "WHERE k.contype = 'f'"):
        if r["child"] in tables and r["parent"] in tables and r["child"] != r["parent"]:
            refs[r["child"]].add(r["parent"])
    order: list[str] = []
    referenced_by: dict[str, set[str]] = {t: set() for t in tables}
    for child, parents in refs.items():
        for p in parents:
            referenced_by[p].add(child)
    left = set(tables)
    while left:  # Kahn: take tables no remaining table references
        ready = sorted(t for t in left if not (referenced_by[t] & left))
        if not ready:  # a cycle of foreign keys: delete the rest in name order
            ready = sorted(left)
        order += [t for t in ready if t != "tenants"]
        left -= set(ready)
    return [*order, "tenants"] if "tenants" in tables else order


def delete_rows(conn: Conn, table: str, tenant: str) -> int:
    """Delete every row of ``tenant`` in ``table`` (a name from :func:`tenant_tables`);
    how many."""
    cur = conn.execute(sql.SQL("DELETE FROM {} WHERE tenant_id = %s").format(
        sql.Identifier(table)), (tenant,))
    return int(cur.rowcount)


def delete_appended(conn: Conn, tenant: str) -> None:
    """After :func:`delete_rows` of every table: delete what deleting ``tenant``'s memories
    appended (:data:`APPEND_AFTER_MEMORIES`; not rows the tenant had, so not counted)."""
    for table in APPEND_AFTER_MEMORIES:
        conn.execute(sql.SQL("DELETE FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(table)), (tenant,))


def chain_state(conn: Conn, tenant: str) -> dict[str, Any]:
    """The tenant's audit chain as it stands: ``seq`` and ``head_hash`` of its head (0 and
    None without one) and its latest checkpoint (``size``, ``root``, ``note``,
    ``created_at``; None without one). Names the tenant (owner connection)."""
    head = conn.execute("SELECT seq, head_hash FROM audit_heads WHERE tenant_id = %s",
                        (tenant,)).fetchone()
    cp = conn.execute("SELECT size, root, note, created_at FROM audit_checkpoints "
                      "WHERE tenant_id = %s ORDER BY size DESC LIMIT 1", (tenant,)).fetchone()
    return {"seq": int(head["seq"]) if head else 0,
            "head_hash": bytes(head["head_hash"]) if head else None, "checkpoint": cp}


# A purge's first step leaves this outbox event on the tenant's own shard (with the
# ``TENANT_PURGE`` row's details) until its system row is written: what a purge stopped
# between its steps resumes from (no outbox worker claims this kind).
PURGE_PENDING = "TENANT_PURGE_PENDING"


def pending_purge(conn: Conn, tenant: str) -> dict[str, Any] | None:
    """The details of the tenant's purge whose first step committed, or None."""
    row = conn.execute(
        "SELECT payload FROM outbox WHERE tenant_id = %s AND kind = %s ORDER BY id LIMIT 1",
        (tenant, PURGE_PENDING)).fetchone()
    return None if row is None else dict(row["payload"])


def mark_purge(conn: Conn, tenant: str, details: dict[str, Any]) -> None:
    """Record the purge's details on the tenant's shard (:data:`PURGE_PENDING`)."""
    conn.execute("INSERT INTO outbox (tenant_id, kind, payload) VALUES (%s, %s, %s)",
                 (tenant, PURGE_PENDING, Jsonb(details)))


def system_purge_seq(conn: Conn, purge_id: str) -> int | None:
    """The seq of the system chain's ``TENANT_PURGE`` row of purge ``purge_id``, if it was
    written (owner connection; the row body is canonical JSON)."""
    row = conn.execute(
        "SELECT seq FROM audit_log WHERE tenant_id = %s AND "
        "convert_from(row_bytes, 'UTF8') LIKE %s ORDER BY seq LIMIT 1",
        (SYSTEM_TENANT, f'%"purge_id":"{purge_id}"%')).fetchone()
    return None if row is None else int(row["seq"])
