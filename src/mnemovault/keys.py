"""Tenants and API keys: create a tenant, issue a key (shown once, stored hashed), and
turn a presented token back into its :class:`~mnemovault.auth.Principal`.

The token format, the roles and their permissions are in :mod:`mnemovault.auth`; the SQL
in :mod:`mnemovault.store.tenants`.
"""

from __future__ import annotations

import hmac
import uuid

from mnemovault.audit import log as audit
from mnemovault.auth import ROLE_PERMISSIONS, Principal, Role, hash_secret, new_key, parse_token
from mnemovault.auth import validate_tenant as _validate_tenant
from mnemovault.errors import NotFound, Unauthenticated, ValidationError
from mnemovault.runtime import Runtime
from mnemovault.store import tenants as store


def ensure_tenant(rt: Runtime, tenant: str) -> None:
    """Create the tenant if it does not exist (idempotent)."""
    _validate_tenant(tenant)
    with rt.db.transaction(tenant) as conn:
        store.ensure(conn, tenant)


def create_key(rt: Runtime, tenant: str, role: Role, *, name: str | None = None,
               principal: Principal | None = None) -> tuple[str, uuid.UUID]:
    """Create an API key; returns (token, key id). The token is shown once, never stored.

    Creates the tenant if needed when called locally (``principal`` None); through the API
    the caller needs ``keys:manage`` in that tenant, and may not grant a role with
    permissions it lacks. A ``KEY_CREATE`` audit row names the key id and role.
    """
    _validate_tenant(tenant)
    if role not in ROLE_PERMISSIONS:
        raise ValidationError("role: must be one of owner, admin, member, service",
                              field="role")
    if principal is not None:
        principal.require("keys:manage")
        if principal.tenant != tenant:
            raise NotFound("tenant: not found")
        missing = ROLE_PERMISSIONS[role] - principal.permissions
        if missing:
            principal.require(sorted(missing)[0])
    key = new_key(tenant)
    with rt.db.transaction(tenant) as conn:
        if principal is None:
            store.ensure(conn, tenant)
        store.insert_key(conn, tenant=tenant, key_id=key.key_id, key_hash=key.key_hash,
                         role=role, name=name)
        audit.append(conn, tenant=tenant, operation="KEY_CREATE",
                     actor=principal.actor if principal else "local",
                     details={"key_id": str(key.key_id), "role": role})
    return key.token, key.key_id


def authenticate(rt: Runtime, token: str) -> Principal:
    """The principal of an API key token.

    Raises:
        Unauthenticated: malformed, unknown or revoked token (one message for all).
    """
    tenant, key_id, secret = parse_token(token)
    with rt.db.transaction(tenant) as conn:
        row = store.key(conn, tenant, key_id)
    if (row is None or row["revoked_at"] is not None or row["deleted_at"] is not None
            or not hmac.compare_digest(bytes(row["key_hash"]), hash_secret(secret))):
        raise Unauthenticated("authorization: unknown or revoked API key")
    perms = ROLE_PERMISSIONS[row["role"]]
    if row["permissions"] is not None:
        perms = perms & frozenset(row["permissions"])
    return Principal(tenant=tenant, role=row["role"], permissions=perms, key_id=str(key_id),
                     scope=row["scope"], subject=row["subject_id"])
