"""The pluggable parts of procedural memory: the intent extractor and the run evaluator.

- An **intent extractor** maps a capture's question and steps to a short label. The
  default, :class:`KeywordIntent`, picks one label of a fixed list by keywords in the
  question and the tool names (``unspecified`` when none matches): its output is never
  the question's text.
- An **evaluator** judges a run from its question and answer (both pseudonymised first:
  placeholders, as every model sees them), which it sees and which are never stored. It
  returns a :class:`Judgement`; an evaluator that raises refuses the run as
  ``Unavailable`` (nothing is stored). None is configured by default for
  ``record_run``; named evaluators (the built-in ``rule`` and ``model``, and any
  registered with :func:`register`) judge recorded runs
  (:mod:`mnemovault.procedures.evaluators`).

Both are set per open vault with :func:`configure` (``mv.procedures.configure(...)``);
named evaluators with :func:`register` (``mv.procedures.register_evaluator(...)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from mnemovault.procedures.models import Steps, Verdict
from mnemovault.runtime import Runtime


@dataclass(frozen=True)
class Judgement:
    """An evaluator's verdict on a run, an optional score in [0, 1] and an optional short
    ``reason`` (returned to the caller of an evaluation, never stored)."""

    verdict: Verdict
    score: float | None = None
    reason: str | None = None


class Evaluator(Protocol):
    """Judges a run (see the module docstring); ``name`` is recorded with the run."""

    name: str

    def __call__(self, question: str, answer: str, steps: Steps) -> Judgement: ...


class IntentExtractor(Protocol):
    def __call__(self, question: str, steps: Steps) -> str: ...


LABELS: dict[str, tuple[str, ...]] = {
    "travel": ("flight", "hotel", "train", "trip", "travel", "booking", "airport", "fly"),
    "scheduling": ("meeting", "calendar", "schedule", "appointment", "reschedule", "event",
                   "remind", "reminder"),
    "communication": ("email", "mail", "message", "send", "reply", "slack", "notify", "sms"),
    "shopping": ("order", "buy", "purchase", "cart", "shop", "refund", "return", "delivery"),
    "finance": ("invoice", "payment", "pay", "expense", "budget", "bank", "transfer", "tax"),
    "research": ("search", "find", "lookup", "look", "research", "summarise", "summarize",
                 "compare", "web"),
    "data": ("report", "chart", "sql", "query", "spreadsheet", "csv", "analyse", "analyze",
             "dashboard", "metric"),
    "files": ("file", "folder", "document", "upload", "download", "pdf", "drive", "backup"),
    "code": ("code", "bug", "deploy", "build", "test", "commit", "repository", "repo",
             "pull", "merge"),
    "support": ("ticket", "support", "complaint", "issue", "help", "account", "password",
                "reset"),
}
"""The default extractor's labels and their keywords."""

_WORD = re.compile(r"[a-z]+")


class KeywordIntent:
    """The default intent extractor: the label of :data:`LABELS` with most keyword hits
    in the question's words and the tool names (ties: the earlier label), else
    ``unspecified``."""

    def __call__(self, question: str, steps: Steps) -> str:
        words = _WORD.findall(question.lower())
        for node in steps.nodes:
            words += _WORD.findall(node.tool.lower().replace("_", " "))
        best, hits = "unspecified", 0
        for label, keys in LABELS.items():
            n = sum(1 for w in words if w in keys or w.rstrip("s") in keys)
            if n > hits:
                best, hits = label, n
        return best


@dataclass
class Plugins:
    intent: IntentExtractor
    evaluator: Evaluator | None = None
    named: dict[str, Evaluator] = field(default_factory=dict)
    """Evaluators by name: registered ones, and the built-ins once first used."""


_ATTR = "_mnemovault_procedure_plugins"


def plugins(rt: Runtime) -> Plugins:
    """The plugins of this runtime (the defaults until :func:`configure`)."""
    found = getattr(rt, _ATTR, None)
    if not isinstance(found, Plugins):
        found = Plugins(intent=KeywordIntent())
        setattr(rt, _ATTR, found)
    return found


_KEEP = object()


def configure(rt: Runtime, *, intent: IntentExtractor | object | None = _KEEP,
              evaluator: Evaluator | object | None = _KEEP) -> Plugins:
    """Set the intent extractor (None: the default) and/or the evaluator (None: none)."""
    p = plugins(rt)
    if intent is not _KEEP:
        p.intent = intent if intent is not None else KeywordIntent()  # type: ignore[assignment]
    if evaluator is not _KEEP:
        p.evaluator = evaluator  # type: ignore[assignment]
    return p


def register(rt: Runtime, name: str, evaluator: Evaluator | None) -> Plugins:
    """Register ``evaluator`` under ``name`` for this runtime (None: unregister, so a
    built-in of that name is used again). The name is recorded on every run it judges.

    Raises:
        ValidationError: a name that is not an identifier (``IDENT``), or an evaluator
            that is not callable.
    """
    from mnemovault.errors import ValidationError
    from mnemovault.procedures.models import IDENT

    if not isinstance(name, str) or not re.fullmatch(IDENT, name):
        raise ValidationError("evaluator: a name is an identifier (letters, digits, "
                              "_.:/-, at most 64 characters)", field="evaluator")
    p = plugins(rt)
    if evaluator is None:
        p.named.pop(name, None)
    elif not callable(evaluator):
        raise ValidationError("evaluator: must be callable (question, answer, steps) -> "
                              "Judgement", field="evaluator")
    else:
        p.named[name] = evaluator
    return p
