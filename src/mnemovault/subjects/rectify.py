"""Rectification (SPEC section 10; issue 10, item 4): correct a memory's content.

In one transaction: the memory is locked, the new content is pseudonymised (new vault
entries as on the write path) and embedded, and replaces the old content and embedding
*in place*: same id (lineage and references stay valid), ``version`` + 1, ``updated_at``
now. The old text is not kept anywhere, not as a superseded version either (PostgreSQL
keeps the dead tuple until the table is rewritten: ``scrub``). The memory's graph support
is rebuilt from its new fields; nodes and edges nothing supports any more are removed and
the vault values only the old content used are crypto-shredded. One ``RECTIFY`` audit row
(ids, version, placeholders created and shredded: never content) and one erasure-ledger
row (kind ``rectify``: the shredded placeholders and the rectified id) go with it.

Valid time (issue 23, item 2): rectifying a current (``active``) memory makes a version
the same way a contradicting fact does (:mod:`mnemovault.memories.valid_time`). The
memory (same id) holds the corrected text from the correction on (``valid_from`` = now),
and a new ``superseded`` version (``Rectified.history``: its old version number,
``parent_id`` the memory) holds the stretch before it, ``[old valid_from, now)``, so an
``as_of`` recall of a time before the correction still finds the record. That version
holds the corrected text too: the inaccurate text is kept nowhere (the correction says
the record was wrong, not that the world changed). A superseded or pending memory is
corrected in place, its interval unchanged (a historical version stays where it was on
its key's timeline; a pending one is placed when approved).

A rectification takes the write lock of the memory's subject, so it conflicts with an
erase of that subject like any write. Needs ``subject:erase``.

The new content is a capture like any other (SPEC section 8: every capture): it passes
the capture guard first (:func:`mnemovault.guard.capture.check_capture`, path
``rectify``), before anything is read or written, so a refusal (:class:`~mnemovault.
errors.Refused`) or a failing detector (:class:`~mnemovault.errors.Unavailable`, fail
closed) leaves the memory as it was. When the memory carries the injection sanitiser's
label (it was imported or tool-supplied text with a potential prompt injection), or the
rectification comes from a tool (``trigger`` import, tool or mcp), the new content is
sanitised too (:func:`mnemovault.guard.sanitise.sanitise_rectified`) and the memory keeps
its label, joined by any family found now.

Review gate (SPEC 8: "new memories and new versions are held as ``pending_review``"; SPEC
10: a rectification makes a new version). The old text must still be deleted, not kept
for a reviewer to fall back to, so the rule is: with ``REQUIRE_REVIEW=true`` a live
(``active``) memory that is rectified becomes ``pending_review`` with its new content, and
is not recalled until a person with ``review:approve`` approves it (held as on the write
path, :func:`mnemovault.store.review.hold`, with the rectifier as ``captured_by``: it is
in the review queue like any pending item, and the rectifier may not approve it itself
unless ``REVIEW_SELF_APPROVAL=true``). A memory that was pending stays pending (the
rectifier is its capturer from now on); a superseded version stays superseded (approving
it would make two live versions of one key). Unlike a new version on the write path, a
rectification cannot leave the approved text current until it is approved: that text is
the inaccurate one and is gone. A live keyed memory whose key already has a pending
version is not rectified under the gate (:class:`~mnemovault.errors.Conflict`: a key waits
on one pending version, and displacing someone's pending version is the reviewer's call):
decide the pending one first, then rectify (or rectify the pending one, which stays
pending). A rejected rectification is handled like any rejected item
(:mod:`mnemovault.governance.review`): a first version is forgotten, a later one marked
superseded with its parent (the version before it) made live again; the
pre-rectification text is never restored, it is gone. The ``RECTIFY``
audit row records the status (``status``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, NotFound, ValidationError
from mnemovault.governance import graph
from mnemovault.guard import capture as capture_guard
from mnemovault.guard import sanitise as injection
from mnemovault.ids import uuid7
from mnemovault.models import MAX_CONTENT_CHARS
from mnemovault.pii import service as pii
from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.recall import terms
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as ledger_store
from mnemovault.store import memories as memory_store
from mnemovault.store import review as review_store
from mnemovault.store import subjects as subject_store
from mnemovault.store import visibility as visibility_store
from mnemovault.subjects.models import Rectified
from mnemovault.validation import parse_id, text_rule


def _placeholders(text: str | None) -> list[str]:
    return [m.group(0) for m in PLACEHOLDER_RE.finditer(text or "")]


def _texts(row: dict[str, Any]) -> list[str | None]:
    """Every stored free-text field of a memory row (where placeholders can be)."""
    prov = row["provenance"] or {}
    tags = prov.get("tags") or []
    return [row["content"], row["scope"], row["subject_id"], row["key"],
            *(t for t in tags if isinstance(t, str)),
            *(v for k, v in prov.items() if k != "tags" and isinstance(v, str))]


def replace_in_place(rt: Runtime, conn: psycopg.Connection[Any], tenant: str,
                     locked: dict[str, Any], text: str, vector: Any, used: Sequence[str], *,
                     flags: list[str] | None = None, history: bool = False
                     ) -> tuple[dict[str, Any], list[str], uuid.UUID | None]:
    """Replace a locked memory's content by ``text`` (pseudonymised already: ``used`` the
    placeholders the detectors put in it) and its embedding by ``vector``, in place, in the
    caller's transaction (the subject's write lock and the row lock held): the content is
    sealed under the owner's content key (its subject's, or its scope's), the keyed terms
    follow (postings and statistics through the triggers), ``version`` + 1, the graph
    support is rebuilt from the new fields, and vault values only the old content used are
    crypto-shredded. The one in-place rewrite of a record: a rectification
    (:func:`rectify`) and the PII watch (:mod:`mnemovault.pii.watch`) both go through it.
    Status, lineage, key, scope and subject stay as they are. With ``history`` (a
    rectification of a current version) the stretch of valid time before now becomes a
    version of its own (:func:`_history`) and the memory's valid time restarts now.
    Returns ``(the new row (COLUMNS), the placeholders shredded, the history version's id
    or None)``.

    Raises:
        Conflict: a value in ``text`` was erased concurrently (the caller rolls back).
    """
    mid = locked["id"]
    old_nodes, old_edges = graph.supported_by(conn, [mid])
    # the other fields keep what they carried; the new content carries what the
    # detectors found in it (a placeholder typed into it is quoted: visibility)
    kept = visibility_store.carried_by(conn, tenant, mid)
    graph.delete_support(conn, [mid])
    key_id, sealed = pii.content_writer(rt, conn, tenant).content(
        locked["scope"], locked["subject_id"], mid, text)
    key = terms.tenant_key(rt.pii, conn, tenant)
    assert key is not None  # created on first use
    now = datetime.now(UTC)
    doc = terms.document(key, text)
    hid = _history(rt, conn, tenant, locked, text, vector, doc, flags, now) if history else None
    new = subject_store.replace_content(conn, tenant, mid, text, vector, now,
                                        key_id=key_id, sealed=sealed, flags=flags,
                                        terms=doc, restart=hid is not None)
    carried = {*used, *(p for t in _texts(new)[1:] for p in _placeholders(t) if p in kept)}
    graph.index(conn, tenant, [graph.mentions(i, _texts(new), carried=carried)
                               for i in (mid, hid) if i is not None])
    if rt.pii.erased_placeholders(conn, list(used)):
        raise Conflict("content: a personal value in it was erased concurrently; "
                       "retrying is safe", field="content")
    removed, _ = graph.delete_orphans(conn, old_nodes, old_edges)
    shredded: list[str] = []
    if rt.settings.pii_pseudonymize:
        shredded = rt.pii.shred(conn, [n for n in removed if PLACEHOLDER_RE.fullmatch(n)])
    return new, shredded, hid


def _history(rt: Runtime, conn: Any, tenant: str, row: dict[str, Any], text: str,
             vector: Any, doc: tuple[str, int], flags: list[str] | None,
             now: datetime) -> uuid.UUID:
    """The version that holds the rectified memory's valid time before the correction
    (module docstring, "valid time"): a new ``superseded`` row with the corrected text,
    ``[row's valid_from, now)``, the row's old version number, ``parent_id`` the memory
    (so forget and erase take it along), its provenance sealed again under its own id. Its
    id."""
    hid = uuid7()
    sealer = pii.content_writer(rt, conn, tenant)
    key_id, sealed = sealer.content(row["scope"], row["subject_id"], hid, text)
    _, key_sealed = sealer.memory_key(row["scope"], row["subject_id"], hid, row["key"])
    prov = dict(row["provenance"] or {})
    if flags is not None:
        prov["injection_flags"] = flags
    clear_prov, prov_sealed = sealer.provenance(row["scope"], row["subject_id"], hid, prov)
    memory_store.insert(conn, [(
        tenant, hid, row["scope"], row["subject_id"], row["type"],
        memory_store.stored_plaintext(text), row.get("key_hash"), vector, row["created_at"],
        now, Jsonb(clear_prov), row["id"], row["version"], *doc, key_id, sealed, key_sealed,
        prov_sealed, row["valid_from"] or row["created_at"], now)], status="superseded")
    return hid


def rectify(rt: Runtime, who: Principal, memory_id: uuid.UUID | str, content: str, *,
            trigger: str = "api", request_id: str | None = None) -> Rectified:
    """Replace memory ``memory_id``'s content with ``content`` (module docstring).

    Raises:
        ValidationError: a malformed id, blank or over-long content.
        Refused: the capture guard found a secret in ``content`` (nothing changed).
        Unavailable: a capture or sanitiser detector failed or timed out (fail closed).
        Forbidden: missing ``subject:erase``.
        NotFound: no such memory in this tenant (or outside the key's limits).
        Conflict: an erase of its subject is under way, or a value in the new content was
            erased concurrently (nothing was changed and retrying is safe); under the
            review gate, its key has another version pending review.
    """
    who.require("subject:erase")
    mid = parse_id(memory_id, "id")
    rule = text_rule(content, max_len=MAX_CONTENT_CHARS)
    if rule is None and not content.strip():
        rule = "must not be blank"
    if rule is not None:
        raise ValidationError(f"content: {rule}", field="content")
    capture_guard.check_capture(rt, path="rectify", fields={"content": content},
                                tenant=who.tenant, request_id=request_id)
    held = capture_guard.initial_status(rt) == "pending_review"
    with rt.db.transaction(who.tenant) as conn:
        row = subject_store.rows(conn, who.tenant, [mid])
        if not row or not visibility.view(rt, conn, who).within(row[0]):
            raise NotFound("id: no memory with this id", field="id")
        # the subject's write lock before the row lock: an erase holding the row fails us
        # at once instead of making us wait for it
        subject_store.lock_for_write(conn, who.tenant,
                                     [(row[0]["scope"], row[0]["subject_id"])])
        locked = subject_store.lock_memory(conn, who.tenant, mid)
        if locked is None:
            raise NotFound("id: no memory with this id", field="id")
        if (held and locked["status"] == "active" and locked["key"] is not None
                and review_store.key_versions(conn, who.tenant, locked["scope"],
                                              locked["key_hash"])[1] is not None):
            raise Conflict("id: its key has a version pending review; approve or reject "
                           "that one first (a key waits on one pending version), or "
                           "rectify the pending one", field="id")
        # imported or tool text stays labelled and sanitised (mnemovault.guard.sanitise)
        content, flags = injection.sanitise_rectified(
            content, locked["provenance"], trigger, injection.default_sanitiser(rt.settings))
        created: list[str] = []
        used: list[str] = []
        text = content
        if rt.settings.pii_pseudonymize:
            r = pii.pseudonymiser(rt, conn, who.tenant).rewrite(content)
            text, created, used = r.text, list(r.created), list(r.placeholders)
        vector = rt.embedder.embed([text])[0]
        new, shredded, history = replace_in_place(
            rt, conn, who.tenant, locked, text, vector, used, flags=flags,
            history=locked["status"] == "active")
        status = str(new["status"])
        if held and status in ("active", "pending_review"):  # the gate holds the new text
            review_store.hold(conn, who.tenant, [mid], captured_by=who.actor)
            status = "pending_review"
        seq = audit.append(
            conn, tenant=who.tenant, operation="RECTIFY", actor=who.actor, agent=who.agent,
            memory_ids=[str(mid)], trigger=trigger, request_id=request_id,
            details={"count": 1, "version": new["version"], "status": status,
                     **({"history": str(history)} if history is not None else {}),
                     "placeholders_created": sorted(set(created)), "shredded": shredded})
        ledger_store.insert(conn, tenant=who.tenant, audit_seq=seq, kind="rectify",
                            request_id=request_id, subject_fp=None, scope_fp=None,
                            memory_ids=[], placeholders=shredded, rectified=[mid])
    return Rectified(id=mid, version=new["version"], status=status, history=history,
                     valid_from=new["valid_from"],
                     placeholders=sorted(set(created)),
                     shredded=shredded, audit_seq=seq)
