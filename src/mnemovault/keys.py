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
authenticates afresh. Keys are never deleted, so a listing keeps revoked ones. In key
metadata (:func:`list_keys`, :func:`get_key`) a scope or subject limit is shown as stored,
its personal values as their placeholders, to a caller without ``pii:reveal``; with it,
as the caller writes it (a shredded value is ``[erased]`` for everyone).

The key hierarchy (:data:`RANK`: owner > admin > member > service). A key creates and
revokes only keys at or below its own role; an owner key is revoked only by an
*unlimited* owner key (its role's every permission, no scope or subject: a narrowed owner
key counts as below it) or by the local operator; any key may revoke itself. A tenant's
last unrevoked owner key (for an unlimited one: its last unlimited owner key) cannot be
revoked by a key (:class:`~mnemovault.errors.Conflict`, ``details.rule = "last_owner"``):
create another one first. The local operator (``principal`` None or ``key_id`` None: the
library and the CLI, who own the database) may revoke it: it can always create a new key,
and a leaked last owner key must be revocable. Refusals are
:class:`~mnemovault.errors.Forbidden` with ``details.rule = "key_hierarchy"``.

The token format, the roles and their permissions are in :mod:`mnemovault.auth`; the SQL
in :mod:`mnemovault.store.tenants`.
"""

from __future__ import annotations

import hmac
import threading
import time
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
from mnemovault.errors import Conflict, Forbidden, NotFound, Unauthenticated, ValidationError
from mnemovault.guard import capture as capture_guard
from mnemovault.pii import service as pii
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE, render
from mnemovault.runtime import Runtime
from mnemovault.store import tenants as store

TENANT_WIDE = frozenset({"audit:read", "keys:manage", "admin:export", "admin:delete",
                         "review:approve"})
"""Permissions over the whole tenant, which a scope- or subject-limited key never holds."""

RANK: dict[str, int] = {"owner": 3, "admin": 2, "member": 1, "service": 0}
"""The key hierarchy: a key manages only keys of a rank at or below its own."""

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
    the caller needs ``keys:manage`` in that tenant, may create only a role at or below its
    own (:data:`RANK`) and may not grant a permission it lacks (the new key is at most as
    broad as the caller's). ``permissions`` narrows the
    role's; ``scope`` and ``subject`` limit the key (and drop :data:`TENANT_WIDE`). A
    ``KEY_CREATE`` audit row names the key id, role, permissions and whether it is limited.

    Raises:
        ValidationError: an unknown role or permission, a permission the role lacks, a
            malformed tenant, name, scope or subject.
        Refused, Unavailable: the capture guard found a secret in the name, scope or
            subject (they are stored), or failed closed (:mod:`mnemovault.guard.capture`).
        Forbidden: the caller lacks ``keys:manage`` or a permission it would grant, or
            ``role`` is above its own (``details.rule = "key_hierarchy"``).
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
        if RANK[role] > RANK[principal.role]:
            raise Forbidden(f"role: key hierarchy: a key of role {principal.role!r} creates "
                            f"keys at or below its own role, not {role!r}", field="role",
                            rule="key_hierarchy")
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


TOUCH_EVERY = 60.0
"""Seconds after this process wrote a key's ``last_used_at`` during which it does not ask
again: the statement (:func:`mnemovault.store.tenants.touch_key`) writes at most once a
minute anyway, so within that minute it would be a round trip that changes nothing."""
_touched: dict[tuple[str, uuid.UUID], float] = {}
_touched_lock = threading.Lock()


def _touch(conn: Any, tenant: str, key_id: uuid.UUID) -> float | None:
    """``last_used_at`` of a key that just authenticated (to the minute): skipped while
    this process's own committed write of it is less than :data:`TOUCH_EVERY` old, the
    database's rule otherwise (issue 29: one statement less on nearly every request).
    The time to note with :func:`_touched_at` once the transaction committed, if this
    statement wrote it."""
    now = time.monotonic()
    at = _touched.get((tenant, key_id))
    if at is not None and now - at < TOUCH_EVERY:
        return None
    return now if store.touch_key(conn, tenant, key_id) else None


def _touched_at(tenant: str, key_id: uuid.UUID, at: float | None) -> None:
    if at is None:
        return
    with _touched_lock:
        if len(_touched) > 10_000:
            _touched.clear()
        _touched[(tenant, key_id)] = at


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
        touched = _touch(conn, tenant, key_id)
        values = _limit_values(rt, conn, tenant, [row])
    _touched_at(tenant, key_id, touched)  # committed
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
    for a limited key), ``scope`` and ``subject`` (as the caller writes them with
    ``pii:reveal``, else as stored, personal values as placeholders; a shredded value
    shows ``[erased]``), ``created_at``, ``last_used_at`` (to the minute; None if never
    used) and ``revoked_at`` (None: live). Needs ``keys:manage``, which only unlimited
    keys hold, so a caller who may create a key of any scope sees them all.

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
        more = len(rows) > limit
        rows = rows[:limit]
        items = _metadata(rt, conn, who, rows)
    return {"items": items, "next_cursor": items[-1]["key_id"] if more else None}


def get_key(rt: Runtime, who: Principal, key_id: uuid.UUID | str) -> dict[str, Any]:
    """One API key's metadata, as an item of :func:`list_keys` (limits as placeholders
    without ``pii:reveal``). Needs ``keys:manage``.

    Raises:
        Forbidden: the caller lacks ``keys:manage``.
        ValidationError: ``key_id`` is not a UUID.
        NotFound: the tenant has no such key.
    """
    who.require("keys:manage")
    kid = checked.parse_id(key_id, "key_id")
    with rt.db.transaction(who.tenant) as conn:
        row = store.key_metadata(conn, who.tenant, kid)
        if row is None:
            raise NotFound("key_id: no API key with this id", field="key_id")
        return _metadata(rt, conn, who, [row])[0]


def _metadata(rt: Runtime, conn: Any, who: Principal,
              rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Key rows as metadata items for ``who``: limits revealed with ``pii:reveal``, else as
    stored (placeholders), shredded values ``[erased]`` either way."""
    if "pii:reveal" in who.permissions:
        values, erased = _limit_values(rt, conn, who.tenant, rows), set()
    else:
        values, erased = {}, rt.pii.erased_placeholders(conn, _limit_placeholders(rows))

    def shown(v: str | None) -> str | None:
        return render(v, values, erased) if v is not None else None

    return [{"key_id": str(r["key_id"]), "role": r["role"], "name": r["name"],
             "permissions": sorted(_effective(r)), "scope": shown(r["scope"]),
             "subject": shown(r["subject_id"]), "created_at": r["created_at"],
             "last_used_at": r["last_used_at"], "revoked_at": r["revoked_at"]}
            for r in rows]


def revoke_key(rt: Runtime, who: Principal, key_id: uuid.UUID | str, *,
               request_id: str | None = None) -> dict[str, Any]:
    """Revoke an API key of the caller's tenant: from now on it authenticates nowhere.

    The key hierarchy applies (module docstring): a key revokes keys at or below its own
    role; an owner key only an unlimited owner key or the local operator; any key itself.
    A key cannot revoke the tenant's last owner key (its last unlimited one, if the key is
    unlimited); the local operator can, and ``last_owner`` says it did (make a new one
    with ``mnemovault keys create --role owner``).

    Idempotent: revoking a revoked key changes nothing, writes no audit row and answers
    ``already_revoked: True`` with the original ``revoked_at``. The revocation appends a
    ``KEY_REVOKE`` audit row naming the key id and role (never the token). Returns
    ``{"key_id", "revoked_at", "already_revoked", "last_owner"}``.

    Raises:
        Forbidden: the caller lacks ``keys:manage``, or the key is above it in the
            hierarchy (``details.rule = "key_hierarchy"``).
        Conflict: a key tried to revoke the tenant's last owner key (``details.rule =
            "last_owner"``); nothing changed.
        ValidationError: ``key_id`` is not a UUID.
        NotFound: the tenant has no such key (another tenant's key is not told apart).
    """
    who.require("keys:manage")
    kid = checked.parse_id(key_id, "key_id")
    last_owner = False
    with rt.db.transaction(who.tenant) as conn:
        target = store.key(conn, who.tenant, kid)
        if target is None:
            raise NotFound("key_id: no API key with this id", field="key_id")
        if who.key_id != str(kid):
            _check_rank(who, target)
        if target["role"] == "owner" and target["revoked_at"] is None:
            last_owner = _last_owner(conn, who, kid, target)
        row = store.revoke_key(conn, who.tenant, kid)
        if row is None:
            raise NotFound("key_id: no API key with this id", field="key_id")
        if not row["already_revoked"]:
            audit.append(conn, tenant=who.tenant, operation="KEY_REVOKE", actor=who.actor,
                         agent=who.agent, request_id=request_id,
                         details={"key_id": str(kid), "role": row["role"],
                                  "self": who.key_id == str(kid),
                                  **({"last_owner": True} if last_owner else {})})
    return {"key_id": str(kid), "revoked_at": row["revoked_at"],
            "already_revoked": row["already_revoked"],
            "last_owner": last_owner and not row["already_revoked"]}


def _unlimited(who: Principal) -> bool:
    """Whether ``who`` holds every permission of its role and no scope or subject limit."""
    return who.permissions == ROLE_PERMISSIONS[who.role] and not who.limited


def _check_rank(who: Principal, target: dict[str, Any]) -> None:
    """The key hierarchy for revoking ``target`` (a stored key row) by ``who``, another key
    or the local operator.

    Raises:
        Forbidden: ``details.rule = "key_hierarchy"``.
    """
    role = target["role"]
    if RANK[role] > RANK[who.role]:
        raise Forbidden(f"key_id: key hierarchy: a key of role {who.role!r} revokes keys at "
                        f"or below its own role, not an {role!r} key", field="key_id",
                        rule="key_hierarchy")
    if role == "owner" and not _unlimited(who):
        raise Forbidden("key_id: key hierarchy: only an unlimited owner key (or the local "
                        "operator) revokes an owner key; a narrowed owner key counts as "
                        "below it", field="key_id", rule="key_hierarchy")


def _last_owner(conn: Any, who: Principal, kid: uuid.UUID, target: dict[str, Any]) -> bool:
    """Whether revoking owner key ``kid`` leaves the tenant without an owner key (without
    an unlimited one, if ``kid`` is unlimited). The tenant's owner keys are locked first,
    so concurrent revocations see each other.

    Raises:
        Conflict: it would, and ``who`` is a key (``details.rule = "last_owner"``).
    """
    others = [o for o in store.live_owner_keys(conn, who.tenant) if o["key_id"] != kid]
    full = ROLE_PERMISSIONS["owner"]
    if _effective(target) == full:
        others = [o for o in others if _effective(o) == full]
    if others:
        return False
    if who.key_id is not None:
        raise Conflict("key_id: the tenant's last owner key cannot be revoked by a key "
                       "(last_owner): create another unlimited owner key first; the local "
                       "operator (mnemovault keys revoke) may revoke it", field="key_id",
                       rule="last_owner")
    return True


def _effective(row: dict[str, Any]) -> frozenset[str]:
    """A stored key's permissions: its role's, narrowed by ``permissions``, less
    :data:`TENANT_WIDE` when it is limited to a scope or subject."""
    perms = ROLE_PERMISSIONS[row["role"]]
    if row["permissions"] is not None:
        perms = perms & frozenset(row["permissions"])
    if row["scope"] is not None or row["subject_id"] is not None:
        perms = perms - TENANT_WIDE
    return perms


def _limit_placeholders(rows: Sequence[dict[str, Any]]) -> set[str]:
    """The placeholders in the stored scope and subject of ``rows``."""
    return {m.group(0) for r in rows for v in (r["scope"], r["subject_id"]) if v
            for m in PLACEHOLDER_RE.finditer(v)}


def _limit_values(rt: Runtime, conn: Any, tenant: str,
                  rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The vault values of the placeholders in the stored scope and subject of ``rows``
    (``[erased]`` for a shredded one)."""
    found = _limit_placeholders(rows)
    return rt.pii.reveal_values(conn, tenant, found) if found else {}


def _limit(stored: str | None, values: dict[str, str]) -> str | None:
    """A key's stored limit as the caller writes it; one whose value was shredded can no
    longer match anything."""
    if stored is None:
        return None
    if any(values.get(m.group(0)) == ERASED for m in PLACEHOLDER_RE.finditer(stored)):
        return _UNUSABLE
    return render(stored, values)
