"""Procedures and runs as callers see them: stored free text (placeholders), with every
shredded placeholder shown ``[erased]`` (SPEC section 3); never the original values."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from mnemovault.pii.vault import PLACEHOLDER_RE
from mnemovault.pii.vault import render as render_text
from mnemovault.procedures import ranking
from mnemovault.procedures.models import Counters, Procedure, Run, Steps
from mnemovault.runtime import Runtime

Conn = psycopg.Connection[Any]
_PROC_TEXT = ("scope", "subject_id", "name", "intent")
_RUN_TEXT = ("scope", "subject_id", "evaluator")


def _erase(rt: Runtime, conn: Conn, rows: list[dict[str, Any]],
           fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows with shredded placeholders ``[erased]`` in ``fields``, ``steps`` and
    ``provenance``."""
    blobs = [(r, [r.get(f) or "" for f in fields]
              + [json.dumps(r.get("steps") or {}), json.dumps(r.get("provenance") or {})])
             for r in rows]
    found = {m.group(0) for _, texts in blobs for t in texts for m in PLACEHOLDER_RE.finditer(t)}
    erased = rt.pii.erased_placeholders(conn, found) if found else set()
    if not erased:
        return rows
    out = []
    for r in rows:
        r = dict(r)
        for f in fields:
            if r.get(f):
                r[f] = render_text(r[f], {}, erased)
        for f in ("steps", "provenance"):
            if r.get(f) is not None:
                r[f] = json.loads(render_text(json.dumps(r[f]), {}, erased))
        out.append(r)
    return out


def render_procedures(rt: Runtime, conn: Conn, rows: list[dict[str, Any]],
                      w: ranking.Weights) -> list[Procedure]:
    """Rows of :data:`mnemovault.store.procedures.PROCEDURE_COLUMNS` as procedures."""
    out = []
    for r in _erase(rt, conn, rows, _PROC_TEXT):
        c = Counters(**{k: r[k] for k in Counters.model_fields})
        out.append(Procedure(
            id=r["id"], scope=r["scope"], subject=r["subject_id"], name=r["name"],
            intent=r["intent"], steps=Steps.model_validate(r["steps"]), status=r["status"],
            version=r["version"], parent_id=r["parent_id"], pinned=r["pinned"],
            archived=r["archived"], created_at=r["created_at"], updated_at=r["updated_at"],
            provenance=r["provenance"], counters=c,
            success_rate=ranking.track_record(c.successes, c.runs, w)))
    return out


def render_runs(rt: Runtime, conn: Conn, rows: list[dict[str, Any]]) -> list[Run]:
    """Rows of :data:`mnemovault.store.procedures.RUN_COLUMNS` as runs."""
    return [Run.from_row(r) for r in _erase(rt, conn, rows, _RUN_TEXT)]
