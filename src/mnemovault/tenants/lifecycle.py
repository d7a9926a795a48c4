"""Tenant delete: soft delete with a grace period (typed confirmation), cancel, and the
hard delete (purge) of tenants whose grace period has ended (SPEC section 10).

* :func:`delete` sets ``deleted_at = now`` and ``delete_after = now +
  DELETE_RETENTION_DAYS`` (default 30) and appends ``TENANT_DELETE`` to the tenant's own
  chain, in one transaction. From that commit on, every API key of the tenant fails to
  authenticate (:func:`mnemovault.keys.authenticate`), except that a key holding
  ``admin:delete`` (an owner's) may still call :func:`cancel_delete` over HTTP.
* :func:`cancel_delete` during the grace period clears both times (``TENANT_DELETE_CANCEL``);
  the keys work again.
* :func:`purge_expired` (the scheduled job, :mod:`.schedule`) hard-deletes every tenant
  whose ``delete_after`` has passed, table by table: every table of the schema with a
  ``tenant_id`` column, read from the catalog at run time (so tables added by later
  migrations are covered), children before the tables they reference, ``tenants`` last;
  the tenant's own audit rows, checkpoints and Merkle nodes included. What outlives the
  tenant is one ``TENANT_PURGE`` row in the audit chain of the reserved system tenant
  ``_system`` (:data:`~mnemovault.store.tenants.SYSTEM_TENANT`, migration 0007): the
  tenant id, the rows deleted per table, the head of its chain (seq, hash) and its last
  signed checkpoint (size, root, signed note; signed at the final size just before, under
  the tenant's row-level security, when a signing key is configured), so the chain's
  final state stays on record in a chain that goes on: whoever holds an older checkpoint
  of it can see that it ended, by a purge, at a signed size and head, rather than being
  silently truncated. The purge of one tenant and that row are written in steps that
  each commit on one node (no two-phase commit under Citus; :func:`_purge_one`), recorded
  on the tenant's shard so that a run stopped between them is resumed by the next one
  (the row is never lost nor written twice). The job runs
  on the owner's connection (the application role may not delete audit rows, keys or
  tenants) and holds a PostgreSQL advisory lock for the
  whole run, so two processes never purge at once: the second returns ``ran: False``.
  After commit it removes the tenant's local audit mirror file, its erasure-ledger file
  (``<ledger_dir>/<tenant>.jsonl``: every id, placeholder and subject fingerprint the
  tenant erased) and local export archives (S3 archives are the deployer's to expire,
  e.g. with a bucket lifecycle rule), and records the purge in the ledger directory's
  system file (:data:`mnemovault.subjects.ledger.PURGES_FILE`: tenant id, time, system
  audit seq; outside the database, so a restore does not roll it back). A process killed
  between a tenant's commit and these steps leaves them to the next run: every run starts
  with :func:`finish_purges`, which does them for each ``TENANT_PURGE`` row of the system
  chain that the purge file does not record yet, and syncs the system chain's mirror.
* Restore: a backup taken before a purge brings the whole tenant back (and with it keys
  that work again). Every purge run therefore starts with :func:`reapply_purges`: each
  recorded tenant that exists again and was *created before* its recorded purge (a
  restored row; a tenant id reused later for a new tenant is newer and left alone) is
  soft-deleted again, due at once (``TENANT_DELETE`` row with ``reapplied_purge``), and
  purged in the same run. Until that run its keys work; run the purge job right after a
  restore (:func:`restored_purges` lists what it would purge again).

Every time is injectable (``now=``) so tests can move past the grace period.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from mnemovault.audit import jsonl
from mnemovault.audit import log as audit
from mnemovault.audit.chain import parse_ts
from mnemovault.auth import Principal
from mnemovault.errors import InternalError, MnemoError, NotFound, Refused
from mnemovault.runtime import Runtime
from mnemovault.store import audit as audit_store
from mnemovault.store import tenants as store
from mnemovault.subjects import ledger as ledger_mod
from mnemovault.tenants.common import check_confirmation, local_root, own_tenant

log = logging.getLogger(__name__)

SYSTEM_TENANT = store.SYSTEM_TENANT


def _iso(t: datetime | None) -> str | None:
    return t.astimezone(UTC).isoformat() if t is not None else None


def _state(tenant: str, row: dict[str, Any], now: datetime) -> dict[str, Any]:
    deleted, after = row["deleted_at"], row["delete_after"]
    return {"tenant": tenant, "deleted": deleted is not None, "deleted_at": deleted,
            "delete_after": after,
            "grace_remaining_seconds": (max(0.0, (after - now).total_seconds())
                                        if after is not None else None)}


def delete(rt: Runtime, who: Principal, tenant: str, *, confirm: str | None,
           now: datetime | None = None, request_id: str | None = None) -> dict[str, Any]:
    """Soft-delete the caller's tenant (``admin:delete``, owner only; typed confirmation).

    Returns ``{"tenant", "deleted": True, "deleted_at", "delete_after",
    "grace_remaining_seconds", "already_deleted", "audit_seq"}``. A tenant already
    soft-deleted keeps its times (``already_deleted: True``, no new audit row).

    Raises:
        Forbidden, ValidationError, NotFound: as :func:`own_tenant`.
        Refused: a wrong confirmation.
    """
    own_tenant(who, tenant, "admin:delete", "tenant delete")
    check_confirmation(tenant, confirm)
    now = now or datetime.now(UTC)
    days = rt.settings.delete_retention_days
    seq = None
    with rt.db.transaction(tenant) as conn:
        row = store.soft_delete(conn, tenant, now=now, delete_after=now + timedelta(days=days))
        if row is None:
            raise NotFound("tenant_id: no such tenant", field="tenant_id")
        if not row["already_deleted"]:
            seq = audit.append(conn, tenant=tenant, operation="TENANT_DELETE", actor=who.actor,
                               agent=who.agent, request_id=request_id,
                               details={"delete_after": _iso(row["delete_after"]),
                                        "retention_days": days})
    return {**_state(tenant, row, now), "already_deleted": row["already_deleted"],
            "audit_seq": seq}


def cancel_delete(rt: Runtime, who: Principal, tenant: str, *, now: datetime | None = None,
                  request_id: str | None = None) -> dict[str, Any]:
    """Cancel a pending soft delete of the caller's tenant during its grace period
    (``admin:delete``); its keys work again. Idempotent: a tenant that is not deleted
    answers ``cancelled: False`` and changes nothing.

    Returns ``{"tenant", "deleted": False, ..., "cancelled", "audit_seq"}``.

    Raises:
        Forbidden, ValidationError, NotFound: as :func:`own_tenant`.
        Refused: the grace period is over (the purge may already be under way).
    """
    own_tenant(who, tenant, "admin:delete", "tenant delete")
    now = now or datetime.now(UTC)
    with rt.db.transaction(tenant) as conn:
        row = store.lock_lifecycle(conn, tenant)
        if row is None:
            raise NotFound("tenant_id: no such tenant", field="tenant_id")
        if row["deleted_at"] is None:
            return {**_state(tenant, row, now), "cancelled": False, "audit_seq": None}
        if row["delete_after"] is not None and row["delete_after"] <= now:
            raise Refused(f"tenant_id: the grace period ended at {_iso(row['delete_after'])}; "
                          "the deletion can no longer be cancelled", field="tenant_id")
        store.restore(conn, tenant)
        seq = audit.append(conn, tenant=tenant, operation="TENANT_DELETE_CANCEL",
                           actor=who.actor, agent=who.agent, request_id=request_id,
                           details={"deleted_at": _iso(row["deleted_at"]),
                                    "delete_after": _iso(row["delete_after"])})
    return {"tenant": tenant, "deleted": False, "deleted_at": None, "delete_after": None,
            "grace_remaining_seconds": None, "cancelled": True, "audit_seq": seq}


def status(rt: Runtime, who: Principal, tenant: str, *,
           now: datetime | None = None) -> dict[str, Any]:
    """Whether the caller's tenant is soft-deleted, and until when (``admin:delete``)."""
    own_tenant(who, tenant, "admin:delete", "tenant delete")
    with rt.db.transaction(tenant) as conn:
        row = store.lifecycle(conn, tenant)
    if row is None:
        raise NotFound("tenant_id: no such tenant", field="tenant_id")
    return _state(tenant, row, now or datetime.now(UTC))


# -- the hard delete -------------------------------------------------------------------------
def purge_expired(rt: Runtime, *, now: datetime | None = None) -> dict[str, Any]:
    """Hard-delete every tenant whose grace period has ended by ``now`` (operator path; see
    the module docstring). Returns ``{"ran", "now", "purged": [{"tenant", "counts",
    "rows", "audit_seq", "checkpoint"}], "errors": [{"tenant", "error"}]}``; ``ran`` is
    False (nothing done) when another process holds the purge lock. One tenant's failure
    is logged and reported; the others still go."""
    now = now or datetime.now(UTC)
    purged: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    with store.purge_connection(rt.db.url) as conn:
        if conn is None:
            return {"ran": False, "now": now, "purged": [], "errors": []}
        finish_purges(rt)  # what a run that died after its commits left undone
        reapply_purges(rt, now=now)
        for tenant in store.expired(conn, now):
            try:
                with rt.db.transaction(tenant) as own:  # sign the chain at its final size
                    audit.checkpoint_now(own, tenant)
                done = _purge_one(conn, tenant, now)
            except Exception as exc:  # one tenant's failure must not stop the others
                err = exc if isinstance(exc, MnemoError) else InternalError(
                    f"internal: {type(exc).__name__}")
                log.error("purge failed for tenant %s: %s (%s)", tenant, err.code,
                          type(exc.__cause__ or exc).__name__)
                errors.append({"tenant": tenant, "error": err.to_dict()})
                continue
            if done is not None:
                purged.append(done)
    if purged:
        _sync_system_mirror(rt)  # first: the rows that make finish_purges redo the rest
    for p in purged:
        _remove_local_copies(rt, p["tenant"])
        ledger_mod.record_purge(rt, p["tenant"], at=now, audit_seq=p["audit_seq"])
    return {"ran": True, "now": now, "purged": purged, "errors": errors}


def _sync_system_mirror(rt: Runtime) -> None:
    for hook in rt.db.after_commit:  # the system chain's JSON Lines mirror
        try:
            hook(SYSTEM_TENANT)
        except Exception:
            log.exception("after-commit hook failed for the system tenant")


def finish_purges(rt: Runtime) -> list[str]:
    """Do the after-commit steps of every purge whose process died after its commit
    (issue 29 item 6): a ``TENANT_PURGE`` row of the system chain that the ledger's purge
    file (:data:`mnemovault.subjects.ledger.PURGES_FILE`) does not record (by tenant and
    audit seq) gets, if its tenant does not exist (again), its local audit mirror, ledger
    file and export archives removed, and is then recorded; the system chain's JSON Lines
    mirror is synced. Idempotent (every step is: removing what is gone, recording once).
    A tenant that exists again keeps its files (a restore, or a new tenant with the old
    id: :func:`reapply_purges` decides), but the purge is still recorded. With
    ``MNEMOVAULT_LEDGER_FILE`` off nothing records a purge, so every run checks each purge
    row's leftovers again (removing what is there). Operator path;
    :func:`purge_expired` runs it first, under its lock. Returns the tenants finished."""
    recorded = {(e["tenant"], e["audit_seq"]) for e in ledger_mod.purges(rt)}
    missing = [r for r in purge_log(rt, limit=1_000_000)
               if (str(r["details"]["tenant_id"]), int(r["seq"])) not in recorded]
    if not missing:
        return []
    _sync_system_mirror(rt)
    done = []
    for r in missing:
        tenant = str(r["details"]["tenant_id"])
        with rt.db.transaction(tenant) as conn:
            exists = store.lifecycle(conn, tenant) is not None
            pending = exists and store.pending_purge(conn, tenant) is not None
        if pending:  # stopped between its steps: the purge loop resumes and finishes it
            continue
        if not exists:
            _remove_local_copies(rt, tenant)
        if not rt.settings.ledger_file:  # nothing records it: checked again next run
            continue
        ledger_mod.record_purge(rt, tenant, at=parse_ts(str(r["ts"])),
                                audit_seq=int(r["seq"]))
        log.warning("tenant %s: finished its purge of system audit seq %s (the run that "
                    "committed it stopped before its local files were removed)", tenant,
                    r["seq"])
        done.append(tenant)
    return done


def _purge_one(conn: Any, tenant: str, now: datetime) -> dict[str, Any] | None:
    """One tenant's hard delete and its system audit row; None when the tenant is no
    longer due (cancelled, or purged by someone else meanwhile).

    Three transactions, each on one node (under Citus the system tenant's shards are
    usually on another worker than the tenant's; one transaction over both would be a
    two-phase commit that needs both workers up):

    1. on the tenant's shards: lock its row, delete every row of it but the ``tenants``
       row, and leave the details of the ``TENANT_PURGE`` row (with a ``purge_id``) there
       as a :data:`~mnemovault.store.tenants.PURGE_PENDING` outbox event;
    2. on the system tenant's shards: append the ``TENANT_PURGE`` row (unless a row of that
       ``purge_id`` is there already: a resumed purge);
    3. on the tenant's shards: delete what is left (the event, the ``tenants`` row).

    A run stopped after step 1 or 2 leaves the tenant soft-deleted and expired with its
    event, so the next run finds it again and resumes from the event (its details, not a
    recount of the rows already gone): the system row is never lost nor written twice."""
    with conn.transaction():
        row = store.lock_expired(conn, tenant, now)
        if row is None:
            return None
        details = store.pending_purge(conn, tenant)
        resumed = details is not None
        if details is None:
            chain = store.chain_state(conn, tenant)
            counts: dict[str, int] = {}
            for table in store.tenant_tables(conn):
                n = 1 if table == "tenants" else store.delete_rows(conn, table, tenant)
                if n:
                    counts[table] = n
            store.delete_appended(conn, tenant)  # uncounted: not rows the tenant had
            cp = chain["checkpoint"]
            checkpoint = None if cp is None else {
                "size": int(cp["size"]), "root": bytes(cp["root"]).hex(), "note": cp["note"],
                "created_at": _iso(cp["created_at"])}
            details = {"tenant_id": tenant, "purge_id": str(uuid.uuid4()), "counts": counts,
                       "rows": sum(counts.values()),
                       "deleted_at": _iso(row["deleted_at"]),
                       "delete_after": _iso(row["delete_after"]),
                       "chain": {"seq": chain["seq"],
                                 "head_hash": (chain["head_hash"].hex()
                                               if chain["head_hash"] else None),
                                 "checkpoint": checkpoint}}
            store.mark_purge(conn, tenant, details)
    with conn.transaction():
        seq = store.system_purge_seq(conn, details["purge_id"]) if resumed else None
        if seq is None:
            seq = audit.append(conn, tenant=SYSTEM_TENANT, operation="TENANT_PURGE",
                               actor="system:purge", trigger="schedule", details=details)
    with conn.transaction():
        for table in store.tenant_tables(conn):
            store.delete_rows(conn, table, tenant)
        store.delete_appended(conn, tenant)
    if resumed:
        log.warning("tenant %s: resumed its purge (system audit seq %s) after a run that "
                    "stopped between its steps", tenant, seq)
    return {"tenant": tenant, "counts": details["counts"], "rows": details["rows"],
            "audit_seq": seq, "checkpoint": details["chain"]["checkpoint"]}


def _remove_local_copies(rt: Runtime, tenant: str) -> None:
    """The purged tenant's audit mirror file, erasure-ledger file and local export
    archives."""
    s = rt.settings
    mirror = Path(s.audit_jsonl_dir or Path(s.data_dir).expanduser() / "audit")
    jsonl.TenantFiles(mirror).remove(tenant)  # with any side file a restore left
    ledger_mod.remove_tenant_file(rt, tenant)
    shutil.rmtree(local_root(s) / tenant, ignore_errors=True)


def restored_purges(rt: Runtime) -> list[dict[str, Any]]:
    """The recorded purges whose tenant exists again, created before the purge (a backup
    restore brought it back; module docstring): ``tenant``, ``purged_at``, ``created_at``,
    ``deleted_at``, by tenant (the latest purge of each). Operator path."""
    latest: dict[str, datetime] = {}
    for e in ledger_mod.purges(rt):
        latest[e["tenant"]] = max(e["at"], latest.get(e["tenant"], e["at"]))
    out = []
    for tenant, at in sorted(latest.items()):
        with rt.db.transaction(tenant) as conn:
            row = store.lifecycle(conn, tenant)
        if row is not None and row["created_at"] <= at:
            out.append({"tenant": tenant, "purged_at": at, "created_at": row["created_at"],
                        "deleted_at": row["deleted_at"]})
    return out


def reapply_purges(rt: Runtime, *, now: datetime | None = None) -> list[str]:
    """Mark every tenant of :func:`restored_purges` deleted again and due at ``now`` (one
    ``TENANT_DELETE`` audit row each, ``details.reapplied_purge`` = the recorded purge
    time), so the purge that follows removes it again; the tenants marked. Operator path
    (:func:`purge_expired` calls it under its lock)."""
    now = now or datetime.now(UTC)
    marked = []
    for r in restored_purges(rt):
        tenant = r["tenant"]
        with rt.db.transaction(tenant) as conn:
            row = store.soft_delete(conn, tenant, now=now, delete_after=now)
            if row is not None and not row["already_deleted"]:
                audit.append(conn, tenant=tenant, operation="TENANT_DELETE",
                             actor="system:purge", trigger="schedule",
                             details={"delete_after": _iso(now), "retention_days": 0,
                                      "reapplied_purge": _iso(r["purged_at"])})
        log.warning("tenant %s was purged at %s and exists again (a backup restore?): "
                    "purging it again", tenant, _iso(r["purged_at"]))
        marked.append(tenant)
    return marked


def purge_log(rt: Runtime, *, limit: int = 100) -> list[dict[str, Any]]:
    """The system chain's ``TENANT_PURGE`` rows (operator path), oldest first, each the row
    body as stored (``seq``, ``ts``, ``details`` with the tenant id, counts and chain)."""
    with rt.db.transaction(SYSTEM_TENANT) as conn:
        rows = audit_store.rows_after(conn, SYSTEM_TENANT, 0, 100_000)
    bodies = [orjson.loads(bytes(r["row_bytes"])) for r in rows]
    return [b for b in bodies if b.get("operation") == "TENANT_PURGE"][-limit:]
