"""Procedural memory over HTTP (:mod:`mnemovault.procedures`): capture, read, recall,
runs, feedback, evaluations, versions, prune. Permissions: ``memory:write`` to capture,
version, record runs, give feedback and evaluate runs; ``memory:read`` to read and recall;
``memory:forget`` (and a key not limited to a scope or subject) to prune. A question or
answer sent here is embedded or shown to the evaluator, never stored."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.procedures.models import (
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
    VersionInput,
)
from mnemovault.vault import MemoryVault


class ProcedureRecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=10_000)
    scope: str = Field(min_length=1, max_length=200)
    k: StrictInt = Field(default=5, ge=1, le=100)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None, max_length=32)


class ProcedureRecallResponse(BaseModel):
    hits: list[ProcedureHit]


class PruneRequest(BaseModel):
    """Days (None: the configured default); ``dry_run`` counts, deleting nothing."""

    model_config = ConfigDict(extra="forbid")

    runs_days: StrictFloat | StrictInt | None = Field(default=None, gt=0, le=1_000_000)
    unused_days: StrictFloat | StrictInt | None = Field(default=None, gt=0, le=1_000_000)
    dry_run: StrictBool = False


def procedures_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(tags=["procedures"])
    Auth = Annotated[Principal, Depends(principal)]

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    @router.post("/v1/procedures", status_code=201, response_model=ProcedureReceipt)
    def capture(body: ProcedureInput, who: Auth, request: Request) -> ProcedureReceipt:
        """Capture a procedure: its question is embedded (never stored), its name and
        intent default to the tool names and the intent extractor's label."""
        return vault.procedures.capture(body, principal=who, request_id=rid(request))

    @router.get("/v1/procedures/{procedure_id}", response_model=Procedure)
    def get(procedure_id: uuid.UUID, who: Auth,
            runs: Annotated[int, Query(ge=0, le=100)] = 0) -> Procedure:
        """One procedure, whatever its status, with its newest ``runs`` runs."""
        return vault.procedures.get(procedure_id, runs=runs, principal=who)

    @router.post("/v1/procedures/recall", response_model=ProcedureRecallResponse)
    def recall(body: ProcedureRecallRequest, who: Auth) -> ProcedureRecallResponse:
        """The best live procedures for a question: similarity, track record, freshness."""
        return ProcedureRecallResponse(hits=vault.procedures.recall(
            body.question, scope=body.scope, k=body.k, subject=body.subject, tags=body.tags,
            principal=who))

    @router.post("/v1/procedures/{procedure_id}/runs", status_code=201,
                 response_model=RunReceipt)
    def record_run(procedure_id: uuid.UUID, body: RunInput, who: Auth,
                   request: Request) -> RunReceipt:
        """Record a run (a verdict is required: the agent's, or an evaluator's)."""
        return vault.procedures.record_run(procedure_id, body, principal=who,
                                           request_id=rid(request))

    @router.post("/v1/runs/{run_id}/feedback", response_model=Run)
    def feedback(run_id: uuid.UUID, body: FeedbackInput, who: Auth,
                 request: Request) -> Run:
        """Scores in [0, 1] and an optional verdict; a person's verdict (any key but a
        service key) overrides the evaluator's and the agent's."""
        return vault.procedures.feedback(run_id, body, principal=who,
                                         request_id=rid(request))

    @router.post("/v1/runs/{run_id}/evaluate", response_model=EvaluationReceipt)
    def evaluate(run_id: uuid.UUID, body: EvaluationInput, who: Auth,
                 request: Request) -> EvaluationReceipt:
        """Judge a recorded run with a named evaluator (``rule``, ``model`` or a registered
        one; default: the setting, else ``rule``) from its question and answer, which
        are pseudonymised for the evaluator and never stored. Stores the evaluator's
        name, verdict and score on the run; a person's verdict stays the effective one."""
        return vault.procedures.evaluate(run_id, body, principal=who,
                                         request_id=rid(request))

    @router.post("/v1/procedures/{procedure_id}/versions", status_code=201,
                 response_model=ProcedureReceipt)
    def new_version(procedure_id: uuid.UUID, body: VersionInput, who: Auth,
                    request: Request) -> ProcedureReceipt:
        """A new version (linked by parent id; passes the review gate)."""
        return vault.procedures.new_version(procedure_id, body, principal=who,
                                            request_id=rid(request))

    @router.post("/v1/procedures/prune", response_model=PruneResult)
    def prune(body: PruneRequest, who: Auth, request: Request) -> PruneResult:
        """Delete runs older than ``runs_days`` and unpinned procedures unused for
        ``unused_days`` (``dry_run``: count only)."""
        return vault.procedures.prune(runs_days=body.runs_days, unused_days=body.unused_days,
                                      dry_run=body.dry_run, principal=who,
                                      request_id=rid(request))

    return router
