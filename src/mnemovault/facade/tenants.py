"""``mv.tenants``: tenant export, soft delete, cancel, the purge and the background jobs
(:mod:`mnemovault.tenants`)::

    job = mv.tenants.export("acme", confirm="DELETE-acme")
    mv.tenants.process_outbox()                       # what the worker does
    mv.tenants.export_status("acme", job["job_id"])   # state, progress, manifest hash
    mv.tenants.delete("acme", confirm="DELETE-acme")  # keys fail at once; 30 days' grace
    mv.tenants.cancel_delete("acme")
    mv.tenants.purge_expired()                        # the scheduled hard delete
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from mnemovault import keys
from mnemovault.auth import Principal
from mnemovault.facade import Section
from mnemovault.tenants import export, lifecycle, schedule, worker
from mnemovault.tenants.export import Progress


class TenantsSection(Section):
    """Tenant lifecycle operations; ``principal`` as everywhere (default: the local owner
    of ``tenant``)."""

    def _of(self, tenant: str, principal: Principal | None) -> Principal:
        return principal or Principal.local(tenant)

    def export(self, tenant: str, *, confirm: str | None, principal: Principal | None = None,
               request_id: str | None = None) -> dict[str, Any]:
        """Queue an export (``admin:export``); see :func:`mnemovault.tenants.export.request`."""
        return export.request(self.rt, self._of(tenant, principal), tenant, confirm=confirm,
                              request_id=request_id)

    def export_status(self, tenant: str, job_id: uuid.UUID | str, *,
                      principal: Principal | None = None) -> dict[str, Any]:
        """An export job's state and progress; see :func:`mnemovault.tenants.export.status`."""
        return export.status(self.rt, self._of(tenant, principal), tenant, job_id)

    def delete(self, tenant: str, *, confirm: str | None, principal: Principal | None = None,
               now: datetime | None = None, request_id: str | None = None) -> dict[str, Any]:
        """Soft-delete (``admin:delete``); see :func:`mnemovault.tenants.lifecycle.delete`."""
        return lifecycle.delete(self.rt, self._of(tenant, principal), tenant, confirm=confirm,
                                now=now, request_id=request_id)

    def cancel_delete(self, tenant: str, *, principal: Principal | None = None,
                      now: datetime | None = None,
                      request_id: str | None = None) -> dict[str, Any]:
        """Cancel a soft delete in its grace period; see
        :func:`mnemovault.tenants.lifecycle.cancel_delete`."""
        return lifecycle.cancel_delete(self.rt, self._of(tenant, principal), tenant, now=now,
                                       request_id=request_id)

    def status(self, tenant: str, *, principal: Principal | None = None,
               now: datetime | None = None) -> dict[str, Any]:
        """Whether the tenant is soft-deleted and until when."""
        return lifecycle.status(self.rt, self._of(tenant, principal), tenant, now=now)

    def purge_expired(self, *, now: datetime | None = None) -> dict[str, Any]:
        """Operator path: hard-delete expired tenants; see
        :func:`mnemovault.tenants.lifecycle.purge_expired`."""
        return lifecycle.purge_expired(self.rt, now=now)

    def purge_log(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Operator path: the system chain's ``TENANT_PURGE`` rows."""
        return lifecycle.purge_log(self.rt, limit=limit)

    def process_outbox(self, *, tenant: str | None = None,
                       progress: Progress | None = None,
                       max_events: int | None = None) -> list[dict[str, Any]]:
        """Operator path: one pass of the outbox worker; see
        :func:`mnemovault.tenants.worker.process_pending`."""
        return worker.process_pending(self.rt, tenant=tenant, progress=progress,
                                      max_events=max_events)

    def background(self, *, purge_delay_seconds: float = 60.0) -> schedule.Background:
        """The outbox worker and purge schedule as threads (``with mv.tenants.background():``)."""
        return schedule.Background(self.rt, purge_delay_seconds=purge_delay_seconds)

    def authenticate(self, token: str, *, allow_deleted: bool = False) -> Principal:
        """:func:`mnemovault.keys.authenticate`; ``allow_deleted`` lets a soft-deleted
        tenant's ``admin:delete`` key through (to cancel the deletion)."""
        return keys.authenticate(self.rt, token, allow_deleted=allow_deleted)
