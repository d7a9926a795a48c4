"""Typed inputs and outputs of procedural memory (SPEC section 9).

Inputs refuse unknown fields; every string passes :mod:`mnemovault.validation`'s rules.
The steps graph's structure (unique node ids, no dangling edge, bounded size) is checked by
:func:`mnemovault.procedures.steps.check`, which names the offending field."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from mnemovault.models import Provenance
from mnemovault.validation import MAX_NAME_CHARS, MAX_QUERY_CHARS, Timestamp, check_text

Verdict = Literal["success", "failure"]
Status = Literal["active", "pending_review", "superseded"]

MAX_NODES = 100
MAX_EDGES = 400
MAX_ARGS = 32
IDENT = r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$"
"""Node ids, tool names and argument names: identifiers (no spaces, no personal values)."""

Ident = Annotated[str, Field(pattern=IDENT)]
Unit = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1)]


def _name(v: str | None, max_len: int = MAX_NAME_CHARS) -> str | None:
    if v is None:
        return v
    check_text(v, max_len=max_len, allow_newlines=False)
    if not v.strip():
        raise ValueError("must not be blank")
    return v


def _text(v: str | None) -> str | None:
    if v is None:
        return v
    check_text(v, max_len=MAX_QUERY_CHARS, allow_newlines=True)
    if not v.strip():
        raise ValueError("must not be blank")
    return v


class StepNode(BaseModel):
    """One step: a tool call. ``id`` is the node's identifier within the graph, ``tool``
    the tool's name, ``args`` the names (never the values) of the arguments it was called
    with; ``name`` an optional human label (free text: pseudonymised)."""

    model_config = ConfigDict(extra="forbid")

    id: Ident
    tool: Ident
    args: list[Ident] = Field(default_factory=list, max_length=MAX_ARGS)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)

    @field_validator("name")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return _name(v)


class StepEdge(BaseModel):
    """``source`` runs before ``target``, when ``condition`` (free text, optional:
    pseudonymised) holds."""

    model_config = ConfigDict(extra="forbid")

    source: Ident
    target: Ident
    condition: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)

    @field_validator("condition")
    @classmethod
    def _cond(cls, v: str | None) -> str | None:
        return _name(v)


MAX_EXPECT_CHARS = 200


class Steps(BaseModel):
    """The steps graph: 1..100 nodes, at most 400 edges between them; ``expect`` (optional)
    a regular expression (Python ``re`` syntax, searched with the ``regex`` module under a
    time limit) that a good answer matches, for
    the ``rule`` evaluator (:mod:`mnemovault.procedures.evaluators`). It is matched against
    the pseudonymised answer, so it may not hold a personal value (refused at capture)."""

    model_config = ConfigDict(extra="forbid")

    nodes: list[StepNode] = Field(min_length=1, max_length=MAX_NODES)
    edges: list[StepEdge] = Field(default_factory=list, max_length=MAX_EDGES)
    expect: str | None = Field(default=None, min_length=1, max_length=MAX_EXPECT_CHARS)

    @field_validator("expect")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is None:
            return v
        _name(v, max_len=MAX_EXPECT_CHARS)
        import regex  # here: opening the vault need not import it

        try:
            regex.compile(v)
        except regex.error as exc:
            raise ValueError(f"not a valid regular expression ({exc.msg})") from None
        except (OverflowError, RecursionError, ValueError):
            raise ValueError("not a valid regular expression (too large)") from None
        return v


class ProcedureInput(BaseModel):
    """A procedure to capture. ``question`` is embedded (pseudonymised first) and never
    stored; ``name`` defaults to the tool names in step order, ``intent`` to the intent
    extractor's label (never the question's text)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    scope: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    steps: Steps
    subject: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    intent: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str) -> str:
        return _text(v) or v

    @field_validator("scope", "subject", "name", "intent")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _name(v)


class VersionInput(BaseModel):
    """A new version of a procedure: new steps; ``question`` (optional) re-embeds it,
    otherwise the parent's question embedding is kept; name and intent as for a capture
    (the intent defaults to the parent's)."""

    model_config = ConfigDict(extra="forbid")

    steps: Steps
    question: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    intent: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str | None) -> str | None:
        return _text(v)

    @field_validator("name", "intent")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _name(v)


class RunInput(BaseModel):
    """A run of a procedure: ``verdict`` is the agent's own; an evaluator's verdict and
    score come from ``evaluator``/``evaluator_verdict``/``score``, or from the configured
    evaluator, which judges ``question`` and ``answer`` (seen, pseudonymised, never
    stored). At least one verdict is required."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict | None = None
    duration_ms: StrictFloat | StrictInt | None = Field(default=None, ge=0, le=1e12)
    ran_at: Timestamp | None = None
    evaluator: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    evaluator_verdict: Verdict | None = None
    score: Unit | None = None
    subject: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    question: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS)
    answer: str | None = Field(default=None, min_length=1, max_length=100_000)
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("evaluator", "subject")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _name(v)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str | None) -> str | None:
        return _text(v)

    @field_validator("answer")
    @classmethod
    def _answer(cls, v: str | None) -> str | None:
        if v is not None:
            check_text(v, max_len=100_000, allow_newlines=True)
        return v


class EvaluationInput(BaseModel):
    """What an evaluator judges a recorded run by: the run's ``question`` and ``answer``
    (pseudonymised before any evaluator sees them; never stored) and the evaluator's
    registered name (None: the setting ``procedure_evaluator``, else ``rule``)."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    answer: str = Field(min_length=1, max_length=100_000)
    evaluator: str | None = Field(default=None, min_length=1, max_length=64)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str) -> str:
        return _text(v) or v

    @field_validator("answer")
    @classmethod
    def _answer(cls, v: str) -> str:
        return check_text(v, max_len=100_000, allow_newlines=True)

    @field_validator("evaluator")
    @classmethod
    def _evaluator(cls, v: str | None) -> str | None:
        return _name(v, max_len=64)


class FeedbackInput(BaseModel):
    """Feedback on a run: up to three scores in [0, 1] and an optional verdict (a
    person's overrides the evaluator's and the agent's). At least one field."""

    model_config = ConfigDict(extra="forbid")

    accuracy: Unit | None = None
    efficiency: Unit | None = None
    satisfaction: Unit | None = None
    verdict: Verdict | None = None


class Feedback(BaseModel):
    accuracy: float | None = None
    efficiency: float | None = None
    satisfaction: float | None = None


class Run(BaseModel):
    """A recorded run. ``verdict`` is the effective one (person, else evaluator, else
    agent); ``judged``: a person or an evaluator gave a verdict."""

    id: uuid.UUID
    procedure_id: uuid.UUID
    scope: str
    subject: str | None
    ran_at: datetime
    duration_ms: float | None
    verdict: Verdict | None
    agent_verdict: Verdict | None
    evaluator: str | None
    evaluator_verdict: Verdict | None
    score: float | None
    person_verdict: Verdict | None
    success: bool
    judged: bool
    feedback: Feedback
    feedback_at: datetime | None
    provenance: dict[str, Any]

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Run:
        return cls(
            id=r["id"], procedure_id=r["procedure_id"], scope=r["scope"],
            subject=r["subject_id"], ran_at=r["ran_at"], duration_ms=r["duration_ms"],
            verdict=r["person_verdict"] or r["evaluator_verdict"] or r["agent_verdict"],
            agent_verdict=r["agent_verdict"], evaluator=r["evaluator"],
            evaluator_verdict=r["evaluator_verdict"], score=r["score"],
            person_verdict=r["person_verdict"], success=r["success"], judged=r["judged"],
            feedback=Feedback(accuracy=r["feedback_accuracy"],
                              efficiency=r["feedback_efficiency"],
                              satisfaction=r["feedback_satisfaction"]),
            feedback_at=r["feedback_at"], provenance=r["provenance"])


class Counters(BaseModel):
    runs: int
    successes: int
    judged_runs: int
    judged_successes: int
    first_used: datetime | None
    last_used: datetime | None


class Procedure(BaseModel):
    """A stored procedure (free text as stored: placeholders, ``[erased]`` once shredded).
    ``success_rate`` is the smoothed one recall ranks by (Beta posterior mean)."""

    id: uuid.UUID
    scope: str
    subject: str | None
    name: str
    intent: str
    steps: Steps
    status: Status
    version: int
    parent_id: uuid.UUID | None
    pinned: bool
    archived: bool
    created_at: datetime
    updated_at: datetime
    provenance: dict[str, Any]
    counters: Counters
    success_rate: float
    recent_runs: list[Run] = Field(default_factory=list)


class ProcedureHit(BaseModel):
    """One procedure recall result: ``score`` = w_sim · similarity + w_track ·
    track_record + w_fresh · freshness (weights: settings ``procedure_*_weight``)."""

    procedure: Procedure
    score: float
    similarity: float
    track_record: float
    freshness: float


class ProcedureReceipt(BaseModel):
    """What capture and new_version return."""

    id: uuid.UUID
    scope: str
    status: Status
    version: int
    parent_id: uuid.UUID | None
    superseded: uuid.UUID | None = None
    name: str
    intent: str
    placeholders: list[str] = Field(default_factory=list)
    audit_seq: int


class RunReceipt(BaseModel):
    """What record_run returns: the run, its effective outcome, the procedure's counters
    after it, the audit sequence number."""

    run_id: uuid.UUID
    procedure_id: uuid.UUID
    verdict: Verdict | None
    success: bool
    judged: bool
    evaluator: str | None
    score: float | None
    counters: Counters
    audit_seq: int


class EvaluationReceipt(BaseModel):
    """What an evaluation returns: the evaluator's name, verdict, score (and ``reason``,
    e.g. the rule that decided; returned, never stored), the run's effective verdict after
    it (a person's, when there is one, stays: ``person_verdict``), the procedure's
    counters, the audit sequence number."""

    run_id: uuid.UUID
    procedure_id: uuid.UUID
    evaluator: str
    evaluator_verdict: Verdict
    score: float | None
    reason: str | None = None
    verdict: Verdict | None
    person_verdict: Verdict | None
    success: bool
    judged: bool
    counters: Counters
    audit_seq: int


class PruneResult(BaseModel):
    """What a prune removed (with ``dry_run``: would remove): runs older than
    ``runs_days``; procedures unused for ``unused_days`` (pinned exempt; a procedure goes
    only with all its versions), through the forget path."""

    dry_run: bool
    runs_days: float | None
    unused_days: float | None
    runs_deleted: int
    procedures_deleted: list[uuid.UUID]
    audit_seq: int | None
