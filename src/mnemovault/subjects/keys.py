"""Content keys at every start (issue 21, items 1 and 6): seal what is not sealed yet,
and delete what lies under a destroyed key.

- :func:`seal_existing`: rows written before sealing (``memories.key_id`` NULL: a database
  made before migration 0015) are sealed in place under their owners' keys, in committed
  batches (resumable: a batch is one transaction, and the next run starts where the last
  one stopped), under a session advisory lock so one process does it at a time.
  ``mnemovault db seal`` runs it with a progress bar; every start runs it before serving.
- :func:`sweep`: rows sealed under a key the key store holds a tombstone for (an erase
  killed between its key destroy and its commit, or a database restored from a backup
  taken before an erase) are deleted through the forget path, audited (``FORGET``, or
  ``REAPPLY`` when procedure runs are among them; trigger ``key_destroyed``) with their
  ledger row. Until then they read as ``[erased]``. It runs before the sealing.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault.governance import forget as forget_mod
from mnemovault.pii import service as pii
from mnemovault.runtime import Runtime
from mnemovault.store import content_keys as content_keys_store
from mnemovault.store import memories as memory_store
from mnemovault.store import procedures as procedure_store
from mnemovault.store import tenants as tenant_store
from mnemovault.store.db import owner_connection

log = logging.getLogger(__name__)

SEAL_BATCH = 500

DEFER_SEAL: contextvars.ContextVar[bool] = contextvars.ContextVar("defer_seal", default=False)
"""Set by ``mnemovault db seal``, which runs :func:`seal_existing` itself with a progress
bar after the open."""


@dataclass
class Swept:
    tenants: dict[str, list[uuid.UUID]] = field(default_factory=dict)

    @property
    def removed(self) -> int:
        return sum(len(v) for v in self.tenants.values())


def sweep(rt: Runtime) -> Swept:
    """Delete every row sealed under a destroyed content key (module docstring)."""
    out = Swept()
    by_tenant: dict[str, list[uuid.UUID]] = {}
    for e in rt.sealer.store.destroyed():
        by_tenant.setdefault(e.tenant, []).append(uuid.UUID(e.key_id))
    pseudo = rt.settings.pii_pseudonymize
    for tenant, keys in sorted(by_tenant.items()):
        with rt.db.transaction(tenant) as conn:
            ids = memory_store.under_keys(conn, tenant, keys)
            runs = procedure_store.runs_under_keys(conn, tenant, keys)
            if not ids and not runs:
                continue
            # the runs (a subject's runs on another's procedure) through the forget path's
            # remover, which takes them out of their procedures' counters too
            res = (forget_mod.forget(conn, tenant=tenant, ids=ids, actor="system",
                                     trigger="key_destroyed", pii=rt.pii if pseudo else None)
                   if not runs else
                   forget_mod.reapply(conn, tenant=tenant, ids=ids,
                                      contributed={"procedure_runs": runs}, shred_values=[],
                                      actor="system", trigger="key_destroyed",
                                      pii=rt.pii if pseudo else None))
        out.tenants[tenant] = res.deleted
        log.warning("content keys: tenant %s had %d memories and %d procedure runs under "
                    "destroyed keys (an erase interrupted before its commit, or a restored "
                    "backup); deleted, audit seq %s", tenant, len(res.deleted), len(runs),
                    res.audit_seq)
    return out


def seal_existing(rt: Runtime, *, batch: int = SEAL_BATCH,
                  progress: Callable[[str, int], None] | None = None) -> int | None:
    """Seal every row not sealed yet (module docstring); how many were sealed, or None
    when another process holds the sealing lock (it is doing it)."""
    with owner_connection(rt.db.url, autocommit=True) as lock_conn:
        if not content_keys_store.try_lock_seal(lock_conn):
            return None
        total = 0
        for tenant in tenant_store.live(rt.db.url):
            while True:
                with rt.db.transaction(tenant) as conn:
                    n = _seal_batch(rt, conn, tenant, batch)
                if not n:
                    break
                total += n
                if progress is not None:
                    progress(tenant, n)
                else:
                    log.info("content keys: sealed %d more records of tenant %s (%d so far)",
                             n, tenant, total)
        return total


def _seal_batch(rt: Runtime, conn: psycopg.Connection[Any], tenant: str, batch: int) -> int:
    """Seal up to ``batch`` records of ``tenant`` not sealed whole yet, in this order:
    memories (content, key and provenance; or only the provenance of rows sealed before
    migration 0017), then procedures' texts, then runs' provenance; how many were sealed
    (0: nothing is left). Rows under a destroyed key are left to :func:`sweep`."""
    writer = pii.content_writer(rt, conn, tenant)
    rows = [r for r in memory_store.unsealed(conn, tenant, batch) if not r.get("erased")]
    if rows:
        whole, prov_only = [], []
        for r in rows:
            prov, psealed = writer.provenance(r["scope"], r["subject_id"], r["id"],
                                              r["provenance"] or {})
            if r["key_id"] is not None:
                prov_only.append((r["id"], Jsonb(prov), psealed))
                continue
            kid, blob = writer.content(r["scope"], r["subject_id"], r["id"], r["content"])
            skey, kblob = writer.memory_key(r["scope"], r["subject_id"], r["id"], r["key"])
            whole.append((r["id"], kid, blob, memory_store.stored_plaintext(r["content"]),
                          skey, kblob, Jsonb(prov), psealed))
        memory_store.set_sealed(conn, tenant, whole)
        memory_store.set_sealed_provenance(conn, tenant, prov_only)
        return len(rows)
    procs = [r for r in procedure_store.unsealed(conn, tenant, batch) if not r.get("erased")]
    if procs:
        procedure_store.set_sealed(conn, tenant, [
            (r["id"], writer.procedure(r["scope"], r["subject_id"], r["id"], r))
            for r in procs])
        return len(procs)
    runs = procedure_store.unsealed_runs(conn, tenant, batch)
    sealed_runs = []
    for r in runs:
        run_key, _ = writer.key(r["scope"], r["subject_id"])
        prov, psealed = writer.provenance(r["scope"], r["subject_id"], r["id"],
                                          r["provenance"] or {})
        sealed_runs.append((r["id"], uuid.UUID(run_key), Jsonb(prov), psealed))
    procedure_store.set_runs_sealed(conn, tenant, sealed_runs)
    return len(runs)


def on_start(rt: Runtime) -> None:
    """Both, before anything is served (:meth:`mnemovault.MemoryVault.open`). Failures are
    logged, never raised (the next start, or ``db seal``, tries again)."""
    try:  # first: a batch of rows under destroyed keys would stall the sealing
        sweep(rt)
    except Exception:
        log.exception("content keys: the sweep of rows under destroyed keys failed")
    try:
        if not DEFER_SEAL.get():
            seal_existing(rt)
    except Exception:
        log.exception("content keys: sealing existing records failed")
