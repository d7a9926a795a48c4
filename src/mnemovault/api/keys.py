"""API keys over HTTP (permission ``keys:manage``): create a key of the caller's tenant,
optionally narrowed to fewer permissions, one scope and one subject (the token is in the
response once and never stored); list the tenant's keys (metadata only, keyset paged) or
show one; revoke one (idempotent, audited). The key hierarchy and the last-owner rule are
:mod:`mnemovault.keys`'; a scope or subject limit is shown as its placeholder to a caller
without ``pii:reveal``."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.auth import ALL_PERMISSIONS, Principal, PrincipalDependency, Role
from mnemovault.vault import MemoryVault

Permission = Annotated[str, Field(pattern="^(" + "|".join(ALL_PERMISSIONS) + ")$")]


class KeyCreate(BaseModel):
    """A new key: its ``role``; ``permissions`` narrows the role's (a subset);
    ``scope`` and ``subject`` limit it to one scope and one subject (a limited key holds
    no tenant-wide permission). A caller may not grant more than it holds."""

    model_config = ConfigDict(extra="forbid")

    role: Role = "member"
    name: str | None = Field(default=None, min_length=1, max_length=200)
    scope: str | None = Field(default=None, min_length=1, max_length=200)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    permissions: list[Permission] | None = Field(default=None, min_length=1, max_length=10)


class KeyCreated(BaseModel):
    key_id: str
    token: str
    tenant: str
    role: Role
    permissions: list[str]
    scope: str | None = None
    subject: str | None = None


class KeyInfo(BaseModel):
    """A key's metadata (never its secret or hash): effective ``permissions``; ``scope``
    and ``subject`` limits as written for a caller with ``pii:reveal``, else as stored
    (personal values as placeholders); ``revoked_at`` None while it works."""

    key_id: str
    role: Role
    name: str | None = None
    permissions: list[str]
    scope: str | None = None
    subject: str | None = None
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    origin: Literal["issued", "self_registered"] = Field(
        default="issued", description="how the key was made: issued (keys create, POST "
                                      "/v1/keys) or self_registered (POST /v1/agents/register)")


class KeyPage(BaseModel):
    """Keys oldest first; pass ``next_cursor`` back as ``cursor`` (None: the last page)."""

    items: list[KeyInfo]
    next_cursor: str | None


class KeyRevoked(BaseModel):
    """``last_owner``: the local operator revoked the tenant's last owner key (a key
    never can)."""

    key_id: str
    revoked_at: datetime
    already_revoked: bool
    last_owner: bool = False


def keys_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/keys", tags=["keys"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.post("", status_code=201, response_model=KeyCreated)
    def create_key(body: KeyCreate, who: Auth) -> KeyCreated:
        """Create an API key in the caller's tenant (``keys:manage``), at or below the
        caller's role; its limits are shown as ``GET /v1/keys/{key_id}`` shows them."""
        token, key_id = vault.create_key(who.tenant, body.role, name=body.name,
                                         principal=who, scope=body.scope,
                                         subject=body.subject, permissions=body.permissions)
        made = vault.get_key(key_id, principal=who)  # what was stored, read back
        return KeyCreated(key_id=str(key_id), token=token, tenant=who.tenant,
                          role=made["role"], permissions=made["permissions"],
                          scope=made["scope"], subject=made["subject"])

    @router.get("", response_model=KeyPage)
    def list_keys(who: Auth, limit: Annotated[int, Query(ge=1, le=100)] = 50,
                  cursor: uuid.UUID | None = None) -> KeyPage:
        """The tenant's API keys, revoked ones included, oldest first (``keys:manage``);
        ``cursor`` = the last key id of the previous page."""
        return KeyPage(**vault.list_keys(limit=limit, cursor=cursor, principal=who))

    @router.get("/{key_id}", response_model=KeyInfo)
    def get_key(key_id: uuid.UUID, who: Auth) -> KeyInfo:
        """One key's metadata (``keys:manage``), as in the listing; 404 if the tenant has
        no such key."""
        return KeyInfo(**vault.get_key(key_id, principal=who))

    @router.delete("/{key_id}", response_model=KeyRevoked)
    def revoke_key(key_id: uuid.UUID, who: Auth, request: Request) -> KeyRevoked:
        """Revoke a key (``keys:manage``): every later request with it answers 401.
        Idempotent (``already_revoked``); a key may revoke itself; 404 if the tenant has
        no such key. Only keys at or below the caller's role, an owner key only by an
        unlimited owner key (403), never the tenant's last owner key (409)."""
        return KeyRevoked(**vault.revoke_key(key_id, principal=who,
                                             request_id=str(request.state.request_id)))

    return router
