"""The librarian's run over one tenant (issue 23): lock, plan, write, fade, audit.

1. **One run per tenant at a time**: a session advisory lock on the owner's connection
   (:func:`mnemovault.store.librarian.try_lock`, keyed by the tenant); a second run that
   finds it held does nothing and says so (``locked``). The lock goes with the connection,
   also when the process dies.
2. **Plan**, scope by scope (``scope`` alone when given): the live episodes are read in a
   short transaction (stored text, placeholders only), then grouped outside any
   transaction: near-duplicates (:mod:`.merge`) and topical groups of a subject
   (:mod:`.distil`, with the chat model when one is configured).
3. **Write**: each planned fact whose set of sources already has a fact is skipped (its
   ``provenance.source_id`` is a digest of kind + sources), so a rerun is idempotent and a
   run that stopped half-way resumes: what it wrote is kept, the rest is written by the
   next one. The others go through the write path (:func:`mnemovault.memories.write.
   remember_many`, trigger ``librarian``) in batches of :data:`BATCH`: guard,
   pseudonymisation, sealing, lineage to every source (``derived_from``), one ``REMEMBER``
   audit row per batch, and the fact's rank in the same transaction. A fact's key is its
   kind and oldest source, so a group that grew supersedes its older fact (key
   versioning). ``created_at`` is its newest source's time and ``provenance`` carries
   ``span_from`` / ``span_to`` (ISO dates of the oldest and newest source).
4. **Fade** (:mod:`.fade`) the facts nothing recalled or woke for a while.
5. One ``LIBRARIAN`` audit row with the counts (no text, ids of the first ten facts).

A dry run plans and reports, and writes nothing (no fact, no rank, no audit row).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import BaseModel

from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import (
    Conflict,
    ValidationError,
    tenant_job_failure,
)
from mnemovault.librarian import attributes, distil, fade, merge
from mnemovault.librarian.common import Draft, Episode, unit
from mnemovault.llm.base import ChatProvider
from mnemovault.memories import write
from mnemovault.models import Receipt
from mnemovault.pii import service as pii
from mnemovault.runtime import Runtime
from mnemovault.store import librarian as store
from mnemovault.store import tenants as tenant_store
from mnemovault.store.db import owner_connection

log = logging.getLogger(__name__)

BATCH = 64  # facts per write transaction

Progress = Callable[[int, int], None]  # (scopes done, scopes in all)


class LibrarianResult(BaseModel):
    """One librarian run over one tenant: counts, and the ids of the facts written."""

    tenant: str
    dry_run: bool
    locked: bool = False
    """Another run of this tenant held the lock: this one did nothing."""
    scopes: int = 0
    episodes: int = 0
    planned: int = 0
    """Facts planned (merged + distilled + attributes), written or not."""
    merged: int = 0
    distilled: int = 0
    attributes: int = 0
    """Attribute facts planned (:mod:`mnemovault.librarian.attributes`)."""
    existing: int = 0
    """Planned facts that were already there (from an earlier run): not written again."""
    written: list[uuid.UUID] = []
    superseded: int = 0
    failed: int = 0
    """Planned facts not written (a source forgotten meanwhile): the next run retries."""
    model: str | None = None
    """The chat model's provider name when it distilled, else None (extractive)."""
    model_fallbacks: int = 0
    faded: int = 0
    restored: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = {}
    """Seconds spent reading, planning (grouping, texts, the model) and writing."""
    audit_seq: int | None = None
    error: dict[str, Any] | None = None
    """Set when this tenant's run failed (``code``, ``message``); the run-all path only."""


def _model(rt: Runtime) -> ChatProvider | None:
    """The chat model the distillation may use: the configured one unless it is the
    offline responder (which is no model) or ``librarian_use_model`` is off."""
    llm = getattr(rt, "llm", None)
    if not rt.settings.librarian_use_model or llm is None:
        return None
    return None if getattr(llm, "name", "offline") == "offline" else llm


def plan(rt: Runtime, episodes: list[Episode]) -> list[Draft]:
    """The facts of one scope's episodes: merges, then distillations (of the episodes
    with one member per near-duplicate group, its representative)."""
    s = rt.settings
    out = merge.drafts(episodes, similarity=s.librarian_merge_similarity,
                       lexical=s.librarian_merge_lexical)
    if s.librarian_distil:  # a near-duplicate group speaks once, by its representative
        repeats = {e.id for d in out for e in d.sources} - {
            uuid.UUID(d.notes["representative"]) for d in out}
        out += distil.drafts([e for e in episodes if e.id not in repeats],
                             similarity=s.librarian_topic_similarity,
                             max_sources=s.librarian_max_sources, llm=_model(rt))
    if s.librarian_attributes:  # one keyed fact per attribute value: later ones supersede
        out += attributes.drafts(episodes)
    return out


def read_scope(rt: Runtime, tenant: str, scope: str) -> tuple[list[Episode], set[str]]:
    """The live episodes of a stored scope (content opened: placeholders, never values)
    and the digests of the facts the librarian already has there."""
    with rt.db.transaction(tenant) as conn:
        rows = store.episodes(conn, tenant, scope)
        have = {str(r["source_id"]).removeprefix("librarian:")
                for r in store.facts(conn, tenant, scope) if r["source_id"]}
    rows = [r for r in rows if not r.get("erased") and r["embedding"] is not None]
    vecs = unit(np.asarray([_array(r["embedding"]) for r in rows])
                ) if rows else np.zeros((0, 1), dtype=np.float32)
    # an episode's time is when what it says happened: its valid_from when the writer gave
    # one (an event time), else when it was remembered
    eps = [Episode(id=r["id"], subject=r["subject_id"],
                   created_at=r.get("valid_from") or r["created_at"],
                   content=r["content"], vector=v) for r, v in zip(rows, vecs, strict=True)]
    return eps, have


def _array(v: Any) -> np.ndarray[Any, Any]:
    """A stored pgvector value as a float32 array (the adapter's ``Vector`` or an array)."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)


def _item(scope: str, d: Draft) -> dict[str, Any]:
    first, last = d.span
    prov: dict[str, Any] = {"source": store.SOURCE, "source_id": f"librarian:{d.digest}",
                            "librarian": d.kind, "via": d.via, "sources": len(d.sources),
                            "span_from": first.date().isoformat(),
                            "span_to": last.date().isoformat()}
    if "attribute" in d.notes:
        prov["attribute"] = d.notes["attribute"]
    return {"content": d.content, "scope": scope, "subject": d.subject, "type": "fact",
            "key": d.key, "provenance": prov, "created_at": last,
            "derived_from": d.source_ids,
            # an attribute's value holds from its statement on (valid time, issue 23 item 2)
            **({"valid_from": first} if d.kind == "attribute" else {})}


def _write(rt: Runtime, who: Principal, items: list[dict[str, Any]],
           request_id: str | None) -> tuple[list[Receipt], int]:
    """Write ``items`` in one batch (one by one when the batch fails because a source went
    meanwhile); (receipts, how many failed)."""
    boost = rt.settings.librarian_fact_boost

    def rank(conn: Any, receipts: list[Receipt]) -> None:
        store.set_boost(conn, who.tenant, [r.id for r in receipts], boost)

    try:
        return write.remember_many(rt, who, items, request_id=request_id,
                                   trigger="librarian", after=rank), 0
    except (Conflict, ValidationError):
        if len(items) == 1:
            return [], 1
    done: list[Receipt] = []
    failed = 0
    for it in items:
        got, bad = _write(rt, who, [it], request_id)
        done += got
        failed += bad
    return done, failed


def run(rt: Runtime, who: Principal, *, scope: str | None = None, dry_run: bool = False,
        now: datetime | None = None, progress: Progress | None = None,
        request_id: str | None = None) -> LibrarianResult:
    """One librarian run over the principal's tenant (module docstring); ``scope`` limits
    it to one scope (its name as the caller writes it), ``now`` is the reference time of
    fading (default: now), ``progress`` is called after each scope.

    Needs ``memory:write`` and ``memory:forget`` (it writes facts and changes ranks) and a
    key limited to no scope or subject (it reads the whole tenant).

    Raises:
        Forbidden: a missing permission, or a limited key.
        ValidationError: a malformed ``scope``.
    """
    who.require("memory:write")
    who.require("memory:forget")
    who.require_unlimited("librarian")
    scope = checked.optional_name(scope, "scope")
    t0 = time.perf_counter()
    now = now or datetime.now(UTC)
    res = LibrarianResult(tenant=who.tenant, dry_run=dry_run)
    with owner_connection(rt.db.url, autocommit=True) as lock:
        if not store.try_lock(lock, who.tenant):
            res.locked = True
            return res
        try:
            _run_locked(rt, who, res, scope, now, progress, request_id)
        finally:
            store.unlock(lock, who.tenant)
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


def _run_locked(rt: Runtime, who: Principal, res: LibrarianResult, scope: str | None,
                now: datetime, progress: Progress | None, request_id: str | None) -> None:
    tenant = who.tenant
    with rt.db.transaction(tenant) as conn:
        stored_scope = None if scope is None else (
            pii.Translator(rt, conn, tenant)(scope) or scope)
        scopes = store.scopes(conn, tenant)
    if stored_scope is not None:
        scopes = [s for s in scopes if s == stored_scope]
    res.scopes = len(scopes)
    model = _model(rt)
    res.model = getattr(model, "name", None) if model is not None else None
    spent = dict.fromkeys(("read", "plan", "write"), 0.0)
    for n, sc in enumerate(scopes, start=1):
        t = time.perf_counter()
        episodes, have = read_scope(rt, tenant, sc)
        res.episodes += len(episodes)
        t1 = time.perf_counter()
        drafts = plan(rt, episodes)
        t2 = time.perf_counter()
        spent["read"] += t1 - t
        spent["plan"] += t2 - t1
        res.planned += len(drafts)
        res.merged += sum(d.kind == "merge" for d in drafts)
        res.distilled += sum(d.kind == "distil" for d in drafts)
        res.attributes += sum(d.kind == "attribute" for d in drafts)
        res.model_fallbacks += sum(d.via == "model_fallback" for d in drafts)
        todo = [d for d in drafts if d.digest not in have]
        res.existing += len(drafts) - len(todo)
        if not res.dry_run:
            for i in range(0, len(todo), BATCH):
                got, bad = _write(rt, who, [_item(sc, d) for d in todo[i:i + BATCH]],
                                  request_id)
                res.written += [r.id for r in got]
                res.superseded += sum(1 for r in got if r.superseded)
                res.failed += bad
        spent["write"] += time.perf_counter() - t2
        if progress is not None:
            progress(n, len(scopes))
    res.timings = {k: round(v, 3) for k, v in spent.items()}
    rt.db.fold_accesses(tenant)  # accesses recall recorded for later count here
    with rt.db.transaction(tenant) as conn:
        f = fade.apply(conn, tenant, rt.settings, now, scope=stored_scope,
                       dry_run=res.dry_run)
        res.faded, res.restored = len(f.faded), len(f.restored)
        if not res.dry_run and (res.written or f.faded or f.restored):
            res.audit_seq = audit.append(
                conn, tenant=tenant, operation="LIBRARIAN", actor=who.actor, agent=who.agent,
                memory_ids=[str(i) for i in res.written[:10]], trigger="librarian",
                request_id=request_id,
                details={"scopes": res.scopes, "episodes": res.episodes,
                         "planned": res.planned, "merged": res.merged,
                         "distilled": res.distilled, "existing": res.existing,
                         "written": len(res.written), "superseded": res.superseded,
                         "failed": res.failed, "faded": res.faded,
                         "restored": res.restored, "model": res.model,
                         "model_fallbacks": res.model_fallbacks})


def run_all(rt: Runtime, *, dry_run: bool = False,
            now: datetime | None = None) -> list[LibrarianResult]:
    """The librarian for every live tenant (the schedule's operator path). A tenant whose
    run fails is logged by its id and reported with ``error``; the others still run."""
    out = []
    for t in tenant_store.live(rt.db.url):
        try:
            out.append(run(rt, Principal.local(t), dry_run=dry_run, now=now))
        except Exception as exc:  # one tenant's failure must not stop the others
            err = tenant_job_failure("librarian", t, exc, log)
            out.append(LibrarianResult(tenant=t, dry_run=dry_run, error=err.to_dict()))
    return out
