"""The PII watch (SPEC section 3, issue 23 item 4): values that became known after records
holding them were stored.

A value becomes known when it enters the vault: a name passed as an entity on a remember
today, a value another record held. The write path recognises it in every record written
from then on, but a record stored last month kept it in plain text. The watch finds those
records, rewrites them with placeholders through the one in-place rewrite of a record
(:func:`mnemovault.subjects.rectify.replace_in_place`, what a rectification uses: sealed
under the record's owner key, re-embedded, keyed terms and statistics updated, graph
support rebuilt, ``version`` + 1; status, lineage, key, scope and subject untouched), and
audits each batch.

Which values (the watermark). Each vault value carries ``watched_at`` (migration 0018):
NULL until a run covered it. A run reads the tenant's pending values only, so a run after
one new entity looks at that entity alone. A value a run sees for the first time gets
``watch_seen_at``; it is marked covered by a run that starts at least
``pii_watch_settle_seconds`` (default 600) after that first sighting, so that a write that
was under way when the value appeared (its known-entity index loaded before the value
existed, its commit after the first run's scan) is scanned too. With a settle time of 0 the
first run covers it. A value whose candidates could not all be handled (an erase of their
subject under way: Conflict) stays pending. Each non-dry run leaves a row in
``pii_watch_runs`` (counts and times: what it scanned).

Which records (candidates, without decrypting the tenant). The value's terms are hashed
with the tenant's term key exactly as a record's terms are (:mod:`mnemovault.recall.terms`:
PostgreSQL's english analysis, then HMAC), in two forms (as first written, and its
normal form: case-folded, NFKC); a record is a candidate when its keyed terms hold every
term of one form. Live records are found through ``lexical_postings`` (index scans by
scope and lexeme), the others (pending review, superseded, archived) by their ``tsv`` in
the database. Only the candidates are opened (row factory), and the pseudonymiser
(full known-entity index, as on the write path) decides: a record whose text it leaves
unchanged is not touched. A value with no term (all stop words) makes the run scan every
record of the tenant, as ``full=True`` does always. Limits: a record that wrote the value
in another form than the two (look-alike letters, invisible characters inside it, glued
to other text so that PostgreSQL reads another token, such as ``ann.lee``) is found by a
``full`` run only.

What is rewritten: the content (the text that is embedded, indexed and shown). A record's
``key``, tags, scope and subject are identities (the upsert key, the owner of the content
key, the lock of an erase) and are not rewritten here.

Safety. One transaction per batch (``batch`` records) with its ``PII_WATCH`` audit row
(ids, counts, placeholders: never a value). Each batch takes the write locks of the
records' subjects, as a write does (an erase under way makes those records wait for the
next run), then locks and re-reads each row: a record deleted meanwhile is skipped, one
whose content key was destroyed (an erased subject) reads as ``[erased]`` and is never
rewritten (no new key is made for an erased owner). A session advisory lock per tenant
keeps two runs apart. A dry run reads and reports, and writes nothing (no audit row, no
marks). Values are decrypted in memory to compute their terms and never leave the process.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import (
    Conflict,
    Forbidden,
    ValidationError,
    tenant_job_failure,
)
from mnemovault.pii import service as pii
from mnemovault.pii.detect import normalise
from mnemovault.pii.vault import ERASED, PLACEHOLDER_RE
from mnemovault.recall import terms
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as ledger_store
from mnemovault.store import pii_watch as store
from mnemovault.store import subjects as subject_store
from mnemovault.store.db import owner_connection

__all__ = ["BATCH", "Progress", "Report", "TenantReport", "pending", "run", "run_all"]

log = logging.getLogger(__name__)

BATCH = 200
"""Records per committed transaction (each with its audit row)."""

OPERATION = "PII_WATCH"

Progress = Callable[[int, int], None]  # (candidates done so far, candidates in all)


@dataclass
class TenantReport:
    """What one run did in one tenant: counts and ids, never a value.

    ``values``: pending values scanned; ``values_done``: marked covered; ``candidates``:
    records whose keyed terms matched; ``opened``: candidates read (the rest were gone or
    deferred); ``rewritten``: ids rewritten (a dry run: would be); ``deferred``: ids left
    for the next run (their subject was being erased); ``erased``: candidates under a
    destroyed key (never rewritten); ``audit_seqs``: the batches' audit rows."""

    tenant: str
    dry_run: bool = False
    full: bool = False
    run_id: str = ""
    values: int = 0
    values_done: int = 0
    candidates: int = 0
    opened: int = 0
    rewritten: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    erased: int = 0
    batches: int = 0
    audit_seqs: list[int] = field(default_factory=list)
    ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rewritten_count": len(self.rewritten)}


@dataclass
class Report:
    """A run over several tenants (the schedule): one :class:`TenantReport` each;
    ``busy``: tenants another run held; ``errors``: ``{"tenant", "error"}``."""

    tenants: list[TenantReport] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    ms: float = 0.0

    @property
    def rewritten(self) -> int:
        return sum(len(t.rewritten) for t in self.tenants)

    def to_dict(self) -> dict[str, Any]:
        return {"tenants": [t.to_dict() for t in self.tenants], "busy": self.busy,
                "errors": self.errors, "rewritten": self.rewritten, "ms": self.ms}


def pending(rt: Runtime, tenant: str) -> int:
    """How many of the tenant's vault values the watch has not covered yet."""
    with rt.db.transaction(tenant) as conn:
        return store.pending_count(conn, tenant)


def _forms(key: bytes, value: str) -> list[frozenset[str]]:
    """The keyed term sets of ``value`` as written and in its normal form (distinct,
    non-empty ones); empty when it has no term at all."""
    out: list[frozenset[str]] = []
    for text in (value, normalise(value)):
        form = frozenset(terms.query(key, text))
        if form and form not in out:
            out.append(form)
    return out


def _tsquery(lexemes: Iterable[str]) -> str:
    """A tsquery literal matching any of ``lexemes`` (keyed hashes: base64url characters,
    quoted)."""
    return " | ".join(f"'{lx}'" for lx in sorted(lexemes))


def _candidates(rt: Runtime, conn: Any, tenant: str, values: dict[str, str], *,
                full: bool) -> tuple[dict[str, set[uuid.UUID]], bool]:
    """``({placeholder: candidate ids}, whether every record is a candidate)``."""
    if full:
        return {p: set() for p in values}, True
    key = terms.tenant_key(rt.pii, conn, tenant, create=False)
    if key is None:
        return {p: set() for p in values}, False
    forms = {p: _forms(key, v) for p, v in values.items()}
    if any(not f for f in forms.values()):  # a value with no term: only a scan finds it
        return {p: set() for p in values}, True
    lexemes = sorted({lx for fs in forms.values() for f in fs for lx in f})
    held = store.live_term_hits(conn, tenant, store.scopes(conn, tenant), lexemes)
    others = store.other_term_hits(conn, tenant, _tsquery(lexemes))
    held.update(store.keyed_lexemes(conn, tenant, others, lexemes))
    plain = store.without_terms(conn, tenant)  # postings do not speak for these yet
    out: dict[str, set[uuid.UUID]] = {}
    for p, fs in forms.items():
        out[p] = {mid for mid, have in held.items() if any(f <= have for f in fs)}
        out[p].update(plain)
    return out, False


def run(rt: Runtime, who: Principal, *, dry_run: bool = False, full: bool = False,
        batch: int = BATCH, settle_seconds: float | None = None,
        progress: Progress | None = None, trigger: str = "api",
        request_id: str | None = None) -> TenantReport:
    """Run the watch over ``who``'s tenant (module docstring). Needs ``subject:erase`` and
    a key without scope or subject limits (it rewrites records of every subject).

    Raises:
        Forbidden: a missing permission, or a limited key.
        ValidationError: ``batch`` outside 1..10,000.
        Conflict: another run of this tenant holds its lock (nothing was done).
    """
    who.require("subject:erase")
    if who.limited:
        raise Forbidden("pii watch: rewrites records of every subject; needs a key without "
                        "scope or subject limits", permission="unlimited")
    if not isinstance(batch, int) or not 1 <= batch <= 10_000:
        raise ValidationError("batch: must be an integer in 1..10000", field="batch")
    settle = rt.settings.pii_watch_settle_seconds if settle_seconds is None \
        else float(settle_seconds)
    if not rt.settings.pii_pseudonymize:
        return TenantReport(tenant=who.tenant, dry_run=dry_run, full=full)
    with owner_connection(rt.db.url, autocommit=True) as lock:
        if not store.try_lock(lock, who.tenant):
            raise Conflict("pii watch: another run of this tenant is under way; nothing was "
                           "done and retrying later is safe")
        try:
            return _run(rt, who, dry_run=dry_run, full=full, batch=batch, settle=settle,
                        progress=progress, trigger=trigger, request_id=request_id)
        finally:
            store.unlock(lock, who.tenant)


def _run(rt: Runtime, who: Principal, *, dry_run: bool, full: bool, batch: int,
         settle: float, progress: Progress | None, trigger: str,
         request_id: str | None) -> TenantReport:
    t0 = time.perf_counter()
    tenant = who.tenant
    rep = TenantReport(tenant=tenant, dry_run=dry_run, full=full, run_id=str(uuid.uuid4()))
    with rt.db.transaction(tenant) as conn:
        started: datetime = store.now(conn)
        todo = store.pending(conn, tenant)
        rep.values = len(todo)
        if not todo and not full:
            rep.ms = round((time.perf_counter() - t0) * 1000, 2)
            return rep
        placeholders = [r["placeholder"] for r in todo]
        values = {p: v for p, v in rt.pii.reveal_values(conn, tenant, placeholders).items()
                  if v != ERASED}
        per_value, scan_all = _candidates(rt, conn, tenant, values, full=full)
        del values  # the plaintext values go no further
        if scan_all:
            rep.full = True
            everyone = set(store.all_ids(conn, tenant))
            per_value = {p: everyone for p in per_value}
            ids = sorted(everyone)
        else:
            ids = sorted(set().union(*per_value.values())) if per_value else []
        if not dry_run:
            store.mark_seen(conn, tenant, placeholders, started)
        keys = rt.pii.existing_tenant_keys(conn, tenant)
        known = rt.pii.known_index(conn, keys) if keys is not None else None
    rep.candidates = len(ids)
    deferred: set[uuid.UUID] = set()
    done = 0
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch]
        try:
            _batch(rt, who, chunk, rep, deferred, dry_run=dry_run, known=known,
                   trigger=trigger, request_id=request_id)
        except Conflict:  # a value erased concurrently: the whole batch waits for next time
            deferred.update(chunk)
        done += len(chunk)
        if progress is not None:
            progress(done, len(ids))
    rep.deferred = [str(i) for i in sorted(deferred)]
    settled_before = started - timedelta(seconds=settle)
    finished = [r["placeholder"] for r in todo
                if not (per_value.get(r["placeholder"], set()) & deferred)
                and (settle <= 0 or (r["watch_seen_at"] is not None
                                     and r["watch_seen_at"] <= settled_before))]
    if not dry_run:
        with rt.db.transaction(tenant) as conn:
            rep.values_done = store.mark_watched(conn, tenant, finished, started)
            store.insert_run(conn, tenant, uuid.UUID(rep.run_id), started, full=rep.full,
                             counts={"values": rep.values, "values_done": rep.values_done,
                                     "candidates": rep.candidates, "opened": rep.opened,
                                     "rewritten": len(rep.rewritten),
                                     "deferred": len(rep.deferred), "batches": rep.batches})
    else:
        rep.values_done = len(finished)
    rep.ms = round((time.perf_counter() - t0) * 1000, 2)
    log.info("pii watch: tenant %s: %d values, %d candidates, %d rewritten, %d deferred%s",
             tenant, rep.values, rep.candidates, len(rep.rewritten), len(rep.deferred),
             " (dry run)" if dry_run else "")
    return rep


def _batch(rt: Runtime, who: Principal, ids: list[uuid.UUID], rep: TenantReport,
           deferred: set[uuid.UUID], *, dry_run: bool, known: Any, trigger: str,
           request_id: str | None) -> None:
    """One batch in one transaction: lock, re-read, rewrite what changed, audit."""
    from mnemovault.subjects.rectify import replace_in_place

    tenant = who.tenant
    with rt.db.transaction(tenant) as conn:
        rows = subject_store.rows(conn, tenant, ids)
        pairs = sorted({(r["scope"], r["subject_id"]) for r in rows},
                       key=lambda p: (p[0], p[1] or ""))
        locked_pairs = set()
        for pair in pairs:  # each its own try: one erase defers only its subject's records
            try:
                subject_store.lock_for_write(conn, tenant, [pair])
                locked_pairs.add(pair)
            except Conflict:
                deferred.update(r["id"] for r in rows
                                if (r["scope"], r["subject_id"]) == pair)
        ps = pii.pseudonymiser(rt, conn, tenant, read_only=dry_run, known=known)
        changes: list[tuple[dict[str, Any], Any, list[str]]] = []
        for r in rows:
            if (r["scope"], r["subject_id"]) not in locked_pairs:
                continue
            locked = subject_store.lock_memory(conn, tenant, r["id"])
            if locked is None:  # deleted meanwhile
                continue
            if locked.get("erased") or locked["content"] == ERASED:
                rep.erased += 1  # its key is destroyed: an erased subject stays erased
                continue
            rep.opened += 1
            content = str(locked["content"])
            out = ps.rewrite(content, create=not dry_run)
            if out.text == content:
                continue
            before = {m.group(0) for m in PLACEHOLDER_RE.finditer(content)}
            changes.append((locked, out, sorted(set(out.placeholders) - before)))
        if not changes:
            return
        if dry_run:
            rep.batches += 1
            rep.rewritten.extend(str(c[0]["id"]) for c in changes)
            return
        vectors = rt.embedder.embed([c[1].text for c in changes])
        shredded: list[str] = []
        added: set[str] = set()
        created: set[str] = set()
        for (locked, out, new), vector in zip(changes, vectors, strict=True):
            # no history version: the same statement, with a placeholder for the value
            _, gone, _ = replace_in_place(rt, conn, tenant, locked, out.text, vector,
                                          out.placeholders)
            shredded.extend(gone)
            added.update(new)
            created.update(out.created)
        done = [str(c[0]["id"]) for c in changes]
        seq = audit.append(
            conn, tenant=tenant, operation=OPERATION, actor=who.actor, agent=who.agent,
            memory_ids=done, trigger=trigger, request_id=request_id,
            details={"run_id": rep.run_id, "count": len(done),
                     "placeholders": sorted(added),
                     "placeholders_created": sorted(created),
                     "shredded": sorted(shredded)})
        if shredded:
            ledger_store.insert(conn, tenant=tenant, audit_seq=seq, kind="shred",
                                request_id=request_id, subject_fp=None, scope_fp=None,
                                memory_ids=[], placeholders=sorted(shredded))
    rep.batches += 1  # committed
    rep.rewritten.extend(done)
    rep.audit_seqs.append(seq)


def run_all(rt: Runtime, *, dry_run: bool = False, batch: int = BATCH,
            settle_seconds: float | None = None, trigger: str = "schedule",
            tenants: Sequence[str] | None = None) -> Report:
    """Operator path (the schedule): :func:`run` for every tenant with pending values
    (only those among ``tenants`` when given), as its local operator; a tenant another run
    holds is skipped (``busy``), one tenant's failure is logged and reported and the
    others still go."""
    t0 = time.perf_counter()
    report = Report()
    with owner_connection(rt.db.url, autocommit=True) as conn:
        todo = store.tenants_pending(conn)
    if tenants is not None:
        todo = [t for t in todo if t in set(tenants)]
    for tenant in todo:
        try:
            report.tenants.append(run(rt, Principal.local(tenant), dry_run=dry_run,
                                      batch=batch, settle_seconds=settle_seconds,
                                      trigger=trigger))
        except Conflict:
            report.busy.append(tenant)
        except Exception as exc:  # one tenant's failure must not stop the others
            err = tenant_job_failure("pii watch", tenant, exc, log)
            report.errors.append({"tenant": tenant, "error": err.to_dict()})
    report.ms = round((time.perf_counter() - t0) * 1000, 2)
    return report
