"""``mv.procedures``: procedural memory (:mod:`mnemovault.procedures.service`)::

    r = mv.procedures.capture({"question": "book me a flight to Oslo", "scope": "ops",
                               "steps": {"nodes": [{"id": "a", "tool": "search_flights"},
                                                   {"id": "b", "tool": "book_flight"}],
                                         "edges": [{"source": "a", "target": "b"}]}})
    run = mv.procedures.record_run(r.id, {"verdict": "success", "duration_ms": 850})
    ev = mv.procedures.evaluate(run.run_id, {"question": "book me a flight to Oslo",
                                             "answer": "Booked SK4321."}, evaluator="rule")
    mv.procedures.feedback(run.run_id, {"accuracy": 1.0, "verdict": "success"})
    hits = mv.procedures.recall("fly me to Bergen", scope="ops", k=3)
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mnemovault.auth import Principal
from mnemovault.facade import Section
from mnemovault.procedures import evaluators, plugins, service
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

Id = uuid.UUID | str


class ProceduresSection(Section):
    """Capture, version, run, judge, recall and prune procedures."""

    def capture(self, item: ProcedureInput | dict[str, Any], *,
                principal: Principal | None = None, request_id: str | None = None,
                trigger: str = "api") -> ProcedureReceipt:
        """Capture a procedure; see :func:`mnemovault.procedures.service.capture`."""
        return service.capture(self.rt, self._who(principal), item, request_id=request_id,
                               trigger=trigger)

    def new_version(self, procedure_id: Id, item: VersionInput | dict[str, Any], *,
                    principal: Principal | None = None, request_id: str | None = None,
                    trigger: str = "api") -> ProcedureReceipt:
        """A new version; see :func:`mnemovault.procedures.service.new_version`."""
        return service.new_version(self.rt, self._who(principal), procedure_id, item,
                                   request_id=request_id, trigger=trigger)

    def get(self, procedure_id: Id, *, runs: int = 0,
            principal: Principal | None = None) -> Procedure:
        """One procedure (and its newest ``runs`` runs); raises ``NotFound``."""
        return service.get(self.rt, self._who(principal), procedure_id, runs=runs)

    def recall(self, question: str, *, scope: str, k: int = 5, subject: str | None = None,
               tags: Sequence[str] | None = None,
               principal: Principal | None = None) -> list[ProcedureHit]:
        """The best live procedures for ``question``; see :func:`~mnemovault.procedures.
        service.recall`."""
        return service.recall(self.rt, self._who(principal), question, scope=scope, k=k,
                              subject=subject, tags=tags)

    def record_run(self, procedure_id: Id, item: RunInput | dict[str, Any], *,
                   evaluator: Any = None, principal: Principal | None = None,
                   request_id: str | None = None, trigger: str = "api") -> RunReceipt:
        """Record a run; see :func:`mnemovault.procedures.service.record_run`."""
        return service.record_run(self.rt, self._who(principal), procedure_id, item,
                                  evaluator=evaluator, request_id=request_id, trigger=trigger)

    def feedback(self, run_id: Id, item: FeedbackInput | dict[str, Any], *,
                 as_agent: bool = False, principal: Principal | None = None,
                 request_id: str | None = None, trigger: str = "api") -> Run:
        """Feedback on a run; see :func:`mnemovault.procedures.service.feedback`."""
        return service.feedback(self.rt, self._who(principal), run_id, item,
                                as_agent=as_agent, request_id=request_id, trigger=trigger)

    def evaluate(self, run_id: Id, item: EvaluationInput | dict[str, Any], *,
                 evaluator: str | None = None, principal: Principal | None = None,
                 request_id: str | None = None, trigger: str = "api") -> EvaluationReceipt:
        """Judge a recorded run with a named evaluator; see
        :func:`mnemovault.procedures.service.evaluate`."""
        return service.evaluate(self.rt, self._who(principal), run_id, item,
                                evaluator=evaluator, request_id=request_id, trigger=trigger)

    def register_evaluator(self, name: str, evaluator: Any) -> plugins.Plugins:
        """Register a named evaluator for this vault (None: unregister);
        :func:`mnemovault.procedures.plugins.register`."""
        return plugins.register(self.rt, name, evaluator)

    def evaluators(self) -> list[str]:
        """The evaluator names this vault knows (built-in and registered)."""
        return evaluators.names(self.rt)

    def prune(self, *, runs_days: float | None = None, unused_days: float | None = None,
              dry_run: bool = False, now: datetime | None = None,
              principal: Principal | None = None,
              request_id: str | None = None) -> PruneResult:
        """The prune policy; see :func:`mnemovault.procedures.service.prune`."""
        return service.prune(self.rt, self._who(principal), runs_days=runs_days,
                             unused_days=unused_days, dry_run=dry_run, now=now,
                             request_id=request_id)

    def configure(self, *, intent: Any = plugins._KEEP,
                  evaluator: Any = plugins._KEEP) -> plugins.Plugins:
        """Set the intent extractor and/or the run evaluator of this vault
        (:mod:`mnemovault.procedures.plugins`)."""
        return plugins.configure(self.rt, intent=intent, evaluator=evaluator)
