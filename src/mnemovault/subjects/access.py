"""A subject's memories: the keyset listing and the JSON export (SPEC section 10; issue
10, item 3).

The listing is exactly the set an erase of the same subject and scope would remove
(:func:`mnemovault.governance.forget.resolve_target`: the subject's memories in the scope
in any status, pending review and archived and superseded included, their versions, and
what was derived from them), oldest id first, ``limit`` 1..100, ``cursor`` = the last id of
the previous page. Embeddings are never read. A page costs O(page), not O(subject): the
target's own ids come from the ``memories_scope_subject`` index (the first ``limit + 1``
after the cursor); they bound the page's id window (cursor, last of them], and the
memories outside the target that an erase reaches (versions, derived facts) are looked
for in that window only, by walking backwards from its memories to the target
(:func:`mnemovault.store.subjects.extras_in_window`: the window's rows outside the target
and their ancestry, never the whole target). Only a window holding more than
:data:`~mnemovault.store.subjects.WINDOW_CAP` memories outside the target (the last page
of a subject followed by much else, or a subject sparse among many others) falls back to
the walk from the whole target (:func:`mnemovault.governance.forget.extras`, one pass in
the server), filtered to the window. The subject and scope are translated to their
stored form without loading the tenant's known-entity index
(:class:`mnemovault.pii.service.Translator` with ``names``).

The export is everything about the subject in one document of the format
``mnemovault-subject-export/1``, described by the JSON Schema committed at
``docs/schemas/subject-export.schema.json``::

    {"format": "mnemovault-subject-export/1", "exported_at": "<UTC timestamp>",
     "tenant": "...", "scope": "...", "subject": "...", "subject_fingerprint": "...",
     "revealed": false, "audit_seq": 7,
     "memories": [{"id", "type", "status", "scope", "subject", "key", "content",
                   "pinned", "archived", "created_at", "updated_at", "last_accessed_at",
                   "access_count", "provenance", "parent_id", "version", "valid_from",
                   "valid_to", "derived_from", "reason"}, ...],
     "procedures": [{"id", "scope", "subject", "content", "status", "name", "intent",
                     "steps", "runs", "successes", ..., "provenance"}, ...],
     "runs": [{"id", "procedure_id", "scope", "subject", "ran_at", "duration_ms",
               "agent_verdict", ..., "provenance", "success", "judged"}, ...],
     "vault_entries": [{"placeholder", "kind", "created_at", "shredded_at", "value"?}, ...]}

``procedures`` are the subject's own procedures in the scope (also among ``memories``,
type ``procedure``) with their steps and counters; ``runs`` are every run of the subject in
the scope, on any procedure (also on other owners' procedures: the erase removes those and
adjusts their counters; issue 12 item 7). Runs of *other* subjects on the subject's own
procedures are theirs, not the subject's, and are not exported (the erase removes them
with the procedure all the same). The keyset listing stays a listing of memories (a
procedure is a memory, so the subject's procedures are in it); the runs are in the export.

A key limited to a subject (or scope) never sees a row outside its limits here either
(the rule of ``get``): the versions and derived memories an erase would reach outside the
key's limits are left out of its listing and export, and its erase of such a subject is
refused (:func:`mnemovault.subjects.erase.erase`), so what the key lists is still exactly
what its erase would remove.

Personal values stay placeholders unless the caller holds ``pii:reveal`` and asks
(``reveal``): then they are resolved in ``scope``, ``subject``, ``key``, ``content`` and
each vault entry's ``value``, and a ``REVEAL`` audit row names the placeholders. Shredded
values render ``[erased]`` for everyone. Every export is audited (``SUBJECT_EXPORT``, the
subject by fingerprint).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.audit.chain import format_ts
from mnemovault.auth import Principal
from mnemovault.errors import ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.models import Memory, Page
from mnemovault.pii import service as pii
from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.pii.vault import render as render_text
from mnemovault.procedures import subjects as procedure_subjects
from mnemovault.runtime import Runtime
from mnemovault.store import subjects as subject_store
from mnemovault.subjects.erase import fingerprint, target_of

FORMAT = "mnemovault-subject-export/1"
SCHEMA_PATH = "docs/schemas/subject-export.schema.json"
PAGE = 1000
"""Rows per statement when the export gathers a subject's procedures and runs."""


def _check(who: Principal, subject: str, scope: str) -> tuple[str, str]:
    subject = checked.name(subject, "subject")
    scope = checked.name(scope, "scope")
    who.check_scope(scope)
    who.check_subject(subject)
    return subject, scope


def list_memories(rt: Runtime, who: Principal, subject: str, *, scope: str, limit: int = 50,
                  cursor: uuid.UUID | str | None = None) -> Page:
    """One page of ``subject``'s memories in ``scope`` (module docstring), rendered for
    the caller (shredded values ``[erased]``). Needs ``memory:read``.

    Raises:
        ValidationError: blank subject or scope, ``limit`` outside 1..100, a malformed
            cursor (each names its field).
        Forbidden: outside the key's scope or subject.
    """
    who.require("memory:read")
    subject, scope = _check(who, subject, scope)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    after = checked.parse_id(cursor, "cursor") if cursor is not None else None
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant, names=True)
        keys = rt.pii.tenant_keys(conn, who.tenant)
        target = target_of(scope, subject, tr, keys)
        own = subject_store.target_page(conn, who.tenant, target.scope, target.subject, after,
                                        limit + 1)
        # the page lies in (after, upper]: the first limit + 1 own ids already fill it
        upper = own[limit] if len(own) > limit else None
        extra: list[uuid.UUID] | None = []  # no own memory at all: nothing is reached
        if own or after is not None:
            extra = subject_store.extras_in_window(conn, who.tenant, target.scope,
                                                   target.subject, after, upper)
        if extra is None:  # a crowded window: walk from the whole target instead
            versions, derived = forget_mod.extras(conn, target)
            extra = [i for i in sorted({*versions, *derived})
                     if (after is None or i > after) and (upper is None or i <= upper)]
        ids = sorted({*own, *visible(rt, conn, who, extra, tr)})[: limit + 1]
        rows = subject_store.rows(conn, who.tenant, ids[:limit])
        items = visibility.view(rt, conn, who, "subject", tr=tr).render(
            [Memory.from_row(r) for r in rows])
    return Page(items=items, next_cursor=items[-1].id if len(ids) > limit else None)


def export(rt: Runtime, who: Principal, subject: str, *, scope: str, reveal: bool = False,
           request_id: str | None = None) -> dict[str, Any]:
    """Everything about ``subject`` in ``scope`` as one ``mnemovault-subject-export/1``
    document (module docstring). Needs ``subject:erase`` (and ``pii:reveal`` with
    ``reveal``).

    Raises:
        ValidationError: blank subject or scope.
        Forbidden: a missing permission (named), or outside the key's limits.
    """
    who.require("subject:erase")
    if reveal:
        who.require("pii:reveal")
    subject, scope = _check(who, subject, scope)
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant, names=True)
        keys = rt.pii.tenant_keys(conn, who.tenant)
        target = target_of(scope, subject, tr, keys)
        res = forget_mod.resolve_target(conn, target)
        reasons = res.reasons()
        inside = _within(rt, conn, who, tr)
        rows = [r for r in subject_store.rows(conn, who.tenant, res.all) if inside(r)]
        ids = [r["id"] for r in rows]
        sources = subject_store.lineage_sources(conn, who.tenant, ids)
        procs, runs = _procedural(conn, target)
        found = {m.group(0) for r in rows
                 for f in ("content", "scope", "subject_id", "key")
                 for m in PLACEHOLDER_RE.finditer(r[f] or "")}
        found |= {m.group(0) for t in (target.scope, target.subject, *_strings([procs, runs]))
                  for m in PLACEHOLDER_RE.finditer(t or "")}
        v = visibility.view(rt, conn, who, "subject", tr=tr)
        entries = v.entry_rows(subject_store.vault_entries(conn, who.tenant,
                                                           sorted(v.entries_shown(found))))
        # one REVEAL row for the whole document (memories, procedures, runs, entries)
        outputs = v.outputs(found, reveal=reveal, request_id=request_id,
                            memory_ids=[str(i) for i in ids])
        memories = visibility.apply([Memory.from_row(r) for r in rows], outputs)
        values = outputs if reveal else {}
        erased = {e["placeholder"] for e in entries if e["shredded_at"] is not None}
        seq = audit.append(
            conn, tenant=who.tenant, operation="SUBJECT_EXPORT", actor=who.actor,
            agent=who.agent, memory_ids=[str(i) for i in ids[:10]], request_id=request_id,
            details={"count": len(rows), "procedures": len(procs), "runs": len(runs),
                     "subject_fp": target.subject_fp,
                     "scope_fp": fingerprint(keys, target.scope, "scope"),
                     "revealed": reveal, "vault_entries": len(entries)})

    def shown(text: str | None) -> str | None:
        return None if text is None else render_text(text, values, erased)

    def shown_tree(value: Any) -> Any:
        if isinstance(value, str):
            return shown(value)
        if isinstance(value, list):
            return [shown_tree(v) for v in value]
        if isinstance(value, dict):
            return {k: shown_tree(v) for k, v in value.items()}
        return value

    return {
        "format": FORMAT, "exported_at": format_ts(datetime.now(UTC)), "tenant": who.tenant,
        "scope": shown(target.scope), "subject": shown(target.subject),
        "subject_fingerprint": target.subject_fp, "revealed": reveal, "audit_seq": seq,
        "memories": [{**m.model_dump(mode="json"),
                      "derived_from": [str(s) for s in sources.get(m.id, [])],
                      "reason": reasons[m.id]} for m in memories],
        "procedures": shown_tree(procs),
        "runs": shown_tree(runs),
        "vault_entries": [{"placeholder": e["placeholder"], "kind": e["kind"],
                           "created_at": format_ts(e["created_at"]),
                           "shredded_at": format_ts(e["shredded_at"]) if e["shredded_at"]
                           else None,
                           **({"value": values.get(e["placeholder"])} if reveal else {})}
                          for e in entries],
    }


def visible(rt: Runtime, conn: Any, who: Principal, ids: list[uuid.UUID],
            tr: pii.Translator | None = None) -> list[uuid.UUID]:
    """Those of ``ids`` within the key's limits (:meth:`mnemovault.visibility.View.
    within`), in the given order; all of them for an unlimited key."""
    if not who.limited or not ids:
        return ids
    inside = _within(rt, conn, who, tr)
    keep = {r["id"] for r in subject_store.rows(conn, who.tenant, ids) if inside(r)}
    return [i for i in ids if i in keep]


def _within(rt: Runtime, conn: Any, who: Principal,
            tr: pii.Translator | None) -> Callable[[dict[str, Any]], bool]:
    """Whether a stored row lies within the key's limits (:meth:`mnemovault.visibility.
    View.within`), the limits translated once, not once a row."""
    if not who.limited:
        return lambda row: True
    return visibility.view(rt, conn, who, "subject", tr=tr).within


def _procedural(conn: Any, target: forget_mod.Target
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The subject's procedures and runs in the target's scope (module docstring), oldest
    id first, as JSON-ready dicts (stored values: placeholders)."""
    assert target.subject is not None
    out: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for fn, into in ((procedure_subjects.subject_procedures, out[0]),
                     (procedure_subjects.subject_runs, out[1])):
        after: uuid.UUID | None = None
        while True:
            page = fn(conn, scope=target.scope, subject=target.subject, after=after,
                      limit=PAGE)
            into.extend(page)
            if len(page) < PAGE:
                break
            after = uuid.UUID(page[-1]["id"])
    return out


def _strings(value: Any) -> list[str]:
    """Every string inside ``value`` (lists and dict values, recursively)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []
