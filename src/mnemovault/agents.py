"""Self-registered agents (SPEC section 11: "agents may be allowed to register themselves
(off by default); such keys never get ``pii:reveal``").

With ``ALLOW_SELF_REGISTRATION=true``, ``POST /v1/agents/register`` ``{"name"}`` makes a
key for the caller, who needs none (:func:`register`). The decisions:

* **Which tenant**: the one named by ``MNEMOVAULT_SELF_REGISTRATION_TENANT`` (default
  ``agents``, created on the first registration), never one chosen by the caller: an
  operator opts a tenant in by naming it, and by default self-registered agents live apart
  from every tenant that holds people's data.
* **What key**: role ``service`` (``memory:read``, ``memory:write``: at most ``service``,
  never ``pii:reveal``, never a tenant-wide permission), **limited to a scope of its own**,
  ``agent-<12 random hex>``: an agent anyone could register must not read what others
  stored, so it sees and writes only its own scope, even in a tenant named by the
  operator. The caller's ``name`` is the key's name (shown to owners), nothing more.
* **Budgets**: every request of a self-registered key also spends from its own
  ``rate_limit_agent`` budget (:class:`mnemovault.api.edge.Edge`); a write or chat request
  is refused (403, ``details.permission = "quota"``) once its scope holds
  ``MNEMOVAULT_SELF_REGISTRATION_QUOTA`` memories (superseded versions not counted; the
  request that crosses the quota is admitted whole, so a batch can pass it by at most its
  own size). Registration itself spends from the client address's ``rate_limit_register``
  budget.
* **Audit and listing**: ``keys.create_key`` writes the ``KEY_CREATE`` row (actor
  ``local``: no key made it); an ``AGENT_REGISTER`` row names the key id, role,
  permissions and quota (never the name, which is the caller's text, nor the address);
  the key's ``origin`` is ``self_registered`` (migration 0012), which ``keys list`` shows.
  Owners revoke such keys like any other.

The key is made through :func:`mnemovault.keys.create_key` (the rules of roles and
limits stay there); the origin and audit row follow in a second transaction, and if that
fails the key is revoked before the error is raised, so no unmarked key is ever handed out.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from mnemovault import keys
from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.auth import Principal, Role
from mnemovault.errors import Forbidden
from mnemovault.runtime import Runtime
from mnemovault.store import agents as store

ROLE: Role = "service"
ISSUED = "issued"
SELF_REGISTERED = "self_registered"


def register(rt: Runtime, name: str, *, request_id: str | None = None) -> dict[str, Any]:
    """Make a key for a self-registering agent (module docstring): ``{"key_id", "token"
    (shown once), "tenant", "role", "permissions", "scope", "subject": None, "quota"}``.

    Raises:
        Forbidden: self-registration is off (``ALLOW_SELF_REGISTRATION``).
        ValidationError: a blank or malformed ``name``.
    """
    if not rt.settings.allow_self_registration:
        raise Forbidden("registration: self-registration is off on this server "
                        "(ALLOW_SELF_REGISTRATION)", permission="self_registration")
    name = checked.name(name, "name")
    tenant = rt.settings.self_registration_tenant
    scope = f"agent-{secrets.token_hex(6)}"
    made = keys.create_key(rt, tenant, ROLE, name=name, scope=scope)
    quota = rt.settings.self_registration_quota
    try:
        with rt.db.transaction(tenant) as conn:
            store.set_origin(conn, tenant, made.key_id, SELF_REGISTERED)
            audit.append(conn, tenant=tenant, operation="AGENT_REGISTER",
                         actor=f"key:{made.key_id}", request_id=request_id,
                         details={"key_id": str(made.key_id), "role": ROLE,
                                  "permissions": made.permissions, "quota": quota})
    except BaseException:
        keys.revoke_key(rt, Principal.local(tenant), made.key_id)
        raise
    return {"key_id": str(made.key_id), "token": made.token, "tenant": tenant,
            "role": made.role, "permissions": made.permissions, "scope": made.scope,
            "subject": None, "quota": quota}


def origins(rt: Runtime, tenant: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` (keys of ``tenant``, as :func:`mnemovault.keys.list_keys` lists them) with
    ``origin``: ``issued`` or ``self_registered``."""
    ids = [uuid.UUID(i["key_id"]) for i in items]
    with rt.db.transaction(tenant) as conn:
        found = store.origins(conn, tenant, ids)
    return [{**i, "origin": found.get(uuid.UUID(i["key_id"]), ISSUED)} for i in items]


class Agents:
    """What the edge asks about a principal, cached per process: whether its key is
    self-registered (an origin never changes) and whether its scope is at its quota."""

    def __init__(self, rt: Runtime, *, size: int = 10_000) -> None:
        self.rt = rt
        self.size = size
        self._known: dict[tuple[str, str], str | None] = {}  # (tenant, key id) -> scope

    def cached(self, who: Principal) -> tuple[bool, str | None]:
        """``(known, scope)``: whether :meth:`scope_of` would answer without the database,
        and its answer."""
        key = (who.tenant, who.key_id or "")
        return (who.key_id is None or key in self._known), self._known.get(key)

    def scope_of(self, who: Principal) -> str | None:
        """The stored scope of a self-registered key, None for any other key."""
        if who.key_id is None:
            return None
        cache_key = (who.tenant, who.key_id)
        if cache_key not in self._known:
            with self.rt.db.transaction(who.tenant) as conn:
                row = store.agent(conn, who.tenant, uuid.UUID(who.key_id))
            if len(self._known) >= self.size:
                self._known.clear()
            self._known[cache_key] = (row["scope"] if row and row["origin"] == SELF_REGISTERED
                                      else None)
        return self._known[cache_key]

    def check_quota(self, who: Principal, scope: str) -> None:
        """Raise :class:`Forbidden` when the agent's scope holds its quota of memories."""
        quota = self.rt.settings.self_registration_quota
        with self.rt.db.transaction(who.tenant) as conn:
            held = store.stored(conn, who.tenant, scope)
        if held >= quota:
            raise Forbidden(f"quota: this agent's scope holds {held} memories, its quota is "
                            f"{quota}; forget some first", permission="quota",
                            held=held, quota=quota)

