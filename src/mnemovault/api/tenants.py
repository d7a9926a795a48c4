"""Tenant lifecycle over HTTP (SPEC section 10): export (``admin:export``) and delete
(``admin:delete``, owner only) of the caller's own tenant, both behind the typed
confirmation ``DELETE-<tenant_id>``.

* ``POST /v1/admin/tenants/{tenant_id}/export`` ``{"confirm": "DELETE-<tenant_id>"}``: 202
  and a job id; the outbox worker writes the archive.
* ``GET /v1/admin/tenants/{tenant_id}/export/{job_id}``: state and progress.
* ``POST /v1/admin/tenants/{tenant_id}/delete`` ``{"confirm": ...}``: soft delete; every key
  of the tenant fails from now on, but for the next route.
* ``POST /v1/admin/tenants/{tenant_id}/delete/cancel``: during the grace period, an
  ``admin:delete`` key of the soft-deleted tenant (its owner's) may still call this one.

A wrong confirmation answers 409 ``refused`` with the string to type in the message.
"""

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.errors import Unauthenticated
from mnemovault.vault import MemoryVault

TenantId = Annotated[str, Path(min_length=1, max_length=63,
                               pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class Confirm(BaseModel):
    """The typed confirmation: exactly ``DELETE-<tenant_id>`` (anything else, or none, is
    refused with 409 and the string to type)."""

    model_config = ConfigDict(extra="forbid")

    confirm: str | None = Field(default=None, max_length=200)


class ExportQueued(BaseModel):
    job_id: str
    state: str
    destination: str
    audit_seq: int | None = None


class ExportProgress(BaseModel):
    rows_done: int
    rows_total: int
    files_done: int
    files_total: int
    percent: float


class ExportStatus(BaseModel):
    """``state``: ``queued``, ``running``, ``done`` or ``failed``; ``manifest_sha256`` (hex)
    once done; ``error`` the last failed attempt's kind and message."""

    job_id: str
    tenant: str
    state: str
    progress: ExportProgress
    destination: str
    manifest_sha256: str | None = None
    error: str | None = None
    attempts: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class TenantState(BaseModel):
    """A tenant's deletion state; ``delete_after``: when the scheduled purge may remove it
    for good."""

    tenant: str
    deleted: bool
    deleted_at: datetime | None = None
    delete_after: datetime | None = None
    grace_remaining_seconds: float | None = None
    already_deleted: bool | None = None
    cancelled: bool | None = None
    audit_seq: int | None = None


def _typed(body: Confirm | None) -> str | None:
    return body.confirm if body is not None else None


def tenants_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/admin/tenants", tags=["tenants"])
    Auth = Annotated[Principal, Depends(principal)]

    def owner_of_deleted(authorization: Annotated[str | None, Header()] = None) -> Principal:
        """Bearer authentication that also lets a soft-deleted tenant's ``admin:delete``
        key through (for cancelling the deletion only)."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        return vault.tenants.authenticate(authorization.split(" ", 1)[1].strip(),
                                          allow_deleted=True)

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    @router.post("/{tenant_id}/export", status_code=202, response_model=ExportQueued)
    def export(tenant_id: TenantId, who: Auth, request: Request,
               body: Confirm | None = None) -> ExportQueued:
        """Queue an export of the whole tenant (``admin:export``); follow it with the
        returned ``job_id``."""
        return ExportQueued(**vault.tenants.export(tenant_id, confirm=_typed(body),
                                                   principal=who, request_id=rid(request)))

    @router.get("/{tenant_id}/export/{job_id}", response_model=ExportStatus)
    def export_status(tenant_id: TenantId, job_id: uuid.UUID, who: Auth) -> ExportStatus:
        """An export job's state and progress (``admin:export``)."""
        return ExportStatus(**vault.tenants.export_status(tenant_id, job_id, principal=who))

    @router.post("/{tenant_id}/delete", response_model=TenantState)
    def delete(tenant_id: TenantId, who: Auth, request: Request,
               body: Confirm | None = None) -> TenantState:
        """Soft-delete the tenant (``admin:delete``): its keys stop working now; it is
        purged for good after ``DELETE_RETENTION_DAYS`` unless cancelled."""
        return TenantState(**vault.tenants.delete(tenant_id, confirm=_typed(body),
                                                  principal=who, request_id=rid(request)))

    @router.post("/{tenant_id}/delete/cancel", response_model=TenantState)
    def cancel_delete(tenant_id: TenantId, request: Request,
                      who: Annotated[Principal, Depends(owner_of_deleted)]) -> TenantState:
        """Cancel a pending deletion during its grace period (``admin:delete``); the
        tenant's keys work again. A tenant that is not deleted answers ``cancelled:
        false``."""
        return TenantState(**vault.tenants.cancel_delete(tenant_id, principal=who,
                                                         request_id=rid(request)))

    return router
