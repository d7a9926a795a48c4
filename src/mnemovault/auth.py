"""Principals, roles and permissions (SPEC section 11), and API key tokens.

A token looks like ``mvk_<tenant>_<key id, 32 hex>_<secret, 64 hex>``. Only SHA-256 of the
secret is stored; the secret carries 256 random bits, so a fast hash is enough (no password
stretching is needed for a high-entropy secret). The tenant in the token lets the lookup run
under row-level security for that tenant: no path reads keys across tenants.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from mnemovault.errors import Forbidden, Unauthenticated, ValidationError

Role = Literal["owner", "admin", "member", "service"]
ROLES: tuple[Role, ...] = ("owner", "admin", "member", "service")

ALL_PERMISSIONS = (
    "memory:read", "memory:write", "memory:forget", "pii:reveal", "review:approve",
    "audit:read", "keys:manage", "admin:export", "subject:erase", "admin:delete",
)

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "owner": frozenset(ALL_PERMISSIONS),
    "admin": frozenset(ALL_PERMISSIONS) - {"pii:reveal", "admin:delete"},
    "member": frozenset({"memory:read", "memory:write", "memory:forget"}),
    "service": frozenset({"memory:read", "memory:write"}),
}

TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_TOKEN_RE = re.compile(r"^mvk_([a-z0-9][a-z0-9-]{0,62})_([0-9a-f]{32})_([0-9a-f]{64})$")


def validate_tenant(tenant: str, field_name: str = "tenant") -> str:
    """Tenant ids are 1-63 lowercase letters, digits or dashes, starting with a letter/digit."""
    if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
        raise ValidationError(
            f"{field_name}: must be 1-63 characters of a-z, 0-9 and '-', "
            "starting with a letter or digit",
            field=field_name,
        )
    return tenant


@dataclass(frozen=True)
class Principal:
    """Who is calling: tenant, role, effective permissions, optional narrowing.

    ``key_id`` is None for the local library/CLI caller (the operator of the database).
    """

    tenant: str
    role: Role
    permissions: frozenset[str]
    key_id: str | None = None
    scope: str | None = None
    subject: str | None = None
    agent: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    # ``same(limit, value)``: whether ``value`` names the same stored scope or subject as
    # the key's limit written another way (one vault value: ``Cy@Example.org`` and
    # ``cy@example.org``); set by :func:`mnemovault.keys.authenticate`
    same: Callable[[str, str], bool] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def local(cls, tenant: str, role: Role = "owner", agent: str | None = None) -> Principal:
        validate_tenant(tenant)
        return cls(tenant=tenant, role=role, permissions=ROLE_PERMISSIONS[role], agent=agent)

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}" if self.key_id else "local"

    def require(self, permission: str) -> None:
        """Raise :class:`Forbidden` naming ``permission`` if this principal lacks it."""
        if permission not in self.permissions:
            raise Forbidden(
                f"missing permission {permission!r} (role {self.role!r})",
                permission=permission,
            )

    @property
    def limited(self) -> bool:
        """Whether this key is limited to one scope or one subject."""
        return self.scope is not None or self.subject is not None

    def check_scope(self, scope: str | None) -> None:
        """Raise :class:`Forbidden` if this key is limited to another scope."""
        if (self.scope is not None and scope is not None and scope != self.scope
                and not (self.same is not None and self.same("scope", scope))):
            raise Forbidden(
                "scope: this key is limited to one scope", permission="scope", field="scope"
            )

    def check_subject(self, subject: str | None) -> None:
        """Raise :class:`Forbidden` if this key is limited to another subject."""
        if (self.subject is not None and subject is not None and subject != self.subject
                and not (self.same is not None and self.same("subject", subject))):
            raise Forbidden("subject: this key is limited to one subject",
                            permission="subject", field="subject")

    def require_unlimited(self, what: str) -> None:
        """Raise :class:`Forbidden` for a scope- or subject-limited key: ``what`` reaches
        the whole tenant."""
        if self.limited:
            raise Forbidden(f"{what}: needs a key that is not limited to a scope or subject",
                            permission="unlimited")


PrincipalDependency = Callable[..., Awaitable[Principal]]
"""What every HTTP router takes to learn a request's caller: the FastAPI dependency that
:func:`mnemovault.api.app.create_app` builds (async, so a key lookup does not hold a
worker thread)."""


@dataclass(frozen=True)
class NewKey:
    token: str
    key_id: uuid.UUID
    key_hash: bytes


def new_key(tenant: str) -> NewKey:
    validate_tenant(tenant)
    key_id = uuid.uuid4()
    secret = secrets.token_hex(32)
    return NewKey(
        token=f"mvk_{tenant}_{key_id.hex}_{secret}",
        key_id=key_id,
        key_hash=hash_secret(secret),
    )


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()


def parse_token(token: str) -> tuple[str, uuid.UUID, str]:
    """Split a token into (tenant, key id, secret).

    Raises:
        Unauthenticated: the token is not of the documented form.
    """
    m = _TOKEN_RE.match(token or "")
    if not m:
        raise Unauthenticated("authorization: expected 'Bearer mvk_<tenant>_<id>_<secret>'")
    return m.group(1), uuid.UUID(hex=m.group(2)), m.group(3)
