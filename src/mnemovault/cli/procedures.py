"""``mnemovault procedure``: procedural memory (:mod:`mnemovault.procedures`)::

    mnemovault procedure capture --scope ops --question "book a flight to Oslo" \\
        --steps '{"nodes": [{"id": "a", "tool": "search_flights"},
                            {"id": "b", "tool": "book_flight"}],
                  "edges": [{"source": "a", "target": "b"}]}'      # or --steps @steps.json
    mnemovault procedure recall "fly me to Bergen" --scope ops -k 3
    mnemovault procedure show ID [--runs 10]
    mnemovault procedure run ID --verdict success --duration-ms 850
    mnemovault procedure evaluate RUN_ID --question "book a flight to Oslo" \\
        --answer "Booked SK4321" [--evaluator rule]             # or --answer @answer.txt
    mnemovault procedure feedback RUN_ID --verdict failure --accuracy 0.2
    mnemovault procedure version ID --steps @v2.json
    mnemovault procedure prune --runs-days 90 --unused-days 180 [--dry-run]

Every command takes ``--json``. The question is embedded, never stored. The local operator
is a person, so ``feedback`` records a person's verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _vault, out
from mnemovault.errors import MnemoError, ValidationError

group = typer.Typer(help="Procedural memory: capture, recall, runs, feedback, prune.",
                    no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def _steps(value: str) -> Any:
    """``--steps``: JSON text, or ``@path`` of a JSON file."""
    try:
        text = Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value
        return json.loads(text)
    except OSError:
        raise ValidationError("steps: cannot read the file", field="steps") from None
    except ValueError:
        raise ValidationError("steps: not valid JSON", field="steps") from None


def _show(obj: Any, as_json: bool, line: str) -> None:
    if as_json:
        _emit_json(obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj)
    else:
        out.print(line, highlight=False, markup=False, soft_wrap=True)


@group.command("capture")
def capture(
    ctx: typer.Context,
    question: Annotated[str, typer.Option(help="The task's question (embedded, never "
                                               "stored).")],
    steps: Annotated[str, typer.Option(help="The steps graph: JSON, or @file.")],
    scope: Annotated[str, typer.Option(help="Scope.")] = "default",
    subject: Annotated[str | None, typer.Option(help="The subject.")] = None,
    name: Annotated[str | None, typer.Option(help="Name (default: the tool names).")] = None,
    intent: Annotated[str | None, typer.Option(help="Intent label (default: extracted).")]
    = None,
    tag: Annotated[list[str] | None, typer.Option(help="A tag (repeatable).")] = None,
    as_json: Json = False,
) -> None:
    """Capture a procedure (how a task was solved)."""
    try:
        item = {"question": question, "scope": scope, "subject": subject, "name": name,
                "intent": intent, "steps": _steps(steps),
                "provenance": {"source": "cli", "tags": tag or []}}
        with _vault(ctx) as vault:
            r = vault.procedures.capture({k: v for k, v in item.items() if v is not None},
                                         trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    _show(r, as_json, f"{r.id}  {r.status}  {r.name}  [{r.intent}]")


@group.command("version")
def version(
    ctx: typer.Context,
    procedure_id: Annotated[str, typer.Argument(help="The procedure to version.")],
    steps: Annotated[str, typer.Option(help="The new steps graph: JSON, or @file.")],
    question: Annotated[str | None, typer.Option(help="Re-embed with this question.")]
    = None,
    name: Annotated[str | None, typer.Option(help="Name.")] = None,
    intent: Annotated[str | None, typer.Option(help="Intent label.")] = None,
    as_json: Json = False,
) -> None:
    """Make a new version of a procedure (it supersedes the parent once active)."""
    try:
        item = {"steps": _steps(steps), "question": question, "name": name, "intent": intent}
        with _vault(ctx, create=False) as vault:
            r = vault.procedures.new_version(
                procedure_id, {k: v for k, v in item.items() if v is not None}, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    _show(r, as_json, f"{r.id}  v{r.version}  {r.status}  (parent {r.parent_id})")


@group.command("recall")
def recall(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The task, in words.")],
    scope: Annotated[str, typer.Option(help="Scope.")] = "default",
    k: Annotated[int, typer.Option("-k", help="How many (1-100).")] = 5,
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
    as_json: Json = False,
) -> None:
    """The best live procedures for a task (similarity, track record, freshness)."""
    try:
        with _vault(ctx, create=False) as vault:
            hits = vault.procedures.recall(question, scope=scope, k=k, subject=subject)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json([h.model_dump(mode="json") for h in hits])
        return
    for h in hits:
        c = h.procedure.counters
        out.print(f"{h.score:.3f}  {h.procedure.id}  {h.procedure.name}  "
                  f"[{h.procedure.intent}]  {c.successes}/{c.runs} ok", highlight=False,
                  markup=False, soft_wrap=True)


@group.command("show")
def show(
    ctx: typer.Context,
    procedure_id: Annotated[str, typer.Argument(help="Procedure id.")],
    runs: Annotated[int, typer.Option(help="Also the newest N runs (0-100).")] = 0,
    as_json: Json = False,
) -> None:
    """One procedure: steps, status, counters (and its newest runs)."""
    try:
        with _vault(ctx, create=False) as vault:
            p = vault.procedures.get(procedure_id, runs=runs)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(p.model_dump(mode="json"))
        return
    c = p.counters
    out.print(f"{p.id}  v{p.version}  {p.status}  {p.name}  [{p.intent}]\n"
              f"runs {c.runs}, successes {c.successes}, judged {c.judged_successes}/"
              f"{c.judged_runs}, success rate {p.success_rate:.2f}", highlight=False, markup=False,
              soft_wrap=True)
    for n in p.steps.nodes:
        out.print(f"  {n.id}: {n.tool}({', '.join(n.args)})", highlight=False, markup=False)
    for e in p.steps.edges:
        cond = f"  if {e.condition}" if e.condition else ""
        out.print(f"  {e.source} -> {e.target}{cond}", highlight=False, markup=False)
    for r in p.recent_runs:
        out.print(f"  run {r.id}  {r.ran_at:%Y-%m-%d %H:%M}  {r.verdict}", highlight=False,
                  markup=False)


@group.command("run")
def run(
    ctx: typer.Context,
    procedure_id: Annotated[str, typer.Argument(help="Procedure id.")],
    verdict: Annotated[str | None, typer.Option(help="success or failure (the agent's).")]
    = None,
    duration_ms: Annotated[float | None, typer.Option(help="Duration in ms.")] = None,
    evaluator: Annotated[str | None, typer.Option(help="Evaluator name.")] = None,
    evaluator_verdict: Annotated[str | None, typer.Option(help="The evaluator's verdict.")]
    = None,
    score: Annotated[float | None, typer.Option(help="The evaluator's score in [0, 1].")]
    = None,
    subject: Annotated[str | None, typer.Option(help="Whom the run was for.")] = None,
    as_json: Json = False,
) -> None:
    """Record a run of a procedure."""
    try:
        item = {"verdict": verdict, "duration_ms": duration_ms, "evaluator": evaluator,
                "evaluator_verdict": evaluator_verdict, "score": score, "subject": subject,
                "provenance": {"source": "cli"}}
        with _vault(ctx, create=False) as vault:
            r = vault.procedures.record_run(
                procedure_id, {k: v for k, v in item.items() if v is not None}, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    _show(r, as_json, f"{r.run_id}  {r.verdict}  runs {r.counters.runs}, successes "
                      f"{r.counters.successes}")


def _text_arg(value: str, field: str) -> str:
    """``--question`` / ``--answer``: the text, or ``@path`` of a UTF-8 file."""
    if not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise ValidationError(f"{field}: cannot read the file", field=field) from None


@group.command("evaluate")
def evaluate(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    question: Annotated[str, typer.Option(help="The run's question, or @file (judged, "
                                               "never stored).")],
    answer: Annotated[str, typer.Option(help="The run's answer, or @file (judged, never "
                                             "stored).")],
    evaluator: Annotated[str | None, typer.Option(
        help="Evaluator name: rule, model or a registered one (default: the setting "
             "MNEMOVAULT_PROCEDURE_EVALUATOR, else rule).")] = None,
    as_json: Json = False,
) -> None:
    """Judge a recorded run with an evaluator; a person's verdict still wins."""
    try:
        item = {"question": _text_arg(question, "question"),
                "answer": _text_arg(answer, "answer"), "evaluator": evaluator}
        with _vault(ctx, create=False) as vault:
            r = vault.procedures.evaluate(run_id, {k: v for k, v in item.items()
                                                   if v is not None}, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    score = "-" if r.score is None else f"{r.score:.2f}"
    _show(r, as_json, f"{r.run_id}  {r.evaluator}: {r.evaluator_verdict} (score {score}, "
                      f"{r.reason or '-'})  effective {r.verdict}")


@group.command("feedback")
def feedback(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    verdict: Annotated[str | None, typer.Option(help="success or failure (a person's).")]
    = None,
    accuracy: Annotated[float | None, typer.Option(help="Score in [0, 1].")] = None,
    efficiency: Annotated[float | None, typer.Option(help="Score in [0, 1].")] = None,
    satisfaction: Annotated[float | None, typer.Option(help="Score in [0, 1].")] = None,
    as_json: Json = False,
) -> None:
    """Give feedback on a run; your verdict overrides the evaluator's and the agent's."""
    try:
        item = {"verdict": verdict, "accuracy": accuracy, "efficiency": efficiency,
                "satisfaction": satisfaction}
        with _vault(ctx, create=False) as vault:
            r = vault.procedures.feedback(run_id, {k: v for k, v in item.items()
                                                   if v is not None}, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    _show(r, as_json, f"{r.id}  verdict {r.verdict} (person {r.person_verdict}, evaluator "
                      f"{r.evaluator_verdict}, agent {r.agent_verdict})")


@group.command("prune")
def prune(
    ctx: typer.Context,
    runs_days: Annotated[float | None, typer.Option(help="Delete runs older than this.")]
    = None,
    unused_days: Annotated[float | None, typer.Option(
        help="Forget unpinned procedures unused this long.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count only.")] = False,
    as_json: Json = False,
) -> None:
    """Apply the prune policy (runs older than N days, procedures unused for M days)."""
    try:
        with _vault(ctx, create=False) as vault:
            r = vault.procedures.prune(runs_days=runs_days, unused_days=unused_days,
                                       dry_run=dry_run)
    except MnemoError as exc:
        _fail(exc)
        return
    verb = "would delete" if r.dry_run else "deleted"
    _show(r, as_json, f"{verb} {r.runs_deleted} runs and {len(r.procedures_deleted)} "
                      "procedures")


def register(app: typer.Typer) -> None:
    """Add the ``procedure`` group to ``app``."""
    app.add_typer(group, name="procedure")
