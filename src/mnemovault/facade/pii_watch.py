"""``mv.pii_watch``: the PII watch (:mod:`mnemovault.pii.watch`, SPEC section 3): records
stored before a value they hold became known get its placeholder::

    mv.pii_watch.run(dry_run=True)     # what would be rewritten; writes nothing
    mv.pii_watch.run()                 # rewrite, re-embed, re-index, audit (this tenant)
    mv.pii_watch.pending()             # vault values no run has covered yet
    mv.pii_watch.run_all()             # operator path: every tenant (the nightly schedule)

Every surface (CLI ``mnemovault pii watch``, ``POST /v1/admin/pii/watch``, the schedule)
calls :meth:`PiiWatchSection.run` or :meth:`PiiWatchSection.run_all`.
"""

from __future__ import annotations

from mnemovault.auth import Principal
from mnemovault.facade import Section
from mnemovault.pii import watch


class PiiWatchSection(Section):
    """The PII watch; ``principal`` as everywhere (default: the local operator)."""

    def run(self, *, dry_run: bool = False, full: bool = False, batch: int = watch.BATCH,
            settle_seconds: float | None = None, progress: watch.Progress | None = None,
            principal: Principal | None = None, trigger: str = "api",
            request_id: str | None = None) -> watch.TenantReport:
        """One run over the caller's tenant (``subject:erase``, a key without limits); see
        :func:`mnemovault.pii.watch.run`."""
        return watch.run(self.rt, self._who(principal), dry_run=dry_run, full=full,
                         batch=batch, settle_seconds=settle_seconds, progress=progress,
                         trigger=trigger, request_id=request_id)

    def pending(self, *, principal: Principal | None = None) -> int:
        """How many of the tenant's vault values no run has covered yet (a count; needs
        ``subject:erase`` as a run does)."""
        who = self._who(principal)
        who.require("subject:erase")
        return watch.pending(self.rt, who.tenant)

    def run_all(self, *, dry_run: bool = False,
                settle_seconds: float | None = None) -> watch.Report:
        """Operator path (the schedule): every tenant with pending values; see
        :func:`mnemovault.pii.watch.run_all`."""
        return watch.run_all(self.rt, dry_run=dry_run, settle_seconds=settle_seconds)
