"""The governance capability (SPEC sections 4 and 10): forget (preview, by ids, by query),
pin and unpin, and the retention job. Each operation is one transaction with its audit row.

The forget lifecycle's steps are in :mod:`mnemovault.governance.forget`, the retention
score in :mod:`mnemovault.governance.retention`, the in-band chat commands that call these
functions in :mod:`mnemovault.governance.commands`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import (
    Conflict,
    Refused,
    ValidationError,
    tenant_job_failure,
)
from mnemovault.governance import forget as forget_mod
from mnemovault.governance import retention
from mnemovault.models import ForgetResult, PinResult, RetentionResult
from mnemovault.pii import service as pii
from mnemovault.pii.vault import PLACEHOLDER_RE, render
from mnemovault.recall.service import recall
from mnemovault.runtime import Runtime
from mnemovault.store import memories as memory_store
from mnemovault.store import tenants as tenant_store
from mnemovault.store.db import caused_by
from mnemovault.validation import parse_id

log = logging.getLogger(__name__)

Ids = Sequence[uuid.UUID | str] | uuid.UUID | str


def _id_list(ids: Ids | None) -> list[uuid.UUID]:
    if isinstance(ids, uuid.UUID | str):
        ids = [ids]
    return [parse_id(i, f"ids.{n}") for n, i in enumerate(ids or [])]


def query_matches(rt: Runtime, who: Principal, query: str, scope: str,
                  k: int | None = None) -> list[uuid.UUID]:
    """The memories of ``scope`` a forget query matches, best first: among the
    ``forget_candidates`` recall candidates (archived included, statistics untouched),
    those whose cosine similarity is at least ``forget_min_similarity`` and within
    ``forget_similarity_margin`` of the best one; then every memory whose stored fields use
    a vault value the query names (by its original or its placeholder)."""
    query = checked.query(query)
    s = rt.settings
    hits = recall(rt, who, query, scope=scope, k=k or s.forget_candidates,
                  filters={"include_archived": True}, touch=False)
    sims = sorted(((h.similarity, h.memory.id) for h in hits if h.similarity is not None),
                  key=lambda x: -x[0])
    floor = s.forget_min_similarity
    if sims:
        floor = max(floor, sims[0][0] - s.forget_similarity_margin)
    out = [mid for sim, mid in sims if sim >= floor]
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        detected, typed = pii.query_placeholders(rt, conn, who.tenant, query, tr)
        if detected or typed:
            out += memory_store.using_nodes(conn, who.tenant, [*detected, *typed],
                                            tr(scope) or scope, tr(who.subject))
    return list(dict.fromkeys(out))


def forget_preview(rt: Runtime, who: Principal, ids: Sequence[uuid.UUID | str] | None = None,
                   *, query: str | None = None,
                   scope: str | None = None) -> list[dict[str, Any]]:
    """What :func:`forget` of ``ids`` (or of what ``query`` matches in ``scope``) would
    delete, deleting nothing: the named memories, their versions and what was derived from
    them. Each row: ``id``, ``type``, ``archived``, ``status``, ``created_at``, ``reason``
    (``named``, ``version`` or ``derived``) and ``excerpt`` (the first 180 characters as
    stored, shredded values shown ``[erased]``; None, with ``withheld`` saying why, for a
    record the caller's view does not see: :mod:`mnemovault.visibility`). Named rows come
    first, best match first
    for a query. Ids elsewhere (another tenant, or another scope when one is given) are
    left out, never revealed. Needs ``memory:read``.

    Raises:
        ValidationError: neither ids nor a query, a malformed id, a query without scope.
    """
    who.require("memory:read")
    scope = checked.optional_name(scope, "scope")
    scope = scope if scope is not None else who.scope
    who.check_scope(scope)
    if query is not None:
        query = checked.query(query)
        if scope is None:
            raise ValidationError("scope: required with a query", field="scope")
        parsed = query_matches(rt, who, query, scope)
    elif ids:
        parsed = [parse_id(i, f"ids.{n}") for n, i in enumerate(ids)]
    else:
        raise ValidationError("ids: give memory ids or a query", field="ids")
    if not parsed:
        return []
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        rows, _ = forget_mod.preview(conn, parsed, scope=tr(scope), subject=tr(who.subject))
        v = visibility.view(rt, conn, who, tr=tr)
        for r in rows:
            r["withheld"] = v.withheld(r)
        erased = rt.pii.erased_placeholders(
            conn, {m.group(0) for r in rows if r["withheld"] is None
                   for m in PLACEHOLDER_RE.finditer(r["content"])})
    rank = {mid: n for n, mid in enumerate(parsed)}
    order = {"named": 0, "version": 1, "derived": 2}
    rows.sort(key=lambda r: (order[r["reason"]], rank.get(r["id"], 0), r["id"]))
    return [{"id": r["id"], "type": r["type"], "archived": r["archived"],
             "status": r["status"], "created_at": r["created_at"], "reason": r["reason"],
             "excerpt": None if r["withheld"] else forget_mod.excerpt(
                 render(r["content"], {}, erased)),
             "withheld": r["withheld"]}
            for r in rows]


def forget(rt: Runtime, who: Principal, ids: Ids | None = None, *, query: str | None = None,
           scope: str | None = None, trigger: str = "api",
           request_id: str | None = None) -> ForgetResult:
    """Forget memories: the governed forget lifecycle of SPEC section 4, in one transaction
    (:mod:`mnemovault.governance.forget`): the memories and all their versions, the
    memories derived from them (transitively), graph nodes and edges nothing else
    supports, vault values no remaining record uses, and one ``FORGET`` audit row (count,
    first ten ids, keyed hash of the query and the placeholders it names, request id;
    never the query's text).

    ``ids``: exactly these memories. ``query`` alone: what it matches in ``scope``
    (:func:`forget_preview` shows it), only with ``ALLOW_SEMANTIC_FORGET=true``. ``query``
    with ids: the ids are deleted, and the query is hashed into the audit row. Values whose
    original appears in the query are shredded even if other records use them when the
    caller holds ``subject:erase`` (the permission shredding needs); otherwise they follow
    the unused-value rule. ``scope`` limits the named ids to one scope (ids elsewhere
    count as not found).

    Raises:
        Forbidden: missing ``memory:forget`` (service keys lack it).
        ValidationError: no ids and no query, a malformed id, a blank query.
        Refused: a query alone while semantic forget is off; ``details["candidates"]``
            lists the top candidate ids to confirm.
        Conflict: a concurrent write derived from what was being forgotten; nothing was
            deleted and retrying is safe.
    """
    who.require("memory:forget")
    scope = checked.optional_name(scope, "scope")
    scope = scope if scope is not None else who.scope
    who.check_scope(scope)
    parsed = _id_list(ids)
    if query is not None:
        query = checked.query(query)
    if not parsed:
        if query is None:
            raise ValidationError("ids: at least one id is required", field="ids")
        if scope is None:
            raise ValidationError("scope: required with a query", field="scope")
        candidates = query_matches(rt, who, query, scope)
        if not rt.settings.allow_semantic_forget:
            raise Refused(
                "query: forget by query is off (ALLOW_SEMANTIC_FORGET=false); confirm "
                "the candidate ids instead", field="query",
                candidates=[str(c) for c in candidates[:rt.settings.forget_candidates]])
        if not candidates:
            return ForgetResult(deleted=[], not_found=[], audit_seq=None)
        parsed = candidates
    try:
        with rt.db.transaction(who.tenant) as conn:
            tr = pii.Translator(rt, conn, who.tenant)
            qhash: str | None = None
            detected: list[str] = []
            typed: list[str] = []
            if query is not None:
                qhash = forget_mod.query_hash(rt.pii.tenant_keys(conn, who.tenant), query)
                detected, typed = pii.query_placeholders(rt, conn, who.tenant, query, tr)
            out = forget_mod.forget(
                conn, tenant=who.tenant, ids=parsed, actor=who.actor, agent=who.agent,
                trigger=trigger, request_id=request_id, scope=tr(scope),
                subject=tr(who.subject),
                pii=rt.pii if rt.settings.pii_pseudonymize else None,
                query_hash=qhash, query_placeholders=[*detected, *typed],
                shred_values=detected if "subject:erase" in who.permissions else [])
    except Conflict as exc:
        if caused_by(exc, psycopg.errors.ForeignKeyViolation):
            raise Conflict("ids: a concurrent write refers to a memory being forgotten; "
                           "nothing was deleted and retrying is safe", field="ids") from None
        raise
    return ForgetResult(deleted=out.deleted, not_found=out.not_found,
                        audit_seq=out.audit_seq, derived=out.derived, shredded=out.shredded,
                        graph_nodes_removed=out.graph_nodes_removed,
                        graph_edges_removed=out.graph_edges_removed)


def delete(rt: Runtime, who: Principal, ids: Ids, *, trigger: str = "api",
           request_id: str | None = None) -> ForgetResult:
    """Forget memories by id: :func:`forget` with ids only (the same lifecycle).

    Raises:
        Forbidden: missing ``memory:forget`` (service keys lack it).
        ValidationError: an id is not a UUID, or no ids were given.
    """
    if isinstance(ids, uuid.UUID | str):
        ids = [ids]
    if not ids:
        raise ValidationError("ids: at least one id is required", field="ids")
    return forget(rt, who, ids, trigger=trigger, request_id=request_id)


def set_pinned(rt: Runtime, who: Principal, ids: Ids, pinned: bool, *,
               scope: str | None = None, trigger: str = "api",
               request_id: str | None = None) -> PinResult:
    """Pin memories (exempt from retention, and back from the archive if they were there;
    a ``PIN`` audit row) or unpin them (back to normal decay; ``UNPIN``). Needs
    ``memory:forget``.

    Raises:
        ValidationError: no ids, or a malformed id.
    """
    who.require("memory:forget")
    scope = checked.optional_name(scope, "scope")
    scope = scope if scope is not None else who.scope
    who.check_scope(scope)
    parsed = list(dict.fromkeys(_id_list(ids)))
    if not parsed:
        raise ValidationError("ids: at least one id is required", field="ids")
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        changed = memory_store.set_pinned(conn, who.tenant, parsed, pinned, tr(scope),
                                           tr(who.subject))
        seq = None
        if changed:
            seq = audit.append(conn, tenant=who.tenant, operation="PIN" if pinned else "UNPIN",
                               actor=who.actor, agent=who.agent,
                               memory_ids=[str(i) for i in changed[:10]], trigger=trigger,
                               request_id=request_id, details={"count": len(changed)})
    found = set(changed)
    return PinResult(changed=changed, not_found=[i for i in parsed if i not in found],
                     audit_seq=seq)


def run_retention(rt: Runtime, who: Principal, *, dry_run: bool = False,
                  now: datetime | None = None) -> RetentionResult:
    """The retention job for the principal's tenant (:mod:`mnemovault.governance.
    retention`), in one transaction: archive unpinned memories scoring below
    ``retention_archive_below``, forget (the full lifecycle, trigger ``retention``) unpinned
    ones idle ``retention_delete_unused_days`` when that is set, and append a ``RETENTION``
    audit row. ``dry_run`` lists what would be archived, changing nothing. Needs
    ``memory:forget``."""
    who.require("memory:forget")
    who.require_unlimited("retention")
    policy = retention.Policy.from_settings(rt.settings)
    now = now or datetime.now(UTC)
    deleted: list[uuid.UUID] = []
    seq = None
    rt.db.fold_accesses(who.tenant)  # accesses recall recorded for later count here
    with rt.db.transaction(who.tenant) as conn:
        archived = retention.archive(conn, policy, now, dry_run=dry_run)
        if not dry_run:
            stale = retention.unused(conn, policy, now)
            if stale:
                deleted = forget_mod.forget(
                    conn, tenant=who.tenant, ids=stale, actor=who.actor, agent=who.agent,
                    trigger="retention",
                    pii=rt.pii if rt.settings.pii_pseudonymize else None).deleted
            if archived or deleted:
                seq = audit.append(
                    conn, tenant=who.tenant, operation="RETENTION", actor=who.actor,
                    agent=who.agent, memory_ids=[str(i) for i in archived[:10]],
                    trigger="retention",
                    details={"archived": len(archived), "deleted": len(deleted),
                             "archive_below": policy.archive_below,
                             "half_life_days": policy.half_life_days})
    return RetentionResult(tenant=who.tenant, archived=archived, deleted=deleted,
                           dry_run=dry_run, audit_seq=seq)


def run_retention_all(rt: Runtime, *, dry_run: bool = False,
                      now: datetime | None = None) -> list[RetentionResult]:
    """The retention job for every live tenant (operator path: tenants are listed on the
    owner's connection, each then runs under row-level security as itself). A tenant whose
    run fails is logged by its id and reported with ``error`` set (its kind and message);
    the others still run."""
    out = []
    for t in tenant_store.live(rt.db.url):
        try:
            out.append(run_retention(rt, Principal.local(t), dry_run=dry_run, now=now))
        except Exception as exc:  # one tenant's failure must not stop the others
            err = tenant_job_failure("retention", t, exc, log)
            out.append(RetentionResult(tenant=t, archived=[], deleted=[], dry_run=dry_run,
                                       audit_seq=None, error=err.to_dict()))
    return out

