"""API keys over HTTP (permission ``keys:manage``): create a key of the caller's tenant,
optionally narrowed to fewer permissions, one scope and one subject. The token is in the
response once and never stored."""

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.auth import ALL_PERMISSIONS, Principal, Role
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


def keys_router(vault: MemoryVault, principal: Callable[..., Principal]) -> APIRouter:
    router = APIRouter(prefix="/v1/keys", tags=["keys"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.post("", status_code=201, response_model=KeyCreated)
    def create_key(body: KeyCreate, who: Auth) -> KeyCreated:
        """Create an API key in the caller's tenant (``keys:manage``)."""
        token, key_id = vault.create_key(who.tenant, body.role, name=body.name,
                                         principal=who, scope=body.scope,
                                         subject=body.subject, permissions=body.permissions)
        made = vault.authenticate(token)  # what was stored, read back
        return KeyCreated(key_id=str(key_id), token=token, tenant=who.tenant, role=made.role,
                          permissions=sorted(made.permissions), scope=made.scope,
                          subject=made.subject)

    return router
