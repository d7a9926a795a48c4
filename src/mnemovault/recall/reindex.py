"""The re-index of lexical terms written before migration 0014: their ``tsv`` holds the
plain lexemes PostgreSQL derived from the content; each is rewritten with the keyed
hashes of :mod:`mnemovault.recall.terms` (the triggers of 0014 carry the change into the
postings and the statistics), so that afterwards no word of a memory remains in
``memories.tsv``, ``lexical_postings``, ``lexical_df`` or the GIN index's live entries.

Resumable: rows are done in batches, each its own committed transaction, and
``memories.terms_keyed`` marks the rows done; a stopped re-index continues where it was.
:func:`run` holds a session advisory lock while it works, so two processes starting at
once do not both do it (the second waits, then finds nothing left).
``MemoryVault.open`` runs it before anything is served (log lines give the progress);
``mnemovault db reindex-terms`` runs it with a progress bar.

Until a tenant's rows are done, lexical recall does not find those rows (their terms are
plain, the queries keyed); vector recall is unaffected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mnemovault.recall import terms
from mnemovault.runtime import Runtime
from mnemovault.store import lexical as store
from mnemovault.store.db import owner_connection

__all__ = ["BATCH", "Report", "pending", "run"]

log = logging.getLogger(__name__)

BATCH = 500  # rows per committed transaction

Progress = Callable[[int, int], None]  # (rows done so far, rows in all)


@dataclass
class Report:
    """What one :func:`run` did: rows re-indexed by tenant, batches, milliseconds."""

    rows: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    ms: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def pending(rt: Runtime) -> dict[str, int]:
    """Rows left to re-index, by tenant."""
    with owner_connection(rt.db.url, autocommit=True) as conn:
        return store.plain_by_tenant(conn)


def run(rt: Runtime, *, batch: int = BATCH, progress: Progress | None = None) -> Report:
    """Re-index every row whose terms are plain (module docstring), under the advisory
    lock; ``progress`` is called after each batch (else progress is logged)."""
    t0 = time.perf_counter()
    report = Report()
    with owner_connection(rt.db.url, autocommit=True) as lock:
        todo = store.plain_by_tenant(lock)
        if not todo:
            return report
        store.lock_reindex(lock)
        todo = store.plain_by_tenant(lock)  # another process may have done them meanwhile
        total = sum(todo.values())
        if total:
            log.info("lexical terms: re-indexing %d rows of %d tenants with keyed terms",
                     total, len(todo))
        done, last_log = 0, time.monotonic()
        for tenant in todo:
            while True:
                with rt.db.transaction(tenant) as conn:
                    rows = store.plain_batch(conn, tenant, batch)
                    if not rows:
                        break
                    key = terms.tenant_key(rt.pii, conn, tenant)
                    assert key is not None  # created on first use
                    docs = [terms.document(key, r["content"]) for r in rows]
                    n = store.write_terms(conn, tenant, [r["id"] for r in rows],
                                          [d[0] for d in docs], [d[1] for d in docs])
                report.rows[tenant] = report.rows.get(tenant, 0) + n
                report.batches += 1
                done += n
                if progress is not None:
                    progress(done, total)
                elif time.monotonic() - last_log >= 5 or done >= total:
                    log.info("lexical terms: %d/%d rows re-indexed", done, total)
                    last_log = time.monotonic()
            # the rewrites went to the statistics as deltas: folding them removes the base
            # rows of the plain lexemes (their df reaches 0), so no word stays there
            rt.db.fold_lexical(tenant, wait=True)
    report.ms = round((time.perf_counter() - t0) * 1000, 2)
    if report.total:
        log.info("lexical terms: %d rows re-indexed in %d batches, %.0f ms", report.total,
                 report.batches, report.ms)
    return report
