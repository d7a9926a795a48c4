"""Procedural memory (SPEC section 9): capture, versions, runs, feedback, recall, prune.

How a procedure is stored
    A ``memories`` row of type ``procedure`` whose embedding is the embedding of the
    question that was solved (pseudonymised first, read-only: no vault entry is made for
    it) and whose content is ``"<name> | intent: <intent>"`` (pseudonymised), never the
    question's or the answer's text; plus a ``procedures`` row (steps graph, name, intent,
    counters) that goes with it (``ON DELETE CASCADE``). So status, versions
    (``parent_id``), subject, provenance, pin, row-level security, the review queue and
    the one forget path cover procedures with no code of their own. Every placeholder of
    every stored free-text field (name, intent, node labels, edge conditions, tags,
    provenance, scope, subject; of runs too) supports a graph node of the procedure's
    memory, so forget shreds what nothing else uses.

Each operation is one transaction with its audit row: ``PROCEDURE_CAPTURE``,
``PROCEDURE_VERSION``, ``PROCEDURE_RUN``, ``PROCEDURE_FEEDBACK``, ``PROCEDURE_EVALUATE``,
``PROCEDURE_PRUNE`` (and
the ``FORGET`` row of a prune that deletes). Every capture (procedure, version, run)
passes the capture guard first (:func:`mnemovault.guard.capture.check_capture`, paths
``procedure`` and ``run``) and takes the review gate's initial status
(:func:`mnemovault.guard.capture.initial_status`; a held one records its capturer in
``provenance.captured_by``, who may not approve it: :mod:`mnemovault.governance.review`).
The guard scans every string that is stored, as the memory write path does: the question
(embedded), name, intent, scope and subject, every string of the steps graph (node ids,
tools, argument names, labels, edge ends and conditions) and every provenance string
(source, agent, run_id, source_id, tags and extra keys' string values); for a run, its
evaluator name, subject and every provenance string. (Procedure versions keep the
parent's scope and subject, which were scanned when it was captured.) A procedure or
version that comes from a tool (``trigger`` ``mcp``, ``tool`` or ``import``, or a
``provenance.source`` that marks tool output:
:func:`mnemovault.guard.sanitise.tool_supplied`) then passes the injection sanitiser: its
name, intent, node labels, edge conditions, tags and provenance strings have potential
prompt injections replaced by ``[REDACTED_POTENTIAL_PROMPT_INJECTION]`` and the families
found in ``provenance.injection_flags`` (a caller-supplied value of that key is dropped on
every capture), since recall serves them to other agents.

Verdicts and counters
    A run carries the agent's verdict, an evaluator's (name, verdict, score) and, after
    feedback, a person's; the effective verdict is the person's, else the evaluator's,
    else the agent's (``success`` and ``judged`` are generated columns). A run needs at
    least one verdict. Counters (runs, successes, judged runs, judged successes, first and
    last use) change by relative updates in the run's (or the feedback's) transaction, so
    concurrent recorders never lose a count. Feedback from a principal of role
    ``service`` (an agent's key), or given ``as_agent``, is the agent's; from anyone else
    a person's.

Evaluations
    :func:`evaluate` judges a recorded run with a named evaluator
    (:mod:`mnemovault.procedures.evaluators`) from the question and answer given with the
    call (pseudonymised before the evaluator sees them, never stored, never audited) and
    stores the evaluator's name, verdict and score on the run, replacing an earlier
    evaluator's; the counters follow the run's new effective verdict. A person's verdict
    is a column no evaluator writes, and it stays the effective one. The evaluator runs
    outside any transaction (a model call may be slow); the run is locked and re-checked
    only for the write and its audit row.

Versions
    A new version links to its parent (``parent_id``, ``version`` + 1, same scope and
    subject). Active at once (no review gate) it supersedes its parent in the same
    transaction; held for review, the parent stays recalled until the version is approved:
    recall skips any procedure with an active version, and :func:`settle_versions` (for the
    review gate's approve) marks such parents superseded.

Prune
    Deletes runs older than N days (the counters keep them: they summarise every run
    recorded) and procedures unused (no run, or never run since creation) for M days,
    pinned ones exempt, through the forget path, a procedure only together with all its
    versions. A dry run reports counts and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pydantic import ValidationError as PydanticValidationError

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.audit import log as audit
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, NotFound, Unavailable, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.governance import graph
from mnemovault.guard import capture as capture_guard
from mnemovault.guard import sanitise as injection
from mnemovault.ids import uuid7
from mnemovault.models import MAX_TAG_CHARS, Provenance
from mnemovault.pii import service as pii
from mnemovault.pii.pseudonymise import Pseudonymiser
from mnemovault.procedures import evaluators, ranking
from mnemovault.procedures import steps as steps_mod
from mnemovault.procedures.models import (
    MAX_EXPECT_CHARS,
    Counters,
    EvaluationInput,
    EvaluationReceipt,
    FeedbackInput,
    Procedure,
    ProcedureHit,
    ProcedureInput,
    ProcedureReceipt,
    PruneResult,
    Run,
    RunInput,
    RunReceipt,
    Steps,
    VersionInput,
)
from mnemovault.procedures.plugins import Judgement, plugins
from mnemovault.procedures.render import render_procedures, render_runs
from mnemovault.recall import terms
from mnemovault.runtime import Runtime
from mnemovault.store import memories as memory_store
from mnemovault.store import procedures as store
from mnemovault.store import review as review_store
from mnemovault.store import tenants as store_tenants
from mnemovault.store.db import tenant_of
from mnemovault.validation import MAX_NAME_CHARS, parse_id, validation_error_from_pydantic

Conn = psycopg.Connection[Any]


def parse(model: type[Any], data: Any, prefix: str = "") -> Any:
    """``data`` as ``model`` (a model instance passes as is).

    Raises:
        ValidationError: names the field.
    """
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise validation_error_from_pydantic(exc, prefix=prefix) from None


class _Writer:
    """Pseudonymisation of one capture's free text in its transaction: what was created,
    and every placeholder used (for the graph and the erased-value check)."""

    def __init__(self, rt: Runtime, conn: Conn, tenant: str) -> None:
        self.rt = rt
        self.ps: Pseudonymiser | None = (pii.pseudonymiser(rt, conn, tenant)
                                         if rt.settings.pii_pseudonymize else None)
        self.created: list[str] = []
        self.used: set[str] = set()

    def __call__(self, value: str | None) -> str | None:
        if value is None or self.ps is None:
            return value
        r = self.ps.rewrite(value)
        self.created.extend(p for p in r.created if p not in self.created)
        self.used.update(r.placeholders)
        return r.text

    def query(self, value: str) -> str:
        """Text to embed: placeholders, nothing written to the vault."""
        if self.ps is None:
            return value
        return self.ps.rewrite(value, create=False).text

    def provenance(self, prov: Any) -> dict[str, Any]:
        d = prov.model_dump(exclude_none=True)
        out = {k: (self(v) if isinstance(v, str) else v) for k, v in d.items()}
        out["tags"] = [self(t) for t in prov.tags]
        return out

    def steps(self, s: Steps) -> dict[str, Any]:
        """The graph as stored: labels and conditions pseudonymised; ``expect`` kept as
        written (a pattern), refused when it holds a personal value (it is matched against
        the pseudonymised answer, where such a value never appears)."""
        d = s.model_dump(exclude_none=True)
        if s.expect is not None and self.query(s.expect) != s.expect:
            raise ValidationError("steps.expect: must not hold a personal value (answers "
                                  "are matched pseudonymised)", field="steps.expect")
        for node in d["nodes"]:
            if "name" in node:
                node["name"] = self(node["name"])
        for edge in d["edges"]:
            if "condition" in edge:
                edge["condition"] = self(edge["condition"])
        return d


def _guard(rt: Runtime, who: Principal, path: str, request_id: str | None,
           fields: dict[str, str | None]) -> None:
    capture_guard.check_capture(rt, path=path, fields=fields, tenant=who.tenant,
                                request_id=request_id)


def _sanitised(rt: Runtime, trigger: str, name: str, intent: str | None, s: Steps,
               prov: Provenance) -> tuple[str, str | None, Steps, Provenance]:
    """Name, intent, steps and provenance through the injection sanitiser when they come
    from a tool (module docstring); the sanitiser's label is dropped from a caller's
    provenance either way."""
    data = prov.model_dump(exclude_none=True)
    data.pop(injection.FLAG_KEY, None)
    if not injection.tool_supplied(trigger, prov.source):
        return name, intent, s, Provenance.model_validate(data)
    d = s.model_dump(exclude_none=True)
    tags: list[str] = data.get("tags", [])
    texts: dict[str, str | None] = {"name": name, "intent": intent}
    limits = {"name": MAX_NAME_CHARS, "intent": MAX_NAME_CHARS}
    for i, node in enumerate(d["nodes"]):
        texts[f"nodes.{i}"], limits[f"nodes.{i}"] = node.get("name"), MAX_NAME_CHARS
    for i, edge in enumerate(d["edges"]):
        texts[f"edges.{i}"], limits[f"edges.{i}"] = edge.get("condition"), MAX_NAME_CHARS
    for i, tag in enumerate(tags):
        texts[f"tags.{i}"], limits[f"tags.{i}"] = tag, MAX_TAG_CHARS
    for k, v in data.items():
        if k != "tags" and isinstance(v, str):
            texts[f"provenance.{k}"] = v
            limits[f"provenance.{k}"] = MAX_NAME_CHARS if k in Provenance.model_fields else 1000
    if s.expect is not None:  # a pattern is refused, not rewritten (it would break)
        texts["expect"], limits["expect"] = s.expect, MAX_EXPECT_CHARS
    out, families = injection.sanitise_texts(texts, limits,
                                             injection.default_sanitiser(rt.settings))
    if out.pop("expect", None) != s.expect:
        raise ValidationError("steps.expect: holds a potential prompt injection (a "
                              "pattern from a tool is refused, not rewritten)",
                              field="steps.expect")
    for i, node in enumerate(d["nodes"]):
        if node.get("name") is not None:
            node["name"] = out[f"nodes.{i}"]
    for i, edge in enumerate(d["edges"]):
        if edge.get("condition") is not None:
            edge["condition"] = out[f"edges.{i}"]
    data["tags"] = [out[f"tags.{i}"] for i in range(len(tags))]
    data |= {k.removeprefix("provenance."): v for k, v in out.items()
             if k.startswith("provenance.")}
    if families:
        data[injection.FLAG_KEY] = list(families)
    return (out["name"] or name, out["intent"], Steps.model_validate(d),
            Provenance.model_validate(data))


def _capture_fields(question: str | None, name: str | None, intent: str | None, s: Steps,
                    prov: Provenance, **names: str | None) -> dict[str, str | None]:
    """The guarded fields of a procedure capture (module docstring): ``names`` adds the
    scope and subject of a new procedure."""
    return {"text": question, "name": name, "intent": intent, **names,
            **_strings("steps", s.model_dump(exclude_none=True)),
            **_provenance_fields(prov)}


def _provenance_fields(prov: Provenance) -> dict[str, str | None]:
    """Every string of a provenance (extra keys included), by dotted path."""
    return _strings("provenance", prov.model_dump(exclude_none=True))


def _strings(path: str, value: Any) -> dict[str, str | None]:
    """Every string inside ``value`` (dicts and lists, recursively) by dotted path."""
    if isinstance(value, str):
        return {path: value}
    if isinstance(value, dict):
        return {k: v for key, item in value.items()
                for k, v in _strings(f"{path}.{key}", item).items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value)
                for k, v in _strings(f"{path}.{i}", item).items()}
    return {}


def _term_key(rt: Runtime, conn: Conn, tenant: str) -> bytes:
    """The tenant's term key (:mod:`mnemovault.recall.terms`), created on first use."""
    key = terms.tenant_key(rt.pii, conn, tenant)
    assert key is not None
    return key


def _content(name: str, intent: str) -> str:
    return f"{name} | intent: {intent}"


def _index(rt: Runtime, conn: Conn, tenant: str, memory_id: uuid.UUID, w: _Writer,
           texts: Sequence[str | None]) -> None:
    """Graph support of ``memory_id`` for every placeholder in ``texts``; refuses (a
    retryable Conflict) when a value used was shredded concurrently."""
    graph.index(conn, tenant, [graph.mentions(memory_id, texts, carried=w.used)])
    if w.used and rt.pii.erased_placeholders(conn, w.used):
        raise Conflict("content: a personal value in it was erased concurrently; retrying "
                       "is safe", field="content")


def _intent(rt: Runtime, question: str | None, s: Steps, given: str | None) -> str:
    if given is not None:
        return given
    if question is None:
        return "unspecified"
    label = plugins(rt).intent(question, s)
    return checked.name(label, "intent")


# -- capture ---------------------------------------------------------------------------
def capture(rt: Runtime, who: Principal, item: ProcedureInput | dict[str, Any], *,
            request_id: str | None = None, trigger: str = "api") -> ProcedureReceipt:
    """Capture a procedure (module docstring). Needs ``memory:write``.

    Raises:
        ValidationError: a bad field or steps graph (named).
        Forbidden: missing ``memory:write``, or outside the key's scope or subject.
        Refused / Unavailable: the capture guard refused, or failed closed.
    """
    who.require("memory:write")
    p: ProcedureInput = parse(ProcedureInput, item)
    who.check_scope(p.scope)
    who.check_subject(p.subject)
    subject = p.subject if p.subject is not None else who.subject
    steps_mod.check(p.steps)
    name = p.name or steps_mod.default_name(p.steps)
    intent = _intent(rt, p.question, p.steps, p.intent)
    _guard(rt, who, "procedure", request_id,
           _capture_fields(p.question, name, intent, p.steps, p.provenance,
                           scope=p.scope, subject=subject))
    name, s_int, p_steps, p_prov = _sanitised(rt, trigger, name, intent, p.steps, p.provenance)
    intent = s_int or intent
    p = p.model_copy(update={"steps": p_steps, "provenance": p_prov})
    status = capture_guard.initial_status(rt)
    now = datetime.now(UTC)
    mid = uuid7()
    with rt.db.transaction(who.tenant) as conn:
        if who.key_id is None:
            store_tenants.ensure(conn, who.tenant)
        w = _Writer(rt, conn, who.tenant)
        s_name, s_intent = w(name) or name, w(intent) or intent
        scope, s_subject = w(p.scope) or p.scope, w(subject)
        s_steps, prov = w.steps(p.steps), w.provenance(p.provenance)
        if status == "pending_review":  # the capturer, for the separation of duties
            prov = {**prov, **review_store.held_provenance(who.actor)}
        vec = rt.embedder.embed([w.query(p.question)])[0]
        content = _content(s_name, s_intent)
        sealer = pii.content_writer(rt, conn, who.tenant)
        key_id, sealed = sealer.content(scope, s_subject, mid, content)
        clear_prov, prov_sealed = sealer.provenance(scope, s_subject, mid, prov)
        store.insert(conn, tenant=who.tenant, memory_id=mid, scope=scope, subject=s_subject,
                     content=content, embedding=vec, status=status, provenance=clear_prov,
                     parent_id=None, version=1, now=now, name=s_name, intent=s_intent,
                     steps=s_steps, key_id=key_id, sealed=sealed,
                     provenance_sealed=prov_sealed,
                     procedure_sealed=sealer.procedure(scope, s_subject, mid, {
                         "name": s_name, "intent": s_intent, "steps": s_steps}),
                     terms=terms.document(_term_key(rt, conn, who.tenant), content))
        _index(rt, conn, who.tenant, mid, w,
               [content, scope, s_subject, *steps_mod.free_texts(Steps(**s_steps)),
                *(v for v in prov.values() if isinstance(v, str)), *prov["tags"]])
        seq = audit.append(conn, tenant=who.tenant, operation="PROCEDURE_CAPTURE",
                           actor=who.actor, agent=who.agent, memory_ids=[str(mid)],
                           trigger=trigger, request_id=request_id,
                           details={"status": status, "nodes": len(p.steps.nodes),
                                    "edges": len(p.steps.edges),
                                    "placeholders_created": sorted(w.created)})
    return ProcedureReceipt(id=mid, scope=scope, status=status,  # type: ignore[arg-type]
                            version=1, parent_id=None, name=s_name, intent=s_intent,
                            placeholders=w.created, audit_seq=seq)


def new_version(rt: Runtime, who: Principal, parent_id: uuid.UUID | str,
                item: VersionInput | dict[str, Any], *, request_id: str | None = None,
                trigger: str = "api") -> ProcedureReceipt:
    """A new version of procedure ``parent_id`` (module docstring): same scope and
    subject, ``version`` + 1, through the capture guard and the review gate. Needs
    ``memory:write``.

    Raises:
        NotFound: no such procedure visible to the caller.
        Conflict: the parent is superseded already (version its newest version).
    """
    who.require("memory:write")
    pid = parse_id(parent_id, "id")
    v: VersionInput = parse(VersionInput, item)
    steps_mod.check(v.steps)
    name = v.name or steps_mod.default_name(v.steps)
    _guard(rt, who, "procedure", request_id,
           _capture_fields(v.question, name, v.intent, v.steps, v.provenance))
    name, v_intent, v_steps, v_prov = _sanitised(rt, trigger, name, v.intent, v.steps,
                                                 v.provenance)
    v = v.model_copy(update={"intent": v_intent, "steps": v_steps, "provenance": v_prov})
    status = capture_guard.initial_status(rt)
    now = datetime.now(UTC)
    mid = uuid7()
    with rt.db.transaction(who.tenant) as conn:
        parent = store.lock(conn, who.tenant, pid)
        if parent is None or not visibility.view(rt, conn, who).within(parent):
            raise NotFound("id: no procedure with this id", field="id")
        if parent["status"] == "superseded":
            raise Conflict("id: this procedure is superseded; make a version of its newest "
                           "version", field="id")
        intent = v.intent if v.intent is not None else (
            _intent(rt, v.question, v.steps, None) if v.question else None)
        if intent is not None:
            _guard(rt, who, "procedure", request_id, {"intent": intent})
        w = _Writer(rt, conn, who.tenant)
        s_name = w(name) or name
        s_intent = (w(intent) or intent) if intent is not None else parent["intent"]
        s_steps, prov = w.steps(v.steps), w.provenance(v.provenance)
        if status == "pending_review":  # the capturer, for the separation of duties
            prov = {**prov, **review_store.held_provenance(who.actor)}
        vec = rt.embedder.embed([w.query(v.question)])[0] if v.question else None
        content = _content(s_name, s_intent)
        superseded = None
        if status == "active":
            superseded = pid if store.supersede(conn, who.tenant, pid, now) else None
        sealer = pii.content_writer(rt, conn, who.tenant)
        key_id, sealed = sealer.content(parent["scope"], parent["subject_id"], mid, content)
        clear_prov, prov_sealed = sealer.provenance(parent["scope"], parent["subject_id"],
                                                    mid, prov)
        store.insert(conn, tenant=who.tenant, memory_id=mid, scope=parent["scope"],
                     subject=parent["subject_id"], content=content, embedding=vec,
                     status=status, provenance=clear_prov, parent_id=pid,
                     version=int(parent["version"]) + 1, now=now, name=s_name,
                     intent=s_intent, steps=s_steps, key_id=key_id, sealed=sealed,
                     provenance_sealed=prov_sealed,
                     procedure_sealed=sealer.procedure(
                         parent["scope"], parent["subject_id"], mid,
                         {"name": s_name, "intent": s_intent, "steps": s_steps}),
                     terms=terms.document(_term_key(rt, conn, who.tenant), content))
        _index(rt, conn, who.tenant, mid, w,
               [content, parent["scope"], parent["subject_id"],
                *steps_mod.free_texts(Steps(**s_steps)),
                *(x for x in prov.values() if isinstance(x, str)), *prov["tags"]])
        seq = audit.append(conn, tenant=who.tenant, operation="PROCEDURE_VERSION",
                           actor=who.actor, agent=who.agent, memory_ids=[str(mid), str(pid)],
                           trigger=trigger, request_id=request_id,
                           details={"status": status, "parent": str(pid),
                                    "version": int(parent["version"]) + 1,
                                    "superseded": superseded is not None,
                                    "placeholders_created": sorted(w.created)})
    return ProcedureReceipt(id=mid, scope=parent["scope"], status=status,  # type: ignore[arg-type]
                            version=int(parent["version"]) + 1, parent_id=pid,
                            superseded=superseded, name=s_name, intent=s_intent,
                            placeholders=w.created, audit_seq=seq)


def settle_versions(conn: Conn, ids: Sequence[uuid.UUID],
                    now: datetime | None = None) -> list[uuid.UUID]:
    """For the review gate's approve, in its transaction: the parents of the now active
    procedure versions among ``ids`` become superseded. Returns those parents."""
    return store.supersede_parents_of_active(conn, tenant_of(conn), ids,
                                             now or datetime.now(UTC))


# -- read ------------------------------------------------------------------------------
def get(rt: Runtime, who: Principal, procedure_id: uuid.UUID | str, *,
        runs: int = 0) -> Procedure:
    """One procedure, whatever its status, with its newest ``runs`` runs (0..100). Needs
    ``memory:read``. A subject-limited key gets only its subject's runs (runs are their
    subject's data: feedback on another subject's run is NotFound to it too).

    Raises:
        NotFound: no such procedure visible to the caller.
    """
    who.require("memory:read")
    pid = parse_id(procedure_id, "id")
    if not isinstance(runs, int) or not 0 <= runs <= 100:
        raise ValidationError("runs: must be an integer in 0..100", field="runs")
    w = ranking.Weights.from_settings(rt.settings)
    with rt.db.transaction(who.tenant) as conn:
        row = store.get(conn, who.tenant, pid)
        v = visibility.view(rt, conn, who)
        if row is None or not v.sees(row):  # a pending procedure: reviewers only
            raise NotFound("id: no procedure with this id", field="id")
        proc = render_procedures(rt, conn, [row], w)[0]
        if runs:  # a subject-limited key sees only its subject's runs (as ``feedback``)
            limit_subject = v.subject
            proc.recent_runs = render_runs(rt, conn, store.recent_runs(
                conn, who.tenant, pid, runs, subject=limit_subject))
    return proc


def recall(rt: Runtime, who: Principal, question: str, *, scope: str, k: int = 5,
           subject: str | None = None, tags: Sequence[str] | None = None) -> list[ProcedureHit]:
    """The ``k`` best live procedures of ``scope`` for ``question`` (ranking:
    :mod:`mnemovault.procedures.ranking`), best first. Pending-review and superseded
    procedures, and parents of an active version, are never returned. Needs
    ``memory:read``.

    Raises:
        ValidationError: blank question, k outside 1..100, bad scope/subject/tags.
    """
    who.require("memory:read")
    scope = checked.name(scope, "scope")
    who.check_scope(scope)
    question = checked.query(question, "question")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100:
        raise ValidationError("k: must be an integer in 1..100", field="k")
    subject = checked.optional_name(subject, "subject")
    who.check_subject(subject)
    subject = who.subject or subject
    tag_list = [checked.name(t, f"tags.{i}", max_len=64) for i, t in enumerate(tags or [])]
    w = ranking.Weights.from_settings(rt.settings)
    now = datetime.now(UTC)
    with rt.db.transaction(who.tenant) as conn:
        tr = pii.Translator(rt, conn, who.tenant)
        qvec = rt.embedder.embed([tr(question) or question])[0]
        rows = store.candidates(conn, qvec, tenant=who.tenant, scope=tr(scope) or scope,
                                subject=tr(subject), tags=pii.stored_tags(rt, conn, who.tenant,
                                                     [tr(t) or t for t in tag_list]),
                                n=max(rt.settings.procedure_candidates, k),
                                ef_search=rt.settings.hnsw_ef_search)
        scored = []
        for r in rows:
            sim = float(r["similarity"])
            track = ranking.track_record(int(r["successes"]), int(r["runs"]), w)
            fresh = ranking.freshness(r["last_used"] or r["created_at"], now, w)
            scored.append((ranking.score(sim, track, fresh, w), sim, track, fresh, r))
        scored.sort(key=lambda x: (-x[0], x[4]["id"]))
        top = scored[:k]
        procs = render_procedures(rt, conn, [x[4] for x in top], w)
    return [ProcedureHit(procedure=p, score=s, similarity=sim, track_record=t, freshness=f)
            for p, (s, sim, t, f, _) in zip(procs, top, strict=True)]


# -- runs and feedback -----------------------------------------------------------------
def _evaluator(rt: Runtime, evaluator: Any) -> tuple[str, Any] | None:
    """The evaluator of a ``record_run`` and the name it records: the call's (a name, or
    an evaluator object), else the configured plugin, else the setting
    ``procedure_evaluator``; None when there is none."""
    if isinstance(evaluator, str):
        return evaluators.resolve(rt, checked.name(evaluator, "evaluator", max_len=64))
    ev = evaluator if evaluator is not None else plugins(rt).evaluator
    if ev is not None:
        return str(getattr(ev, "name", type(ev).__name__))[:200], ev
    if rt.settings.procedure_evaluator is not None:
        return evaluators.resolve(rt, None)
    return None


def _judge(rt: Runtime, who: Principal, question: str, answer: str, s: Steps,
           name: str, ev: Any) -> Judgement:
    """``ev``'s judgement of a question and answer, pseudonymised first (lookups only:
    nothing is written).

    Raises:
        Unavailable: the evaluator failed or returned no valid judgement.
    """
    q, a = pii.redact(rt, who, [question, answer])
    try:
        j = ev(q, a, s)
    except Exception as exc:
        raise Unavailable(f"evaluator: {name!r} failed ({type(exc).__name__}); nothing "
                          "was stored", field="evaluator") from None
    if not isinstance(j, Judgement) or j.verdict not in ("success", "failure") or (
            j.score is not None and (isinstance(j.score, bool)
                                     or not isinstance(j.score, int | float)
                                     or not 0 <= float(j.score) <= 1)):
        raise Unavailable("evaluator: returned no valid judgement; nothing was stored",
                          field="evaluator")
    return j


def record_run(rt: Runtime, who: Principal, procedure_id: uuid.UUID | str,
               item: RunInput | dict[str, Any], *, evaluator: Any = None,
               request_id: str | None = None, trigger: str = "api") -> RunReceipt:
    """Record a run of a procedure and count it (module docstring). ``evaluator`` (a
    registered name, or an evaluator object) overrides the configured one for this call;
    it judges the run when ``question`` and ``answer`` are given. Needs ``memory:write``.

    Raises:
        ValidationError: no verdict at all (neither the agent's nor an evaluator's).
        NotFound: no such procedure visible to the caller.
        Unavailable: the evaluator failed, or the capture guard failed closed.
    """
    who.require("memory:write")
    pid = parse_id(procedure_id, "id")
    run: RunInput = parse(RunInput, item)
    who.check_subject(run.subject)
    subject = run.subject if run.subject is not None else who.subject
    _guard(rt, who, "run", request_id, {"evaluator": run.evaluator, "subject": subject,
                                        **_provenance_fields(run.provenance)})
    with rt.db.transaction(who.tenant) as conn:
        row = store.get(conn, who.tenant, pid)
        if row is None or not visibility.view(rt, conn, who).within(row):
            raise NotFound("id: no procedure with this id", field="id")
    chosen = _evaluator(rt, evaluator)
    judgement = None
    ev_name, ev_verdict, score = run.evaluator, run.evaluator_verdict, run.score
    if chosen is not None and run.question is not None and run.answer is not None:
        judgement = _judge(rt, who, run.question, run.answer, Steps(**row["steps"]),
                           *chosen)
        ev_name, ev_verdict, score = chosen[0], judgement.verdict, judgement.score
    if run.verdict is None and ev_verdict is None:
        raise ValidationError("verdict: a run needs a verdict (the agent's, or an "
                              "evaluator's)", field="verdict")
    now = datetime.now(UTC)
    rid = uuid7()
    with rt.db.transaction(who.tenant) as conn:
        w = _Writer(rt, conn, who.tenant)
        s_subject, s_eval = w(subject), w(ev_name)
        prov = w.provenance(run.provenance)
        sealer = pii.content_writer(rt, conn, who.tenant)
        run_key, _ = sealer.key(row["scope"], s_subject)  # the run's own owner's key
        clear_prov, prov_sealed = sealer.provenance(row["scope"], s_subject, rid, prov)
        out = store.insert_run(
            conn, tenant=who.tenant, run_id=rid, procedure_id=pid, scope=row["scope"],
            subject=s_subject, ran_at=run.ran_at or now,
            duration_ms=float(run.duration_ms) if run.duration_ms is not None else None,
            agent_verdict=run.verdict, evaluator=s_eval, evaluator_verdict=ev_verdict,
            score=float(score) if score is not None else None, provenance=clear_prov,
            key_id=uuid.UUID(run_key), provenance_sealed=prov_sealed)
        _index(rt, conn, who.tenant, pid, w,
               [s_subject, s_eval, *(x for x in prov.values() if isinstance(x, str)),
                *prov["tags"]])
        seq = audit.append(conn, tenant=who.tenant, operation="PROCEDURE_RUN",
                           actor=who.actor, agent=who.agent, memory_ids=[str(pid)],
                           trigger=trigger, request_id=request_id,
                           details={"run": str(rid), "success": out["success"],
                                    "judged": out["judged"], "evaluated": judgement
                                    is not None})
    verdict = ev_verdict or run.verdict
    return RunReceipt(run_id=rid, procedure_id=pid, verdict=verdict, success=out["success"],
                      judged=out["judged"], evaluator=s_eval,
                      score=float(score) if score is not None else None,
                      counters=Counters(**{k: out[k] for k in Counters.model_fields}),
                      audit_seq=seq)


def feedback(rt: Runtime, who: Principal, run_id: uuid.UUID | str,
             item: FeedbackInput | dict[str, Any], *, as_agent: bool = False,
             request_id: str | None = None, trigger: str = "api") -> Run:
    """Feedback on a run: scores in [0, 1] and an optional verdict; a person's verdict
    (any caller but a ``service`` key, unless ``as_agent``) overrides the evaluator's and
    the agent's, an agent's replaces the agent's. The procedure's counters follow the
    run's new effective verdict in the same transaction. Needs ``memory:write``.

    Raises:
        ValidationError: no field given.
        NotFound: no such run visible to the caller.
    """
    who.require("memory:write")
    rid = parse_id(run_id, "run_id")
    fb: FeedbackInput = parse(FeedbackInput, item)
    if all(getattr(fb, f) is None for f in FeedbackInput.model_fields):
        raise ValidationError("body: give at least one score or a verdict", field="body")
    person = not as_agent and who.role != "service"
    now = datetime.now(UTC)
    with rt.db.transaction(who.tenant) as conn:
        old = store.lock_run(conn, who.tenant, rid)
        if old is None or not visibility.view(rt, conn, who).within(old):
            raise NotFound("run_id: no run with this id", field="run_id")
        new = store.set_feedback(
            conn, who.tenant, rid, scores={"accuracy": fb.accuracy, "efficiency": fb.efficiency,
                               "satisfaction": fb.satisfaction},
            person_verdict=fb.verdict if person else None,
            agent_verdict=None if person else fb.verdict, at=now)
        d_s = int(new["success"]) - int(old["success"])
        d_j = int(new["judged"]) - int(old["judged"])
        d_js = int(new["success"] and new["judged"]) - int(old["success"] and old["judged"])
        if d_s or d_j or d_js:
            store.bump(conn, who.tenant, new["procedure_id"], successes=d_s, judged_runs=d_j,
                       judged_successes=d_js)
        audit.append(conn, tenant=who.tenant, operation="PROCEDURE_FEEDBACK",
                     actor=who.actor, agent=who.agent, memory_ids=[str(new["procedure_id"])],
                     trigger=trigger, request_id=request_id,
                     details={"run": str(rid), "by": "person" if person else "agent",
                              "verdict": fb.verdict, "success": new["success"]})
        return render_runs(rt, conn, [new])[0]


def evaluate(rt: Runtime, who: Principal, run_id: uuid.UUID | str,
             item: EvaluationInput | dict[str, Any], *, evaluator: Any = None,
             request_id: str | None = None, trigger: str = "api") -> EvaluationReceipt:
    """Judge a recorded run with a named evaluator and store its name, verdict and score
    on the run (module docstring, "Evaluations"). ``item`` holds the run's ``question``
    and ``answer`` (never stored) and perhaps the evaluator's name; ``evaluator`` (a name)
    overrides it. Needs ``memory:write`` and a run within the caller's limits.

    Raises:
        ValidationError: a bad field, or no evaluator of the name (field ``evaluator``).
        NotFound: no such run visible to the caller (another tenant's, or outside the
            key's scope or subject).
        Unavailable: the evaluator failed; nothing was stored.
    """
    who.require("memory:write")
    rid = parse_id(run_id, "run_id")
    ev_in: EvaluationInput = parse(EvaluationInput, item)
    chosen = (checked.name(evaluator, "evaluator", max_len=64) if evaluator is not None
              else ev_in.evaluator)
    name, ev = evaluators.resolve(rt, chosen)
    with rt.db.transaction(who.tenant) as conn:
        run = store.get_run(conn, who.tenant, rid)
        if run is None or not visibility.view(rt, conn, who).within(run):
            raise NotFound("run_id: no run with this id", field="run_id")
        proc = store.get(conn, who.tenant, run["procedure_id"])
        if proc is None:
            raise NotFound("run_id: no run with this id", field="run_id")
    j = _judge(rt, who, ev_in.question, ev_in.answer, Steps(**proc["steps"]), name, ev)
    score = float(j.score) if j.score is not None else None
    with rt.db.transaction(who.tenant) as conn:
        old = store.lock_run(conn, who.tenant, rid)
        if old is None or not visibility.view(rt, conn, who).within(old):
            raise NotFound("run_id: no run with this id", field="run_id")
        new = store.set_evaluation(conn, who.tenant, rid, evaluator=name,
                                   verdict=j.verdict, score=score)
        d_s = int(new["success"]) - int(old["success"])
        d_j = int(new["judged"]) - int(old["judged"])
        d_js = int(new["success"] and new["judged"]) - int(old["success"] and old["judged"])
        if d_s or d_j or d_js:
            counters = store.bump(conn, who.tenant, new["procedure_id"], successes=d_s,
                                  judged_runs=d_j, judged_successes=d_js)
        else:
            counters = store.counters(conn, who.tenant, new["procedure_id"])
        seq = audit.append(conn, tenant=who.tenant, operation="PROCEDURE_EVALUATE",
                           actor=who.actor, agent=who.agent,
                           memory_ids=[str(new["procedure_id"])], trigger=trigger,
                           request_id=request_id,
                           details={"run": str(rid), "evaluator": name,
                                    "verdict": j.verdict, "score": score,
                                    "success": new["success"],
                                    "person_verdict_kept": new["person_verdict"]
                                    is not None})
    return EvaluationReceipt(
        run_id=rid, procedure_id=new["procedure_id"], evaluator=name,
        evaluator_verdict=j.verdict, score=score, reason=j.reason,
        verdict=new["person_verdict"] or new["evaluator_verdict"] or new["agent_verdict"],
        person_verdict=new["person_verdict"], success=new["success"], judged=new["judged"],
        counters=Counters(**{k: counters[k] for k in Counters.model_fields}), audit_seq=seq)


# -- prune -----------------------------------------------------------------------------
def prune(rt: Runtime, who: Principal, *, runs_days: float | None = None,
          unused_days: float | None = None, dry_run: bool = False,
          now: datetime | None = None, request_id: str | None = None) -> PruneResult:
    """The prune policy (module docstring); days default to the settings
    ``procedure_prune_runs_days`` / ``procedure_prune_unused_days``. Needs
    ``memory:forget`` and a key not limited to a scope or subject.

    Raises:
        ValidationError: neither limit given nor configured, or a limit not > 0.
    """
    who.require("memory:forget")
    who.require_unlimited("prune")
    runs_days = runs_days if runs_days is not None else rt.settings.procedure_prune_runs_days
    unused_days = (unused_days if unused_days is not None
                   else rt.settings.procedure_prune_unused_days)
    for field, value in (("runs_days", runs_days), ("unused_days", unused_days)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 < value <= 1e6):
            raise ValidationError(f"{field}: must be a number of days in (0, 1000000]",
                                  field=field)
    if runs_days is None and unused_days is None:
        raise ValidationError("runs_days: give runs_days or unused_days (or set "
                              "MNEMOVAULT_PROCEDURE_PRUNE_RUNS_DAYS / _UNUSED_DAYS)",
                              field="runs_days")
    now = now or datetime.now(UTC)
    deleted: list[uuid.UUID] = []
    n_runs, seq = 0, None
    with rt.db.transaction(who.tenant) as conn:
        if runs_days is not None:
            n_runs = store.old_runs(conn, who.tenant, now - timedelta(days=runs_days),
                                    delete=not dry_run)
        if unused_days is not None:
            stale = set(store.unused(conn, who.tenant, now - timedelta(days=unused_days)))
            families: set[uuid.UUID] = set()
            for pid in sorted(stale):
                if pid in families:
                    continue
                family = memory_store.versions_closure(conn, who.tenant, {pid})
                if family <= stale:
                    families |= family
            deleted = sorted(families)
            if deleted and not dry_run:
                forget_mod.forget(conn, tenant=who.tenant, ids=deleted, actor=who.actor,
                                  agent=who.agent, trigger="prune", request_id=request_id,
                                  pii=rt.pii if rt.settings.pii_pseudonymize else None)
        if not dry_run and (n_runs or deleted):
            seq = audit.append(conn, tenant=who.tenant, operation="PROCEDURE_PRUNE",
                               actor=who.actor, agent=who.agent,
                               memory_ids=[str(i) for i in deleted[:10]], trigger="prune",
                               request_id=request_id,
                               details={"runs_deleted": n_runs,
                                        "procedures_deleted": len(deleted),
                                        "runs_days": runs_days, "unused_days": unused_days})
    return PruneResult(dry_run=dry_run, runs_days=runs_days, unused_days=unused_days,
                       runs_deleted=n_runs, procedures_deleted=deleted, audit_seq=seq)
