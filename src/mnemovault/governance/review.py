"""The review gate (SPEC section 8): with ``REQUIRE_REVIEW=true`` new memories, procedures
and versions are held as ``pending_review`` (the write path calls
:func:`mnemovault.store.review.hold`; procedures take
:func:`mnemovault.guard.capture.initial_status`) and are not recalled, woken or shown to a
chat model until a caller with ``review:approve`` approves them. Here: the queue and the
two decisions.

* :func:`queue`: pending items oldest first (uuid7 ids are time-ordered), keyset paged
  (``limit`` 1..100, ``cursor`` = the last id seen), within a limited key's scope and
  subject. Procedures are ``memories`` rows of type ``procedure``, so they are in it.
* :func:`approve`: the item becomes ``active`` (``provenance.review = "approved"``); an
  approved procedure version supersedes its parent
  (:func:`mnemovault.procedures.service.settle_versions`).
* :func:`reject`: an item that is not a version of another (no ``parent_id``) is deleted
  through the one forget path (:func:`mnemovault.governance.forget.forget`: its vault
  values no other record uses are shredded, memories derived from it go too, a
  ``FORGET`` row with trigger ``review``). A rejected *version* is kept as history
  instead (forgetting it would forget every version of it): it becomes ``superseded``
  with ``provenance.review = "rejected"``, is never recalled, and its parent is live
  again if the version had displaced it (a keyed memory's new version takes its key's
  live slot when written; the parent comes back unless it was itself never approved).

Each decision is one transaction with its audit row (``REVIEW_APPROVE`` or
``REVIEW_REJECT``): the reviewer (the row's ``actor``, and ``details.reviewer``), the
decision, the outcome and the optional comment. The comment passes the capture guard and
is pseudonymised read-only before it is written (no vault entry is made for it, and no
personal value reaches the audit log). A decision needs ``review:approve`` only: rejecting
deletes without ``memory:forget`` because deleting what was never accepted is the
reviewer's call.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel

from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, NotFound, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.guard import capture
from mnemovault.models import Memory, Page
from mnemovault.pii import service as pii
from mnemovault.runtime import Runtime
from mnemovault.store import review as store
from mnemovault.validation import parse_id

MAX_COMMENT_CHARS = 2000


class ReviewDecision(BaseModel):
    """The result of :func:`approve` or :func:`reject`: ``status`` is the item's status
    after it (``active``, ``superseded``, or ``deleted``); ``deleted`` every memory the
    forget path removed (the item, what was derived from it); ``restored`` the parent made
    live again; ``superseded`` the parents an approved procedure version replaced."""

    id: uuid.UUID
    decision: Literal["approved", "rejected"]
    status: Literal["active", "superseded", "deleted"]
    reviewer: str
    deleted: list[uuid.UUID] = []
    restored: uuid.UUID | None = None
    superseded: list[uuid.UUID] = []
    audit_seq: int


def queue(rt: Runtime, who: Principal, *, scope: str | None = None, limit: int = 50,
          cursor: uuid.UUID | str | None = None) -> Page:
    """Pending items, oldest first, keyset paged (pass ``next_cursor`` back as ``cursor``),
    rendered like :func:`mnemovault.memories.read.page` (placeholders, ``[erased]``).
    Needs ``review:approve``.

    Raises:
        Forbidden: missing ``review:approve``; a scope outside the key's.
        ValidationError: ``limit`` outside 1..100, a malformed cursor or scope.
    """
    who.require("review:approve")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    scope = checked.optional_name(scope, "scope")
    who.check_scope(scope)
    scope = scope if scope is not None else who.scope
    after = parse_id(cursor, "cursor") if cursor is not None else None
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        rows = store.pending(conn, who.tenant, scope=tr(scope), subject=tr(who.subject),
                             cursor=after, limit=limit + 1)
        items = pii.render(rt, conn, who, [Memory.from_row(r) for r in rows[:limit]],
                           reveal=False)
    return Page(items=items, next_cursor=items[-1].id if len(rows) > limit else None)


def _comment(rt: Runtime, who: Principal, comment: str | None,
             request_id: str | None) -> str | None:
    if comment is None:
        return None
    text = checked.query(comment, "comment", max_len=MAX_COMMENT_CHARS)
    capture.check_capture(rt, path="review", fields={"comment": text}, tenant=who.tenant,
                          request_id=request_id)
    return text


def _pending_row(rt: Runtime, conn: Any, who: Principal, mid: uuid.UUID) -> dict[str, Any]:
    row = store.lock(conn, who.tenant, mid)
    if row is None or not pii.within_limits(rt, conn, who, row):
        raise NotFound("id: no memory with this id", field="id")
    if row["status"] != "pending_review":
        raise Conflict(f"id: this memory is not pending review (status {row['status']}); "
                       "it was decided already or never held", field="id",
                       status=row["status"])
    return row


def _audit(conn: Any, who: Principal, operation: str, mid: uuid.UUID, request_id: str | None,
           comment: str | None, **details: Any) -> int:
    return audit.append(conn, tenant=who.tenant, operation=operation, actor=who.actor,
                        agent=who.agent, memory_ids=[str(mid)], trigger="review",
                        request_id=request_id,
                        details={"reviewer": who.actor, "comment": comment, **details})


def approve(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, *,
            comment: str | None = None, request_id: str | None = None) -> ReviewDecision:
    """Approve a pending item: it becomes active (recalled from now on). One transaction
    with its ``REVIEW_APPROVE`` audit row. Needs ``review:approve``.

    Raises:
        Forbidden: missing ``review:approve``.
        NotFound: no such id for this caller.
        Conflict: the item is not pending review (decided already).
        ValidationError: a malformed id, a blank or too long comment.
        Refused, Unavailable: the capture guard refused the comment or failed.
    """
    who.require("review:approve")
    mid = parse_id(memory_id, "id")
    text = _comment(rt, who, comment, request_id)
    with rt.db.transaction(who.tenant) as conn:
        row = _pending_row(rt, conn, who, mid)
        note = pii.Translator(rt, conn, who.tenant)(text)
        store.approve(conn, who.tenant, mid)
        superseded: list[uuid.UUID] = []
        if row["type"] == "procedure":
            from mnemovault.procedures import service as procedures

            superseded = list(procedures.settle_versions(conn, [mid]))
        seq = _audit(conn, who, "REVIEW_APPROVE", mid, request_id, note,
                     decision="approved", type=row["type"],
                     superseded=[str(s) for s in superseded])
    return ReviewDecision(id=mid, decision="approved", status="active", reviewer=who.actor,
                          superseded=superseded, audit_seq=seq)


def reject(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, *,
           comment: str | None = None, request_id: str | None = None) -> ReviewDecision:
    """Reject a pending item (module docstring: deleted through the forget path, or a
    version kept as rejected history with its parent live again). One transaction with its
    ``REVIEW_REJECT`` audit row (and the ``FORGET`` row of a delete). Needs
    ``review:approve``.

    Raises:
        Forbidden: missing ``review:approve``.
        NotFound: no such id for this caller.
        Conflict: the item is not pending review, or a concurrent write derived from it
            (retrying is safe).
        ValidationError: a malformed id, a blank or too long comment.
        Refused, Unavailable: the capture guard refused the comment or failed.
    """
    who.require("review:approve")
    mid = parse_id(memory_id, "id")
    text = _comment(rt, who, comment, request_id)
    with rt.db.transaction(who.tenant) as conn:
        row = _pending_row(rt, conn, who, mid)
        note = pii.Translator(rt, conn, who.tenant)(text)
        deleted: list[uuid.UUID] = []
        restored: uuid.UUID | None = None
        if row["parent_id"] is None:
            out = forget_mod.forget(
                conn, tenant=who.tenant, ids=[mid], actor=who.actor, agent=who.agent,
                trigger="review", request_id=request_id,
                pii=rt.pii if rt.settings.pii_pseudonymize else None)
            deleted, status = list(out.deleted), "deleted"
        else:
            store.mark_rejected(conn, who.tenant, mid)
            status = "superseded"
            if store.restore_parent(conn, who.tenant, row["parent_id"]):
                restored = row["parent_id"]
        seq = _audit(conn, who, "REVIEW_REJECT", mid, request_id, note,
                     decision="rejected", type=row["type"], outcome=status,
                     deleted=len(deleted), restored=str(restored) if restored else None)
    return ReviewDecision(id=mid, decision="rejected", status=status,  # type: ignore[arg-type]
                          reviewer=who.actor, deleted=deleted, restored=restored,
                          audit_seq=seq)
