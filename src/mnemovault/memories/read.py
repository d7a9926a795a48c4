"""Reading memories by id and by page (SPEC section 10's listing order: oldest id first,
keyset pagination). Output is rendered for the caller (:func:`mnemovault.pii.service.
render`): shredded values ``[erased]``, originals only with ``reveal``."""

from __future__ import annotations

import uuid
from typing import Any

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.auth import Principal
from mnemovault.errors import NotFound, ValidationError
from mnemovault.guard.sanitise import FLAG_KEY
from mnemovault.models import Memory, Page
from mnemovault.pii import service as pii
from mnemovault.runtime import Runtime
from mnemovault.store import memories as store
from mnemovault.validation import parse_id


def get(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, *, reveal: bool = False,
        request_id: str | None = None) -> Memory:
    """One memory by id, if the caller's view sees it (:mod:`mnemovault.visibility`: a
    pending record only for reviewers). Needs ``memory:read`` (``pii:reveal`` with
    ``reveal``).

    Raises:
        NotFound: no such id in this tenant (another tenant's id is not found either), or
            outside the key's scope.
    """
    who.require("memory:read")
    mid = parse_id(memory_id, "id")
    if reveal:
        who.require("pii:reveal")
    with rt.db.transaction(who.tenant) as conn:
        row = store.by_id(conn, who.tenant, mid)
        v = visibility.view(rt, conn, who)
        if row is None or not v.sees(row):
            raise NotFound("id: no memory with this id", field="id")
        return v.render([Memory.from_row(row)], reveal=reveal, request_id=request_id)[0]


def page(rt: Runtime, who: Principal, *, scope: str | None = None,
         subject: str | None = None, limit: int = 50, cursor: uuid.UUID | str | None = None,
         include_superseded: bool = False, flagged: bool = False,
         key: str | None = None) -> Page:
    """Memories oldest id first, keyset-paginated: pass ``next_cursor`` back as ``cursor``
    (the last id seen). ``limit`` is 1..100. Scope and subject are matched as stored
    (pseudonymised like stored text). ``flagged``: only those the injection sanitiser
    flagged (:data:`mnemovault.guard.sanitise.FLAG_KEY`), for review. ``key``: only the
    versions of that key (matched as stored, like scope: by its keyed hash). Needs ``memory:read``.

    Raises:
        ValidationError: limit out of range, malformed cursor.
    """
    who.require("memory:read")
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    scope = checked.optional_name(scope, "scope")
    scope = scope if scope is not None else who.scope
    who.check_scope(scope)
    subject = checked.optional_name(subject, "subject")
    who.check_subject(subject)
    subject = who.subject or subject
    key = checked.optional_name(key, "key")
    after = parse_id(cursor, "cursor") if cursor is not None else None
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        stored = None if key is None else pii.stored_key(rt, conn, who.tenant, tr(key) or key)
        if key is not None and stored is None:  # a tenant with nothing stored yet
            return Page(items=[], next_cursor=None)
        v = visibility.view(rt, conn, who, tr=tr)
        params: dict[str, Any] = {}
        visible = v.clause(params, statuses=None if include_superseded else
                           ("active", "pending_review"))
        rows = store.page(conn, who.tenant, scope=tr(scope), subject=tr(subject),
                          visible=visible, params=params, cursor=after, limit=limit + 1,
                          flagged_by=FLAG_KEY if flagged else None, key=stored)
        items = v.render([Memory.from_row(r) for r in rows[:limit]])
    nxt = items[-1].id if len(rows) > limit else None
    return Page(items=items, next_cursor=nxt)


def source_ids(rt: Runtime, who: Principal, scopes: list[str]) -> dict[str, set[str]]:
    """The ``provenance.source_id`` values already stored in each of ``scopes`` (as named:
    a scope that is pseudonymised when stored is not matched), for an import to skip those
    records. Needs ``memory:read`` and each scope within the caller's; only rows the
    caller may see count (:mod:`mnemovault.visibility`: a subject-limited key learns
    nothing of other subjects' records, pending rows count for reviewers)."""
    who.require("memory:read")
    for s in scopes:
        who.check_scope(s)
    with rt.db.transaction(who.tenant) as conn:
        params: dict[str, Any] = {}
        visible = visibility.view(rt, conn, who).clause(params, statuses=None)
        return store.source_ids(conn, who.tenant, scopes, visible=visible, params=params)
