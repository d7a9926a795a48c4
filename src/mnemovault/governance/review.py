"""The review gate (SPEC section 8): with ``REQUIRE_REVIEW=true`` new memories, procedures
and versions are held as ``pending_review`` (the write path calls
:func:`mnemovault.store.review.hold`; procedures take
:func:`mnemovault.guard.capture.initial_status`) and are not recalled, woken or shown to a
chat model until a caller with ``review:approve`` approves them. Here: the queue and the
two decisions.

An approved version stays current until its successor is approved. A held new version of
a keyed memory does not displace the key's ``active`` version: the key has at most one
``active`` and one ``pending_review`` row (migration ``0011_visibility``), so recall, wake
and chat keep showing the approved version while the new one waits. The new row's
``parent_id`` is that active version (the key's pending one when it has none) and its
``version`` one more than the key's highest. A newer held version of the same key
*displaces* the older pending one: it becomes ``superseded`` with ``provenance.review =
"displaced"`` (kept as history, never recalled, gone from the queue), so a key waits on
one proposal, the newest (as without the gate the newest write wins). A held procedure
version likewise leaves its parent recalled until it is approved.

* :func:`queue`: pending items oldest first (uuid7 ids are time-ordered), keyset paged
  (``limit`` 1..100, ``cursor`` = the last id seen), within a limited key's scope and
  subject. Procedures are ``memories`` rows of type ``procedure``, so they are in it.
* :func:`approve`: the item becomes ``active`` (``provenance.review = "approved"``) and,
  in the same transaction, the version it replaces becomes ``superseded``: the key's
  ``active`` row for a keyed memory (its ``valid_to`` the item's ``valid_from``), the
  parent for a procedure version (:func:`mnemovault.procedures.service.settle_versions`).
  A keyed item dated before its key's current version is placed on the key's timeline
  as a historical version instead (``superseded``, approved; the current one stays:
  :mod:`mnemovault.memories.valid_time`).
* :func:`reject`: an item that is not a version of another (no ``parent_id``) is deleted
  through the one forget path (:func:`mnemovault.governance.forget.forget`: its vault
  values no other record uses are shredded, memories derived from it go too, a
  ``FORGET`` row with trigger ``review``). A rejected *version* is kept as history
  instead (forgetting it would forget every version of it): it becomes ``superseded``
  with ``provenance.review = "rejected"`` and is never recalled. The key's active version
  simply stays. Only where the parent had gone (a rectified memory held for review,
  whose parent is the version before it; versions held before ``0011_visibility``) is
  the parent made live again (:func:`mnemovault.store.review.restore_parent`), unless it
  was itself never approved.

Separation of duties. With ``REVIEW_SELF_APPROVAL=false`` (the default) an item is
approved only by another actor than the one that captured it: the actor recorded in the
held row's ``provenance.captured_by`` when it was held (``key:<id>``, or ``local`` for the
library and CLI operator, which counts as one actor), and, when the reviewer names an
agent (``Principal.agent``), the ``provenance.agent`` of the item. A self-approval is
:class:`~mnemovault.errors.Forbidden` with ``details.rule = "separation_of_duties"``. So a
local capture is not approved locally unless ``REVIEW_SELF_APPROVAL=true``: the library
embedded in an agent is exactly the writer the gate is meant to check, and an operator who
is the only person can set the setting (or approve with a key). Rows held before
``captured_by`` was recorded carry no capturer and are not refused by this rule. Rejecting
one's own pending capture is allowed: it withdraws what was never published, and the same
actor could have chosen not to write it (the rejection is audited like any other).

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
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, Forbidden, NotFound, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.guard import capture
from mnemovault.memories import valid_time
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
    live again; ``superseded`` the versions an approval replaced (the key's active
    version, or a procedure version's parent)."""

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
        items = visibility.view(rt, conn, who, "review", tr=tr).render(
            [Memory.from_row(r) for r in rows[:limit]])
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
    if row is None and store.was_rejected(conn, who.tenant, mid):
        raise Conflict("id: this item was rejected (and deleted) already; nothing was "
                       "changed", field="id", status="deleted")
    if row is None or not visibility.view(rt, conn, who).within(row):
        raise NotFound("id: no memory with this id", field="id")
    if row["status"] != "pending_review":
        raise Conflict(f"id: this memory is not pending review (status {row['status']}); "
                       "it was decided already or never held", field="id",
                       status=row["status"])
    return row


def _check_duties(rt: Runtime, conn: Any, who: Principal, row: dict[str, Any]) -> None:
    """The separation of duties (module docstring): refuse ``who`` approving what it
    captured itself, unless ``REVIEW_SELF_APPROVAL=true``.

    Raises:
        Forbidden: ``details.rule = "separation_of_duties"``; the item stays pending.
    """
    if rt.settings.review_self_approval:
        return
    prov = row["provenance"] or {}
    same = prov.get(store.CAPTURED_BY) == who.actor
    agent = prov.get("agent")
    if not same and who.agent is not None and isinstance(agent, str):
        same = agent in (who.agent, pii.Translator(rt, conn, who.tenant, names=True)(who.agent))
    if same:
        raise Forbidden("id: separation of duties: the reviewer captured this item itself "
                        "and may not approve it (REVIEW_SELF_APPROVAL=false); another key "
                        "must approve it", field="id", rule="separation_of_duties")


def _check_parent(conn: Any, who: Principal, row: dict[str, Any]) -> None:
    """A procedure version is approved only while its parent is current: two versions
    proposed from one parent cannot both become active (the second would leave two live
    versions of one procedure). The later one is refused; it stays pending, and rejecting
    it, or proposing it again as a version of the current one, is the way on.

    Raises:
        Conflict: ``details.rule = "parent_replaced"``, ``details.current`` the active
            version that replaced the parent.
    """
    if row["type"] != "procedure" or row["parent_id"] is None:
        return
    current = store.replaced_parent(conn, who.tenant, row["parent_id"])
    if current is not None:
        raise Conflict(f"id: this version's parent was replaced by another approved version "
                       f"({current}); reject this one, or propose it again as a version of "
                       f"{current}", field="id", rule="parent_replaced", current=str(current))


def _audit(conn: Any, who: Principal, operation: str, mid: uuid.UUID, request_id: str | None,
           comment: str | None, **details: Any) -> int:
    return audit.append(conn, tenant=who.tenant, operation=operation, actor=who.actor,
                        agent=who.agent, memory_ids=[str(mid)], trigger="review",
                        request_id=request_id,
                        details={"reviewer": who.actor, "comment": comment, **details})


def approve(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, *,
            comment: str | None = None, request_id: str | None = None) -> ReviewDecision:
    """Approve a pending item: it becomes active (recalled from now on) and the version it
    replaces superseded (module docstring). One transaction with its ``REVIEW_APPROVE``
    audit row. Needs ``review:approve``, and another actor than the item's capturer
    unless ``REVIEW_SELF_APPROVAL=true``.

    Raises:
        Forbidden: missing ``review:approve``; the caller captured the item itself
            (``details.rule = "separation_of_duties"``).
        NotFound: no such id for this caller.
        Conflict: the item is not pending review (decided already); a procedure version
            whose parent another approved version replaced (``rule =
            "parent_replaced"``).
        ValidationError: a malformed id, a blank or too long comment.
        Refused, Unavailable: the capture guard refused the comment or failed.
    """
    who.require("review:approve")
    mid = parse_id(memory_id, "id")
    text = _comment(rt, who, comment, request_id)
    with rt.db.transaction(who.tenant) as conn:
        row = _pending_row(rt, conn, who, mid)
        _check_duties(rt, conn, who, row)
        _check_parent(conn, who, row)
        note = pii.Translator(rt, conn, who.tenant)(text)
        # placed on its key's timeline by its event time (mnemovault.memories.valid_time):
        # the key's active version goes first (a key has one active row at most), or this
        # one is a statement dated before it and becomes a historical version
        placement = valid_time.Placement(current=True, valid_to=None)
        if row.get("key_hash") is not None:
            placement = valid_time.place(
                conn, who.tenant, row["scope"], row["key_hash"],
                row["valid_from"] or row["created_at"], datetime.now(UTC), exclude=mid)
        store.approve(conn, who.tenant, mid, current=placement.current,
                      valid_to=placement.valid_to)
        replaced = placement.retired
        superseded: list[uuid.UUID] = [replaced] if replaced is not None else []
        if row["type"] == "procedure":
            from mnemovault.procedures import service as procedures

            superseded += procedures.settle_versions(conn, [mid])
        seq = _audit(conn, who, "REVIEW_APPROVE", mid, request_id, note,
                     decision="approved", type=row["type"],
                     **({} if placement.current else {"historical": True}),
                     superseded=[str(s) for s in superseded])
    return ReviewDecision(id=mid, decision="approved",
                          status="active" if placement.current else "superseded",
                          reviewer=who.actor, superseded=superseded, audit_seq=seq)


def reject(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, *,
           comment: str | None = None, request_id: str | None = None) -> ReviewDecision:
    """Reject a pending item (module docstring: deleted through the forget path, or a
    version kept as rejected history while the key's active version stays). One
    transaction with its ``REVIEW_REJECT`` audit row (and the ``FORGET`` row of a delete).
    Needs ``review:approve``; the capturer may reject its own item (module docstring).

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


def flag(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, action: str, *,
         request_id: str | None = None) -> dict[str, Any]:
    """A person's decision on a record the injection sanitiser flagged on import
    (``provenance.injection_flags``; the third choice, forget, is the forget path):

    * ``keep``: the record stays as it is (the redactions stay); ``provenance.flag_review
      = "kept"`` records that a person looked at it.
    * ``review``: the record is held for review (``pending_review``, not recalled), as the
      review gate holds a new capture, with the caller as its ``captured_by``: another
      reviewer decides it (separation of duties). ``flag_review = "sent_to_review"``.

    One transaction with its ``FLAG_KEEP`` or ``FLAG_REVIEW`` audit row (trigger
    ``review``, the record's id, the families flagged). Needs ``review:approve``.

    Returns ``{"id", "outcome" ("kept" | "sent_to_review"), "status", "audit_seq"}``.

    Raises:
        Forbidden: missing ``review:approve``.
        NotFound: no such id for this caller, or the record was not flagged.
        Conflict: ``review`` of a record that is not active (pending, superseded).
        ValidationError: an action that is neither ``keep`` nor ``review``; a malformed id.
    """
    who.require("review:approve")
    if action not in ("keep", "review"):
        raise ValidationError("action: must be keep or review (forget is the forget path)",
                              field="action")
    mid = parse_id(memory_id, "id")
    with rt.db.transaction(who.tenant) as conn:
        row = store.lock(conn, who.tenant, mid)
        if row is None or not visibility.view(rt, conn, who).within(row):
            raise NotFound("id: no memory with this id", field="id")
        flags = (row["provenance"] or {}).get("injection_flags")
        if not flags:
            raise NotFound("id: this memory was not flagged by the injection sanitiser",
                           field="id")
        if action == "review":
            if row["status"] != "active":
                raise Conflict(f"id: only an active record can be sent to review (status "
                               f"{row['status']})", field="id", status=row["status"])
            store.hold(conn, who.tenant, [mid], captured_by=who.actor)
            outcome, status = "sent_to_review", "pending_review"
        else:
            outcome, status = "kept", row["status"]
        store.mark_flag(conn, who.tenant, mid, outcome)
        seq = audit.append(conn, tenant=who.tenant,
                           operation="FLAG_REVIEW" if action == "review" else "FLAG_KEEP",
                           actor=who.actor, agent=who.agent, memory_ids=[str(mid)],
                           trigger="review", request_id=request_id,
                           details={"reviewer": who.actor, "outcome": outcome,
                                    "families": str(flags).split(",")})
    return {"id": mid, "outcome": outcome, "status": status, "audit_seq": seq}
