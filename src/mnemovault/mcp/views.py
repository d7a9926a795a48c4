"""``timeline``, ``wake`` and ``audit_verify`` for the MCP tools: thin shapes over
:meth:`MemoryVault.timeline` and :meth:`MemoryVault.wake` (the capability is
:mod:`mnemovault.recall.wake`), with the caller's principal, so a key sees here exactly
what it may see over the HTTP API. Timestamps arrive as ISO 8601 strings."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from mnemovault.audit.service import deployment_public_key
from mnemovault.auth import Principal
from mnemovault.errors import NotFound, ValidationError
from mnemovault.models import Memory
from mnemovault.validation import TIME_RULE, check_time

if TYPE_CHECKING:
    from mnemovault import MemoryVault

def memory_item(m: Memory) -> dict[str, Any]:
    """A memory as a tool returns it (JSON-ready; content as stored: placeholders, and
    ``[erased]`` for shredded values)."""
    return {"id": str(m.id), "scope": m.scope, "subject": m.subject, "type": m.type,
            "key": m.key, "version": m.version, "pinned": m.pinned, "archived": m.archived,
            "status": m.status, "created_at": m.created_at.isoformat(),
            "valid_from": m.valid_from.isoformat() if m.valid_from else None,
            "valid_to": m.valid_to.isoformat() if m.valid_to else None, "content": m.content}


def parse_time(value: str | None, field: str) -> datetime | None:
    """An ISO 8601 timestamp (naive: UTC) within the bounds every timestamp obeys.

    Raises:
        ValidationError: names ``field``.
    """
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{field}: must be an ISO 8601 timestamp", field=field) from None
    try:
        return check_time(parsed)
    except ValueError:
        raise ValidationError(f"{field}: {TIME_RULE}", field=field) from None


def timeline(vault: MemoryVault, who: Principal, *, scope: str, subject: str | None,
             since: str | None, until: str | None, cursor: str | None,
             limit: int) -> dict[str, Any]:
    """One page of the timeline (:meth:`MemoryVault.timeline`: oldest first by creation
    time, ``[since, until)``): ``{"items": [...], "next_cursor": str or None}``.

    Raises:
        ValidationError: a bad timestamp, limit or cursor (names the field).
        Forbidden: missing ``memory:read``, or outside the key's limits.
    """
    page = vault.timeline(scope=scope, subject=subject, since=parse_time(since, "since"),
                          until=parse_time(until, "until"), limit=limit, cursor=cursor,
                          principal=who)
    return {"items": [memory_item(m) for m in page.items], "next_cursor": page.next_cursor}


def wake(vault: MemoryVault, who: Principal, *, scope: str, subject: str | None,
         budget_tokens: int) -> dict[str, Any]:
    """The waking state (:meth:`MemoryVault.wake`): ``pack`` (the fenced context pack),
    ``records`` (id, type, why it was chosen, created_at, in pack order),
    ``tokens_estimated``, ``budget_tokens`` and ``omitted`` (candidates that did not fit).

    Raises:
        ValidationError: bad scope, subject or budget (names the field).
        Forbidden: missing ``memory:read``, or outside the key's limits.
    """
    state = vault.wake(scope=scope, subject=subject, budget=budget_tokens, principal=who)
    listed = [{"id": str(m.id), "type": m.type, "reason": reason,
               "created_at": m.created_at.isoformat()}
              for m, reason in zip(state.records, state.reasons, strict=True)]
    return {"pack": state.pack, "records": listed, "tokens_estimated": state.tokens,
            "budget_tokens": state.budget, "omitted": state.left_out}


def audit_status(vault: MemoryVault, who: Principal) -> dict[str, Any]:
    """The tenant's audit chain verified in the database (:meth:`AuditService.verify`, as
    ``mnemovault audit verify`` does): against the latest signed checkpoint and this
    deployment's public key when the tenant has one, else the chain alone (with a warning
    saying so). :meth:`VerifyResult.to_dict` plus ``checkpoint_checked``.

    Raises:
        Forbidden: missing ``audit:read``.
    """
    try:
        note: str | None = vault.audit.checkpoint(who)["note"]
    except NotFound:
        note = None
    found = deployment_public_key(vault.settings) if note is not None else None
    result = vault.audit.verify(who, checkpoint=note if found else None,
                                public_key=found[0] if found else None)
    out = result.to_dict()
    if note is None:
        out["warnings"] = [*out.get("warnings", []),
                           "no signed checkpoint yet: the chain was checked, no Merkle root"]
    return {**out, "checkpoint_checked": found is not None}
