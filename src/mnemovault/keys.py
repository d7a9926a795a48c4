"""Tenants and API keys: create a tenant, issue a key (shown once, stored hashed), and
turn a presented token back into its :class:`~mnemovault.auth.Principal`.

A key has a role (SPEC section 11) and may be narrowed further: fewer permissions, one
scope, one subject. A narrowed key then sees and changes only what lies within its limits,
on every interface: memories of other scopes or subjects are "not found", writes are
stored under its subject, vault entries are those its memories use. A key limited to a
scope or subject cannot hold tenant-wide permissions (``audit:read``, ``keys:manage``,
``admin:export``, ``admin:delete``, ``review:approve``): they are dropped, since they would
reach past its limits. A key's scope and subject are stored pseudonymised, like every
free-text field, and revealed into the principal when the key is used.

The token format, the roles and their permissions are in :mod:`mnemovault.auth`; the SQL
in :mod:`mnemovault.store.tenants`.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.auth import (
    ALL_PERMISSIONS,
    ROLE_PERMISSIONS,
    Principal,
    Role,
    hash_secret,
    new_key,
    parse_token,
)
from mnemovault.auth import validate_tenant as _validate_tenant
from mnemovault.errors import Forbidden, NotFound, Unauthenticated, ValidationError
from mnemovault.pii import service as pii
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE, render
from mnemovault.runtime import Runtime
from mnemovault.store import tenants as store

TENANT_WIDE = frozenset({"audit:read", "keys:manage", "admin:export", "admin:delete",
                         "review:approve"})
"""Permissions over the whole tenant, which a scope- or subject-limited key never holds."""

_UNUSABLE = "\x00erased"  # a limit whose value was shredded: matches nothing (NUL is refused)


@dataclass(frozen=True)
class NewApiKey:
    """A created key: the token (shown once, never stored) and what it may do."""

    token: str
    key_id: uuid.UUID
    tenant: str
    role: Role
    permissions: list[str]
    scope: str | None = None
    subject: str | None = None


def ensure_tenant(rt: Runtime, tenant: str) -> None:
    """Create the tenant if it does not exist (idempotent)."""
    _validate_tenant(tenant)
    with rt.db.transaction(tenant) as conn:
        store.ensure(conn, tenant)


def create_key(rt: Runtime, tenant: str, role: Role, *, name: str | None = None,
               principal: Principal | None = None, scope: str | None = None,
               subject: str | None = None,
               permissions: Sequence[str] | None = None) -> NewApiKey:
    """Create an API key. The token is shown once, never stored.

    Creates the tenant if needed when called locally (``principal`` None); through the API
    the caller needs ``keys:manage`` in that tenant, and may not grant a permission it
    lacks (the new key is at most as broad as the caller's). ``permissions`` narrows the
    role's; ``scope`` and ``subject`` limit the key (and drop :data:`TENANT_WIDE`). A
    ``KEY_CREATE`` audit row names the key id, role, permissions and whether it is limited.

    Raises:
        ValidationError: an unknown role or permission, a permission the role lacks, a
            malformed tenant, name, scope or subject.
        Forbidden: the caller lacks ``keys:manage`` or a permission it would grant.
        NotFound: another tenant than the caller's.
    """
    _validate_tenant(tenant)
    if role not in ROLE_PERMISSIONS:
        raise ValidationError("role: must be one of owner, admin, member, service",
                              field="role")
    name = checked.optional_name(name, "name")
    scope = checked.optional_name(scope, "scope")
    subject = checked.optional_name(subject, "subject")
    perms = set(ROLE_PERMISSIONS[role])
    if permissions is not None:
        for n, p in enumerate(permissions):
            if p not in ALL_PERMISSIONS:
                raise ValidationError(f"permissions.{n}: unknown permission",
                                      field=f"permissions.{n}")
            if p not in perms:
                raise ValidationError(f"permissions.{n}: role {role!r} does not have it",
                                      field=f"permissions.{n}")
        perms = set(permissions)
    if principal is not None:
        principal.require("keys:manage")
        if principal.tenant != tenant:
            raise NotFound("tenant: not found")
        missing = perms - principal.permissions
        if missing:
            principal.require(sorted(missing)[0])
        for limit, mine in (("scope", principal.scope), ("subject", principal.subject)):
            wanted = scope if limit == "scope" else subject
            if mine is not None and wanted != mine:
                raise Forbidden(f"{limit}: a key limited to one {limit} can only create "
                                f"keys limited to it", permission=limit, field=limit)
    if scope is not None or subject is not None:
        perms -= TENANT_WIDE
    stored_perms = sorted(perms) if perms != ROLE_PERMISSIONS[role] else None
    key = new_key(tenant)
    with rt.db.transaction(tenant) as conn:
        if principal is None:
            store.ensure(conn, tenant)
        sscope, ssubject = scope, subject
        if rt.settings.pii_pseudonymize and (scope is not None or subject is not None):
            ps = pii.pseudonymiser(rt, conn, tenant)
            sscope = ps.rewrite(scope).text if scope is not None else None
            ssubject = ps.rewrite(subject).text if subject is not None else None
        store.insert_key(conn, tenant=tenant, key_id=key.key_id, key_hash=key.key_hash,
                         role=role, name=name, permissions=stored_perms, scope=sscope,
                         subject=ssubject)
        audit.append(conn, tenant=tenant, operation="KEY_CREATE",
                     actor=principal.actor if principal else "local",
                     details={"key_id": str(key.key_id), "role": role,
                              "permissions": sorted(perms),
                              "scope_limited": scope is not None,
                              "subject_limited": subject is not None})
    return NewApiKey(token=key.token, key_id=key.key_id, tenant=tenant, role=role,
                     permissions=sorted(perms), scope=scope, subject=subject)


def authenticate(rt: Runtime, token: str) -> Principal:
    """The principal of an API key token, with its limits as the caller writes them.

    Raises:
        Unauthenticated: malformed, unknown or revoked token (one message for all).
    """
    tenant, key_id, secret = parse_token(token)
    with rt.db.transaction(tenant) as conn:
        row = store.key(conn, tenant, key_id)
        if (row is None or row["revoked_at"] is not None or row["deleted_at"] is not None
                or not hmac.compare_digest(bytes(row["key_hash"]), hash_secret(secret))):
            raise Unauthenticated("authorization: unknown or revoked API key")
        limits = [row["scope"], row["subject_id"]]
        found = {m.group(0) for v in limits if v for m in PLACEHOLDER_RE.finditer(v)}
        values = rt.pii.reveal_values(conn, tenant, found) if found else {}
    scope, subject = (_limit(v, values) for v in limits)
    perms = ROLE_PERMISSIONS[row["role"]]
    if row["permissions"] is not None:
        perms = perms & frozenset(row["permissions"])
    if scope is not None or subject is not None:
        perms = perms - TENANT_WIDE
    return Principal(tenant=tenant, role=row["role"], permissions=perms, key_id=str(key_id),
                     scope=scope, subject=subject)


def _limit(stored: str | None, values: dict[str, str]) -> str | None:
    """A key's stored limit as the caller writes it; one whose value was shredded can no
    longer match anything."""
    if stored is None:
        return None
    if any(values.get(m.group(0)) == ERASED for m in PLACEHOLDER_RE.finditer(stored)):
        return _UNUSABLE
    return render(stored, values)
