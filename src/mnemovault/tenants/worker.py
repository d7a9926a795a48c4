"""The outbox worker: processes events per tenant, under that tenant's row-level security.

The one cross-tenant step is finding which tenants have pending events (the owner's
connection, :func:`mnemovault.store.outbox.tenants_with_pending`); everything after runs
on application connections with the tenant set, one event at a time: claim it for a lease
(two workers never take the same event; one that died leaves it to be taken up again when
the lease ends), do the work, then close the event in the same transaction as the
outcome it records. A failed attempt is retried later (after ``RETRY_SECONDS`` times the
attempts so far), up to :data:`MAX_ATTEMPTS`; then the event is closed as failed.

Kinds handled: ``TENANT_EXPORT`` (:mod:`mnemovault.tenants.export`). Events of other kinds
are left for whoever handles them.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from mnemovault.errors import InternalError, MnemoError
from mnemovault.runtime import Runtime
from mnemovault.store import outbox
from mnemovault.tenants import export

log = logging.getLogger(__name__)

KINDS = (export.KIND,)
MAX_ATTEMPTS = 3
LEASE_SECONDS = 600.0  # renewed after every batch a job writes
RETRY_SECONDS = 60.0


def process_pending(rt: Runtime, *, tenant: str | None = None,
                    progress: export.Progress | None = None,
                    max_events: int | None = None) -> list[dict[str, Any]]:
    """Process pending events (of every tenant, or of ``tenant`` only), oldest first per
    tenant, up to ``max_events``. Returns one result per event handled: ``{"tenant",
    "event", "kind", "job_id", "state"}`` (``done``, ``skipped`` for a job already finished,
    ``queued`` after a failed attempt that will be retried, ``failed`` after the last one)
    with ``destination`` and ``manifest_sha256`` when done, ``error`` when not. Never
    raises for one event's failure: it is recorded on the event and the job."""
    tenants = [tenant] if tenant is not None else outbox.tenants_with_pending(rt.db.url, KINDS)
    results: list[dict[str, Any]] = []
    for t in tenants:
        while max_events is None or len(results) < max_events:
            with rt.db.transaction(t) as conn:
                event = outbox.claim(conn, t, KINDS, LEASE_SECONDS)
            if event is None:
                break
            results.append(_handle(rt, t, event, progress))
    return results


def _handle(rt: Runtime, tenant: str, event: dict[str, Any],
            progress: export.Progress | None) -> dict[str, Any]:
    base = {"tenant": tenant, "event": event["id"], "kind": event["kind"]}
    try:
        job_id = uuid.UUID(str(event["payload"].get("job_id")))
    except ValueError:
        with rt.db.transaction(tenant) as conn:
            outbox.failed(conn, tenant, event["id"], "validation: payload.job_id is not a "
                          "UUID", final=True, retry_after_seconds=0)
        return {**base, "job_id": None, "state": "failed",
                "error": {"code": "validation", "message": "payload.job_id: not a UUID"}}
    base["job_id"] = str(job_id)
    try:
        counts = export.start(rt, tenant, job_id)
        if counts is None:
            with rt.db.transaction(tenant) as conn:
                outbox.done(conn, tenant, event["id"])
            return {**base, "state": "skipped"}
        outcome = export.run(
            rt, tenant, job_id, counts, progress=progress,
            heartbeat=lambda conn: outbox.extend(conn, tenant, event["id"], LEASE_SECONDS))
        with rt.db.transaction(tenant) as conn:
            export.finish(conn, tenant, job_id, outcome)
            outbox.done(conn, tenant, event["id"])
    except Exception as exc:  # recorded on the event and the job; the worker goes on
        err = exc if isinstance(exc, MnemoError) else InternalError(
            f"internal: {type(exc).__name__}")
        final = int(event["attempts"]) >= MAX_ATTEMPTS
        message = f"{err.code}: {err.message}"
        log.error("outbox event %s of tenant %s failed (attempt %s): %s", event["id"],
                  tenant, event["attempts"], err.code)
        with rt.db.transaction(tenant) as conn:
            export.fail(conn, tenant, job_id, message, final=final)
            outbox.failed(conn, tenant, event["id"], message, final=final,
                          retry_after_seconds=RETRY_SECONDS * int(event["attempts"]))
        return {**base, "state": "failed" if final else "queued", "error": err.to_dict()}
    return {**base, "state": "done", "destination": outcome.destination,
            "manifest_sha256": outcome.manifest_sha256, "rows": outcome.rows}
