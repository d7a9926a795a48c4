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

Keys are listed (metadata only: never a secret or hash) and revoked by holders of
``keys:manage``; a revoked key fails at once on every interface, since every request
authenticates afresh. Keys are never deleted, so a listing keeps revoked ones.

The token format, the roles and their permissions are in :mod:`mnemovault.auth`; the SQL
in :mod:`mnemovault.store.tenants`.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from mnemovault.guard import capture as capture_guard
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
        Refused, Unavailable: the capture guard found a secret in the name, scope or
            subject (they are stored), or failed closed (:mod:`mnemovault.guard.capture`).
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
    capture_guard.check_capture(rt, path="key", fields={"name": name, "scope": scope,
                                                        "subject": subject}, tenant=tenant)
    perms = set(ROLE_PERMISSIONS[role])
    if permissions is not None:
        for n, p in enumerate(permissions):
            if p not in ALL_PERMISSIONS:
                raise ValidationError(f"permissions.{n}: unknown permission",
                                      field=f"permissions.{n}")
            if p not in perms:
                raise ValidationError(f"permissions.{n}: role {role!r} does not have it",
                                      field=f"permissions.{n}")
            if p in TENANT_WIDE and (scope is not None or subject is not None):
                raise ValidationError(f"permissions.{n}: a key limited to a scope or "
                                      "subject cannot hold a tenant-wide permission",
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


def authenticate(rt: Runtime, token: str, *, allow_deleted: bool = False) -> Principal:
    """The principal of an API key token, with its limits as the caller writes them.

    A soft-deleted tenant's keys fail at once; with ``allow_deleted`` (only the route that
    cancels a tenant deletion) a key holding ``admin:delete`` still passes.

    Raises:
        Unauthenticated: malformed, unknown or revoked token, or a deleted tenant's key
            (one message for all).
    """
    tenant, key_id, secret = parse_token(token)
    with rt.db.transaction(tenant) as conn:
        row = store.key(conn, tenant, key_id)
        if (row is None or row["revoked_at"] is not None
                or not hmac.compare_digest(bytes(row["key_hash"]), hash_secret(secret))
                or (row["deleted_at"] is not None
                    and not (allow_deleted and "admin:delete" in _effective(row)))):
            raise Unauthenticated("authorization: unknown or revoked API key")
        store.touch_key(conn, tenant, key_id)
        values = _limit_values(rt, conn, tenant, [row])
    scope, subject = (_limit(v, values) for v in (row["scope"], row["subject_id"]))
    stored = {"scope": row["scope"], "subject": row["subject_id"]}
    unusable = {"scope": scope == _UNUSABLE, "subject": subject == _UNUSABLE}
    seen: dict[tuple[str, str], bool] = {}  # one lookup per form, however many items

    def same(limit: str, value: str) -> bool:
        """``value`` pseudonymises to the key's stored limit (another written form of one
        vault value); lookups only."""
        if not rt.settings.pii_pseudonymize or stored.get(limit) is None or unusable[limit]:
            return False
        if (limit, value) not in seen:
            with rt.db.transaction(tenant) as conn:
                seen[(limit, value)] = (
                    pii.Translator(rt, conn, tenant, names=True)(value) == stored[limit])
        return seen[(limit, value)]

    return Principal(tenant=tenant, role=row["role"], permissions=_effective(row),
                     key_id=str(key_id), scope=scope, subject=subject, same=same)


def list_keys(rt: Runtime, who: Principal, *, limit: int = 50,
              cursor: uuid.UUID | str | None = None) -> dict[str, Any]:
    """The caller's tenant's API keys, oldest first (by ``created_at``, then key id), one
    keyset page: ``{"items": [...], "next_cursor"}``; pass ``next_cursor`` (the last key
    id of the page; None on the last page) back as ``cursor``. Revoked keys are included.

    Each item is metadata only, never the secret or its hash: ``key_id``, ``role``,
    ``name``, ``permissions`` (effective: the role's, narrowed, less :data:`TENANT_WIDE`
    for a limited key), ``scope`` and ``subject`` (as the caller writes them; a shredded
    value shows ``[erased]``), ``created_at``, ``last_used_at`` (to the minute; None if
    never used) and ``revoked_at`` (None: live). Needs ``keys:manage``, which only
    unlimited keys hold, so a caller who may create a key of any scope sees them all.

    Raises:
        Forbidden: the caller lacks ``keys:manage``.
        ValidationError: ``limit`` outside 1..100, ``cursor`` not a key id of the tenant.
    """
    who.require("keys:manage")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    after = checked.parse_id(cursor, "cursor") if cursor is not None else None
    with rt.db.transaction(who.tenant) as conn:
        rows = store.keys_page(conn, who.tenant, after=after, limit=limit + 1)
        if not rows and after is not None and not store.key_exists(conn, who.tenant, after):
            raise ValidationError("cursor: not a key id of this tenant", field="cursor")
        values = _limit_values(rt, conn, who.tenant, rows)
    more = len(rows) > limit
    rows = rows[:limit]
    items = [{"key_id": str(r["key_id"]), "role": r["role"], "name": r["name"],
              "permissions": sorted(_effective(r)),
              "scope": render(r["scope"], values) if r["scope"] is not None else None,
              "subject": (render(r["subject_id"], values) if r["subject_id"] is not None
                          else None),
              "created_at": r["created_at"], "last_used_at": r["last_used_at"],
              "revoked_at": r["revoked_at"]} for r in rows]
    return {"items": items, "next_cursor": items[-1]["key_id"] if more else None}


def revoke_key(rt: Runtime, who: Principal, key_id: uuid.UUID | str, *,
               request_id: str | None = None) -> dict[str, Any]:
    """Revoke an API key of the caller's tenant: from now on it authenticates nowhere.

    Idempotent: revoking a revoked key changes nothing, writes no audit row and answers
    ``already_revoked: True`` with the original ``revoked_at``. The revocation appends a
    ``KEY_REVOKE`` audit row naming the key id and role (never the token). A key may
    revoke itself. Returns ``{"key_id", "revoked_at", "already_revoked"}``.

    Raises:
        Forbidden: the caller lacks ``keys:manage``.
        ValidationError: ``key_id`` is not a UUID.
        NotFound: the tenant has no such key (another tenant's key is not told apart).
    """
    who.require("keys:manage")
    kid = checked.parse_id(key_id, "key_id")
    with rt.db.transaction(who.tenant) as conn:
        row = store.revoke_key(conn, who.tenant, kid)
        if row is None:
            raise NotFound("key_id: no API key with this id", field="key_id")
        if not row["already_revoked"]:
            audit.append(conn, tenant=who.tenant, operation="KEY_REVOKE", actor=who.actor,
                         agent=who.agent, request_id=request_id,
                         details={"key_id": str(kid), "role": row["role"],
                                  "self": who.key_id == str(kid)})
    return {"key_id": str(kid), "revoked_at": row["revoked_at"],
            "already_revoked": row["already_revoked"]}


def _effective(row: dict[str, Any]) -> frozenset[str]:
    """A stored key's permissions: its role's, narrowed by ``permissions``, less
    :data:`TENANT_WIDE` when it is limited to a scope or subject."""
    perms = ROLE_PERMISSIONS[row["role"]]
    if row["permissions"] is not None:
        perms = perms & frozenset(row["permissions"])
    if row["scope"] is not None or row["subject_id"] is not None:
        perms = perms - TENANT_WIDE
    return perms


def _limit_values(rt: Runtime, conn: Any, tenant: str,
                  rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The vault values of the placeholders in the stored scope and subject of ``rows``
    (``[erased]`` for a shredded one)."""
    found = {m.group(0) for r in rows for v in (r["scope"], r["subject_id"]) if v
             for m in PLACEHOLDER_RE.finditer(v)}
    return rt.pii.reveal_values(conn, tenant, found) if found else {}


def _limit(stored: str | None, values: dict[str, str]) -> str | None:
    """A key's stored limit as the caller writes it; one whose value was shredded can no
    longer match anything."""
    if stored is None:
        return None
    if any(values.get(m.group(0)) == ERASED for m in PLACEHOLDER_RE.finditer(stored)):
        return _UNUSABLE
    return render(stored, values)
