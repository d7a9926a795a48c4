"""The write path (SPEC section 2): every write (remember, imports, chat exchanges, later
tool writes) goes through :func:`remember_many`, whose steps are named here, in order:

1. (chat only) in-band command check -> :func:`mnemovault.governance.commands.handle`,
   called by the chat capability before it writes
2. capture guard           -> :func:`guard`        (:mod:`mnemovault.guard.capture`;
   the review gate's hold is in step 6)
3. injection sanitiser     -> :func:`sanitise`     (imported and tool-supplied items only:
   :mod:`mnemovault.guard.sanitise`)
4. pseudonymisation        -> :func:`pseudonymise` (every free-text field)
5. embedding               -> :func:`embed`        (the pseudonymised text only)
6. insert                  -> :func:`store`        (memories, versions, lineage, graph,
   vault entries and the audit row, in the transaction of step 4)

If any step fails nothing is stored: no memory row, no vault entry.

The embedding is computed before the transaction (issue 29): :func:`embed_ahead` predicts,
in a short read-only transaction, the text each content will be stored as
(:meth:`~mnemovault.pii.pseudonymise.Pseudonymiser.predict_many`: placeholders are
deterministic, so a value the vault holds, or a new one, gets the placeholder it will get)
and embeds those predictions with no transaction open and no lock held. Step 5 then runs
in the transaction and compares what the embedder reads of each stored content (its
*view*) with what it read of the prediction; a content whose view differs (a concurrent
write made a value known meanwhile, a placeholder counter was taken) is embedded again
there, so every stored vector is of the stored text. The write transaction thus holds the
subject's lock only for the pseudonymisation writes, the inserts and the audit row.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from pydantic import ValidationError as PydanticValidationError

from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, ValidationError
from mnemovault.governance import graph, lineage
from mnemovault.guard import capture
from mnemovault.guard import sanitise as injection
from mnemovault.ids import uuid7
from mnemovault.memories import valid_time
from mnemovault.models import MemoryInput, Provenance, Receipt
from mnemovault.pii import service as pii
from mnemovault.recall import terms
from mnemovault.runtime import Runtime
from mnemovault.store import memories as store_memories
from mnemovault.store import review as store_review
from mnemovault.store import subjects as store_subjects
from mnemovault.store import tenants as store_tenants
from mnemovault.store.db import caused_by
from mnemovault.validation import validation_error_from_pydantic

STEPS = ("command_check", "guard", "sanitise", "pseudonymise", "embed", "store")
"""The write path's steps, in order (the module docstring says where each one lives)."""

Conn = psycopg.Connection[Any]


@dataclass
class Prepared:
    """One item after step 4: its fields as they will be stored."""

    item: MemoryInput
    content: str
    placeholders: list[str]  # vault entries this write created
    used: list[str] = field(default_factory=list)  # every placeholder the detectors produced
    ahead: Ahead | None = None  # the embedding computed before the transaction


@dataclass(frozen=True)
class Ahead:
    """One item's embedding computed before the write transaction (:func:`embed_ahead`):
    the text the embedder read (the view of the predicted stored content) and its vector."""

    view: str
    vector: Any


def parse_one(content: str, *, scope: str, subject: str | None, type: str, key: str | None,
              provenance: dict[str, Any] | None, created_at: datetime | None,
              entities: builtins.list[dict[str, str]] | None,
              derived_from: Sequence[uuid.UUID | str] | None,
              valid_from: datetime | str | None = None) -> MemoryInput:
    """The library arguments of one remember as a checked :class:`MemoryInput`.

    Raises:
        ValidationError: names the field.
    """
    item = {"content": content, "scope": scope, "subject": subject, "type": type,
            "key": key, "provenance": provenance or {}, "created_at": created_at,
            "entities": entities or [], "derived_from": list(derived_from or []),
            "valid_from": valid_from}
    try:
        return MemoryInput.model_validate(item)
    except PydanticValidationError as exc:
        raise validation_error_from_pydantic(exc) from None


def as_inputs(items: Iterable[MemoryInput | dict[str, Any]]) -> list[MemoryInput]:
    """Items as checked :class:`MemoryInput` (a bad one names ``items.<i>.<field>``)."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, MemoryInput):
            out.append(item)
            continue
        try:
            out.append(MemoryInput.model_validate(item))
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc, prefix=f"items.{i}") from None
    return out


def remember(rt: Runtime, who: Principal, item: MemoryInput, *,
             request_id: str | None = None) -> Receipt:
    """Remember one memory (:func:`remember_many` of one; errors name the bare field)."""
    try:
        return remember_many(rt, who, [item], request_id=request_id)[0]
    except ValidationError as exc:
        if exc.field and exc.field.startswith("items.0."):
            name = exc.field.removeprefix("items.0.")
            raise ValidationError(f"{name}: {exc.message.split(': ', 1)[-1]}",
                                  field=name) from None
        raise


def remember_many(rt: Runtime, who: Principal,
                  items: Sequence[MemoryInput | dict[str, Any]], *,
                  request_id: str | None = None, trigger: str = "remember",
                  after: Callable[[Conn, list[Receipt]], None] | None = None,
                  ) -> list[Receipt]:
    """Remember a batch: one embedding call before the write transaction (a second one in
    it, for the items whose stored text differs from the prediction: module docstring), a
    short read-only transaction for that prediction, one write transaction, one audit row.
    ``after``, when given, is called in that transaction once the rows and the audit row
    are written, with the connection and the receipts (a capability's own bookkeeping of
    what it wrote, e.g. the librarian's rank: it commits or rolls back with them).

    Memories with a ``key`` that is already live in their scope become a new version
    (``version`` + 1, ``parent_id`` = old id), placed on the key's timeline by its event
    time (:mod:`mnemovault.memories.valid_time`): the old one is marked ``superseded``
    with ``valid_to`` = the new one's ``valid_from``, or, for a statement dated before the
    current version, the new one is stored as a historical version.

    Returns:
        One :class:`Receipt` per item, in input order.
    Raises:
        ValidationError: an item is invalid (names ``items.<i>.<field>``); nothing stored.
        Forbidden: the principal lacks ``memory:write`` or is limited to another scope.
        Conflict: a concurrent write or forget got in the way; retrying is safe.
    """
    who.require("memory:write")
    inputs = as_inputs(items)
    if not inputs:
        return []
    for n, item in enumerate(inputs):
        who.check_scope(item.scope)
        who.check_subject(item.subject)
        if who.subject is not None and item.subject is None:
            inputs[n] = item.model_copy(update={"subject": who.subject})
    now = datetime.now(UTC)
    for n, item in enumerate(inputs):  # before anything runs: a bad event time names it
        try:
            valid_time.event_time(item.valid_from, item.created_at, now)
        except ValidationError:
            raise ValidationError(f"items.{n}.valid_from: must not be later than the time "
                                  "of the write", field=f"items.{n}.valid_from") from None
    guard(rt, inputs, who, trigger, request_id)
    inputs = sanitise(inputs, trigger, rt.settings)
    ahead = embed_ahead(rt, inputs, who)  # no transaction open, no lock held
    try:
        with rt.db.transaction(who.tenant) as conn:
            if who.key_id is None:
                store_tenants.ensure(conn, who.tenant)
            prepared = pseudonymise(rt, conn, inputs, who)
            for p, a in zip(prepared, ahead, strict=True):
                p.ahead = a
            # an erase of one of these subjects (or scopes) under way: Conflict, either side
            store_subjects.lock_for_write(conn, who.tenant,
                                          [(p.item.scope, p.item.subject) for p in prepared])
            vectors = embed(rt, prepared)
            receipts = store(rt, conn, prepared, vectors, who, request_id, trigger)
            if after is not None:
                after(conn, receipts)
            return receipts
    except Conflict as exc:
        if caused_by(exc, psycopg.errors.UniqueViolation):
            raise Conflict(
                "key: a concurrent write created a version of this key; retrying is safe",
                field="key") from None
        if caused_by(exc, psycopg.errors.ForeignKeyViolation):
            raise Conflict("derived_from: a memory this write refers to was forgotten "
                           "concurrently; retrying is safe", field="derived_from") from None
        raise


# -- the steps -----------------------------------------------------------------------------
def guard(rt: Runtime, items: list[MemoryInput], who: Principal, trigger: str = "remember",
          request_id: str | None = None) -> None:
    """Step 2, capture guard (SPEC section 8), on the original text (before the sanitiser
    and the pseudonymiser): every free-text field of every item (content, key, scope,
    subject, tags, provenance strings) is scanned by :func:`mnemovault.guard.capture.
    check_items`; caller-named ``entities`` are not (they go to the vault, encrypted).

    Raises:
        Refused: a finding at or above ``BLOCK_AT_SEVERITY`` (names the detector, kind,
            severity and field, never the text); nothing stored.
        Unavailable: a detector failed or timed out (fail closed); nothing stored.
    """
    path = ("mcp" if any(i.provenance.source == "mcp" for i in items) else
            "batch" if trigger == "remember" and len(items) > 1 else trigger)
    capture.check_items(rt, path=path, items=[_guarded_fields(i) for i in items],
                        tenant=who.tenant, request_id=request_id)


def _guarded_fields(item: MemoryInput) -> dict[str, str | None]:
    prov = item.provenance.model_dump(exclude_none=True)
    return {"content": item.content, "key": item.key, "scope": item.scope,
            "subject": item.subject, "tags": "\n".join(item.provenance.tags),
            **{f"provenance.{k}": v for k, v in prov.items() if isinstance(v, str)}}


def sanitise(items: list[MemoryInput], trigger: str = "remember",
             settings: Any = None) -> list[MemoryInput]:
    """Step 3, injection sanitiser (SPEC section 7), before pseudonymisation: items written
    with ``trigger`` import, tool or mcp, or whose ``provenance.source`` marks them as tool
    output, have each potential prompt injection (found by the detectors
    ``MNEMOVAULT_INJECTION_DETECTORS`` of ``settings``: the learned classifier and the phrase
    rules by default) replaced by
    ``[REDACTED_POTENTIAL_PROMPT_INJECTION]`` and the families found in
    ``provenance["injection_flags"]``; the caller's own words (remember, chat) are stored as
    written. The rule, the label and the detector: :mod:`mnemovault.guard.sanitise`.

    Raises:
        ValidationError: a redacted item no longer fits its limits (names the item).
    """
    return injection.sanitise_items(items, trigger, injection.default_sanitiser(settings))


def pseudonymise(rt: Runtime, conn: Conn, items: list[MemoryInput],
                 who: Principal) -> list[Prepared]:
    """Step 4 (SPEC section 3): every free-text field (content, scope, subject, key, tags,
    provenance values) is rewritten with placeholders; caller-named entities go into the
    vault first, so they are recognised in this batch too. A key limited to a scope or
    subject recognises only the known values used within its limits (and those it names),
    and its receipts list as created every placeholder no record within its limits used
    before (:mod:`mnemovault.visibility`, "known values for limited keys"). Runs in the
    write transaction, so new vault entries commit or roll back with the memories. The
    whole batch is one
    :meth:`~mnemovault.pii.pseudonymise.Pseudonymiser.rewrite_many` (one lookup and one
    insert statement for all its values, not one per value), with the outcome of
    registering the entities and then rewriting each field of each item in turn."""
    if not rt.settings.pii_pseudonymize:
        return [Prepared(item=i, content=i.content, placeholders=[]) for i in items]
    view = visibility.view(rt, conn, who)
    known = (view.known_index(rt.pii.tenant_keys(conn, who.tenant).fingerprint_key)
             if who.limited else None)
    ps = pii.pseudonymiser(rt, conn, who.tenant, known=known)
    # the caller-named entities (each (kind, value) once, by the first item naming it), then
    # every free-text field of every item in order: one rewrite_many for the whole batch
    entities: dict[tuple[str, str], int] = {}  # (kind, value) -> the item naming it first
    for n, item in enumerate(items):
        for e in item.entities:
            entities.setdefault((e.kind, e.value), n)
    texts: list[str] = []
    layouts = []
    for item in items:
        prov = item.provenance.model_dump(exclude_none=True)
        keys = [k for k, v in prov.items() if isinstance(v, str)]
        fields = [*(prov[k] for k in keys), *item.provenance.tags, item.scope, item.subject,
                  item.key, item.content]
        slots = []
        for value in fields:
            slots.append(None if value is None else len(texts))
            if value is not None:
                texts.append(value)
        layouts.append((prov, keys, slots))
    registered, rewritten_texts = ps.rewrite_many(list(entities), texts)
    created: list[list[str]] = [[] for _ in items]
    for n, (placeholder, was_created) in zip(entities.values(), registered, strict=True):
        if was_created:
            created[n].append(placeholder)
    out = []
    for item, new, (prov, keys, slots) in zip(items, created, layouts, strict=True):
        used: list[str] = []
        values: list[str | None] = []
        for slot in slots:
            if slot is None:
                values.append(None)
                continue
            r = rewritten_texts[slot]
            new.extend(p for p in r.created if p not in new)
            used.extend(r.placeholders)
            values.append(r.text)
        ntags = len(item.provenance.tags)
        prov.update(zip(keys, values[: len(keys)], strict=True))
        prov["tags"] = values[len(keys): len(keys) + ntags]
        scope, subject, key, content = values[len(keys) + ntags:]
        rewritten = item.model_copy(update={
            "scope": scope, "subject": subject, "key": key,
            "provenance": Provenance.model_validate(prov), "entities": []})
        out.append(Prepared(item=rewritten, content=content or "", placeholders=new, used=used))
    if who.limited:  # the receipt never tells a value outside the limits existed
        before = view.used_within(p for o in out for p in o.used)
        for o in out:
            o.placeholders = list(dict.fromkeys(
                [*o.placeholders, *(p for p in o.used if p not in before)]))
    return out


def embed(rt: Runtime, prepared: list[Prepared]) -> Any:
    """Step 5, in the write transaction: the embeddings of the pseudonymised contents, in
    order. An item's :attr:`Prepared.ahead` vector is used when the embedder reads the same
    text of the stored content as it read of the prediction (:func:`embed_ahead`); the
    others (all of them without ``ahead``) are embedded now, in one call."""
    vectors: list[Any] = [None] * len(prepared)
    redo = []
    for n, p in enumerate(prepared):
        if p.ahead is not None and p.ahead.view == _view(rt, p.content):
            vectors[n] = p.ahead.vector
        else:
            redo.append(n)
    if redo:
        fresh = rt.embedder.embed([prepared[n].content for n in redo])
        for n, vec in zip(redo, fresh, strict=True):
            vectors[n] = vec
    return vectors


def embed_ahead(rt: Runtime, items: list[MemoryInput],
                who: Principal) -> list[Ahead | None]:
    """Before the write transaction: each item's content as it will most likely be stored,
    predicted in a short read-only transaction (:func:`predict`), and its embedding, made
    with no transaction open (one embedder call for the batch); None for an item with no
    usable prediction. Step 5 (:func:`embed`) checks each prediction against the stored
    text."""
    if rt.settings.pii_pseudonymize:
        with rt.db.transaction(who.tenant) as conn:
            contents = predict(rt, conn, items, who)
    else:
        contents = [i.content for i in items]
    known = [c for c in contents if c is not None]
    vectors: Iterator[Any] = iter(rt.embedder.embed(known) if known else [])
    return [None if c is None else Ahead(view=_view(rt, c), vector=next(vectors))
            for c in contents]


def predict(rt: Runtime, conn: Conn, items: list[MemoryInput],
            who: Principal) -> list[str | None]:
    """The pseudonymised contents :func:`pseudonymise` would give now, writing nothing:
    the same entities and free-text fields, in the same order, through
    :meth:`~mnemovault.pii.pseudonymise.Pseudonymiser.predict_many` on a read-only
    pseudonymiser. A tenant whose vault was never used has no placeholder key yet, so a
    content with a personal value cannot be predicted unless the embedder reads
    placeholders as their kind only (the ``kinds`` view): None for such a content."""
    ps = pii.pseudonymiser(rt, conn, who.tenant, read_only=True)
    exact = ps.keys is not None or _view(rt, "{email:p_0000000000}") == _view(
        rt, "{email:p_1111111111}")
    entities: dict[tuple[str, str], None] = {}
    for item in items:
        for e in item.entities:
            entities.setdefault((e.kind, e.value), None)
    texts: list[str] = []
    at: list[int] = []  # the index of each item's content in texts
    for item in items:
        prov = item.provenance.model_dump(exclude_none=True)
        fields = [*(v for v in prov.values() if isinstance(v, str)), *item.provenance.tags,
                  item.scope, item.subject, item.key]
        texts.extend(v for v in fields if v is not None)
        at.append(len(texts))
        texts.append(item.content)
    out = ps.predict_many(list(entities), texts)
    return [out[n] if exact or out[n] == item.content else None
            for n, item in zip(at, items, strict=True)]


def _view(rt: Runtime, text: str) -> str:
    """What the embedder reads of ``text`` (its view, :class:`mnemovault.embed.view.
    ViewEmbedder`); the text itself for an embedder without one."""
    view_of = getattr(rt.embedder, "view_of", None)
    return str(view_of(text)) if callable(view_of) else text


def store(rt: Runtime, conn: Conn, prepared: list[Prepared], vectors: Any, who: Principal,
          request_id: str | None, trigger: str) -> list[Receipt]:
    """Step 6: the memories (new versions of their keys: :func:`_next_version`), their
    lineage and graph entries, and the ``REMEMBER`` audit row, in the caller's transaction.

    Under the review gate (``REQUIRE_REVIEW=true``) every item is held as
    ``pending_review`` with ``provenance.captured_by`` = the writing actor
    (:func:`mnemovault.store.review.hold`), and a keyed item does not supersede its key's
    ``active`` version: that stays recalled until the new one is approved
    (:mod:`mnemovault.governance.review`). A receipt's ``superseded`` is the row this write
    retired now: without the gate the key's previous live version; under it only a pending
    version it displaced (None when the key's approved version simply stays)."""
    lineage.check_sources(conn, [(p.item.scope, p.item.derived_from) for p in prepared])
    now = datetime.now(UTC)
    held = capture.initial_status(rt) == "pending_review"  # the review gate (REQUIRE_REVIEW)
    receipts: list[Receipt] = []
    rows = []
    displaced = 0
    sealer = pii.content_writer(rt, conn, who.tenant)
    term_key = terms.tenant_key(rt.pii, conn, who.tenant)
    assert term_key is not None  # created on first use
    historical = 0
    for p, vec in zip(prepared, vectors, strict=True):
        mid = uuid7()
        key_id, sealed = sealer.content(p.item.scope, p.item.subject, mid, p.content)
        stored_key, key_sealed = sealer.memory_key(p.item.scope, p.item.subject, mid,
                                                   p.item.key)
        valid_from = valid_time.event_time(p.item.valid_from, p.item.created_at, now)
        parent, version, superseded = None, 1, None
        placement = valid_time.Placement(current=True, valid_to=None)
        if stored_key is not None:
            parent, version, superseded, placement = _next_version(
                conn, who.tenant, p.item.scope, stored_key, now, held, valid_from)
            displaced += held and superseded is not None
        tsv, tsv_length = terms.document(term_key, p.content)
        clear_prov, prov_sealed = sealer.provenance(
            p.item.scope, p.item.subject, mid, p.item.provenance.model_dump(exclude_none=True))
        row = (who.tenant, mid, p.item.scope, p.item.subject, p.item.type,
               store_memories.stored_plaintext(p.content), stored_key, vec,
               p.item.created_at or now, now, Jsonb(clear_prov), parent, version,
               tsv, tsv_length, key_id, sealed, key_sealed, prov_sealed, valid_from,
               placement.valid_to)
        if p.item.key is not None:  # before the next item may supersede it
            if held:
                store_review.insert_held(conn, [row])
            else:
                store_memories.insert(conn, [row], status="active" if placement.current
                                      else "superseded")
        else:
            rows.append(row)
        historical += not placement.current
        receipts.append(Receipt(id=mid, scope=p.item.scope, version=version,
                                superseded=superseded, placeholders=p.placeholders,
                                audit_seq=0, valid_from=valid_from,
                                valid_to=placement.valid_to,
                                status="active" if placement.current else "superseded"))
    store_memories.insert_many(conn, rows)  # one statement: its triggers run once
    if held:
        store_review.hold(conn, who.tenant, [r.id for r in receipts], captured_by=who.actor)
    _index(rt, conn, who.tenant, prepared, receipts)
    seq = audit.append(
        conn, tenant=who.tenant, operation="REMEMBER", actor=who.actor, agent=who.agent,
        memory_ids=[str(r.id) for r in receipts], trigger=trigger, request_id=request_id,
        details={"count": len(receipts),
                 "superseded": sum(1 for r in receipts if r.superseded),
                 "placeholders_created": sorted({p for r in receipts for p in r.placeholders}),
                 **({"historical": historical} if historical else {}),
                 **({"status": "pending_review", "displaced": displaced} if held else {})},
    )
    for r in receipts:
        r.audit_seq = seq
        if held:
            r.status = "pending_review"
    return receipts


def _next_version(conn: Conn, tenant: str, scope: str, key: str, now: datetime,
                  held: bool, valid_from: datetime
                  ) -> tuple[uuid.UUID | None, int, uuid.UUID | None, valid_time.Placement]:
    """Where a new version of ``key`` in ``scope`` goes: (``parent_id``, ``version``, the
    row retired now, its place on the key's timeline). ``version`` is one more than the
    key's highest (rejected and displaced versions count, so numbers are never reused);
    the parent is the key's ``active`` version, else its pending one. A pending version of
    the key is displaced (``superseded``, ``provenance.review = "displaced"``, an empty
    valid interval): the key waits on one proposal, the newest. Without the gate
    (``held`` False) the new version is placed on the key's timeline by its event time
    ``valid_from`` (:func:`mnemovault.memories.valid_time.place`: the active version is
    superseded, or the new one is historical); under it the active version stays and the
    new one is placed when approved."""
    active, pending, top = store_review.key_versions(conn, tenant, scope, key)
    parent = active or pending
    retired = None
    if pending is not None:
        store_review.displace(conn, tenant, pending["id"], now)
        retired = pending["id"]
    placement = valid_time.Placement(current=True, valid_to=None)
    if not held:
        placement = valid_time.place(conn, tenant, scope, key, valid_from, now)
        if placement.retired is not None:
            retired = placement.retired
    return (parent["id"] if parent else None), top + 1, retired, placement


def _index(rt: Runtime, conn: Conn, tenant: str, prepared: list[Prepared],
           receipts: list[Receipt]) -> None:
    """Lineage rows and entity-graph entries of freshly stored memories (same
    transaction): every placeholder of every stored free-text field is a node."""
    pairs = [(r.id, s) for p, r in zip(prepared, receipts, strict=True)
             for s in dict.fromkeys(p.item.derived_from)]
    lineage.record(conn, tenant, pairs)
    plain = not rt.settings.pii_pseudonymize
    graph.index(conn, tenant, [
        graph.mentions(r.id, _stored_texts(p),
                       [(e.kind, e.value) for e in p.item.entities] if plain else [],
                       carried=p.used)
        for p, r in zip(prepared, receipts, strict=True)])
    # The nodes are locked now, so a forget that could shred one of these values has
    # either committed (seen here) or will see this write's support and keep it.
    if rt.pii.erased_placeholders(conn, {u for p in prepared for u in p.used}):
        raise Conflict("content: a personal value in it was erased concurrently; "
                       "retrying is safe", field="content")


def _stored_texts(p: Prepared) -> list[str | None]:
    """Every free-text field of a memory as stored (where placeholders can be)."""
    prov = p.item.provenance.model_dump(exclude_none=True)
    return [p.content, p.item.scope, p.item.subject, p.item.key, *p.item.provenance.tags,
            *(v for k, v in prov.items() if k != "tags" and isinstance(v, str))]
