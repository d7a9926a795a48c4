"""Triggers that keep derived tables (corpus statistics, postings) in step with the table
they are computed from, defined once and rendered twice.

A migration describes its triggers as a :class:`TriggerSet` in a module-level ``TRIGGERS``
and creates them on plain PostgreSQL with :meth:`TriggerSet.create`. On a server with the
``citus`` extension the migration skips :meth:`~TriggerSet.create`;
:func:`mnemovault.store.citus.distribute` finds every migration's ``TRIGGERS`` after
distributing the tables and installs them on the shards from the same definition
(:meth:`TriggerSet.citus_functions`), then recounts the targets (:attr:`TriggerSet.backfill`).

Why a second rendering: on Citus a trigger of a distributed table fires on each shard, on
the worker that holds it, and a statement in it that names a distributed table is a new
distributed query, which Citus cannot route unless it has ``tenant_id = <constant>``
(``FOR UPDATE`` over ``(tenant_id, scope) IN (...)`` is refused: "could not run
distributed query with FOR UPDATE/SHARE commands"). The Citus form of each function runs
the very same statements on the co-located shards of the targets, which live on the same
worker: it looks their names up once per call (``pg_dist_shard``: the shard of the target
with the firing shard's hash range) and runs each statement with ``EXECUTE`` on those
names; ``OLD``/``NEW`` become ``$1``/``$2`` (passed with ``USING``), ``PERFORM`` becomes
``SELECT``. Statement-level triggers with transition tables work there unchanged (the
transition tables are visible to ``EXECUTE``). The writes stay in the transaction of the
change that fired them, under the shard's row-level security, as on one server.

Rules for a body (so that both renderings mean the same): statements end with ``;`` at
the end of a line and hold no ``;`` of their own; targets are named by their plain table
names; the row being changed only as ``OLD.col`` / ``NEW.col``; no PL/pgSQL besides
``PERFORM`` (no variables, no control flow).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TriggerFunction:
    """A trigger function: ``body`` is its statements (the plain form)."""

    name: str
    body: str


@dataclass(frozen=True)
class TriggerSet:
    """Triggers on ``table`` whose functions keep ``targets`` up to date.

    ``targets`` must be tenant tables co-located with ``table`` on Citus (every table with
    ``tenant_id`` is: :func:`mnemovault.store.citus.distribute`); ``backfill`` empties them
    and computes them from the rows ``table`` holds (run when the triggers are installed on
    a database that has rows already)."""

    table: str
    targets: tuple[str, ...]
    functions: tuple[TriggerFunction, ...]
    triggers: tuple[str, ...]  # CREATE TRIGGER statements, one each
    backfill: tuple[str, ...]

    def trigger_names(self) -> list[str]:
        return [_trigger_name(t) for t in self.triggers]

    def plain_functions(self, *, replace: bool = False) -> list[str]:
        """``CREATE FUNCTION`` (``replace``: ``CREATE OR REPLACE``) of each function as a
        plain PostgreSQL server runs it."""
        return [_function(f.name, f.body, replace=replace) for f in self.functions]

    def function_names(self) -> list[str]:
        return [f.name for f in self.functions]

    def citus_functions(self) -> list[str]:
        """``CREATE OR REPLACE FUNCTION`` of each function for Citus shards (module
        docstring)."""
        return [_citus_function(self.table, self.targets, f) for f in self.functions]

    def create(self, op: Any) -> None:
        """Create the functions and triggers (plain PostgreSQL; the migration's ``op``)."""
        for statement in self.plain_functions():
            op.execute(statement)
        for statement in self.triggers:
            op.execute(statement)


def _function(name: str, body: str, *, replace: bool = False, declare: str = "",
              prologue: str = "") -> str:
    return f"""
    CREATE {"OR REPLACE " if replace else ""}FUNCTION {name}() RETURNS trigger
    LANGUAGE plpgsql AS $fn${declare}
    BEGIN{prologue}
    {body}
      RETURN NULL;
    END
    $fn$
    """


def _trigger_name(statement: str) -> str:
    match = re.match(r"\s*CREATE\s+TRIGGER\s+(\w+)", statement, re.IGNORECASE)
    if match is None:
        raise ValueError(f"not a CREATE TRIGGER statement: {statement[:60]!r}")
    return match.group(1)


def _statements(body: str) -> list[str]:
    parts = [s.strip() for s in re.split(r";[ \t]*(?:\n|$)", body)]
    return [s for s in parts if s]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _citus_function(table: str, targets: tuple[str, ...], fn: TriggerFunction) -> str:
    lines = []
    for stmt in _statements(fn.body):
        if ";" in stmt:
            raise ValueError(f"{fn.name}: a statement holds ';' inside it: {stmt[:60]!r}")
        stmt = re.sub(r"^PERFORM\b", "SELECT", stmt.replace("%", "%%"))
        uses = [r for r in ("OLD", "NEW") if re.search(rf"\b{r}\.", stmt)]
        for i, record in enumerate(uses, start=1):
            stmt = re.sub(rf"\b{record}\.", f"(${i}).", stmt)
        for i, target in enumerate(targets, start=1):
            stmt = re.sub(rf"\b{re.escape(target)}\b", f"%{i}$s", stmt)
        names = ", ".join(f"shard[{i}]" for i in range(1, len(targets) + 1))
        using = f" USING {', '.join(uses)}" if uses else ""
        lines.append(f"EXECUTE format({_quote(stmt)}, {names}){using};")
    wanted = "ARRAY[" + ", ".join(_quote(t) for t in targets) + "]"
    declare = f"""
    DECLARE
      wanted text[] := {wanted};
      shard text[];
      sid bigint := substring(TG_TABLE_NAME FROM '_([0-9]+)$')::bigint;"""
    prologue = f"""
      IF TG_TABLE_NAME = {_quote(table)} THEN  -- not a shard: the tables themselves
        shard := wanted;
      ELSE  -- the targets' shards of the firing shard's hash range (same worker)
        SELECT array_agg(shard_name(d.logicalrelid, d.shardid) ORDER BY w.i) INTO shard
          FROM unnest(wanted) WITH ORDINALITY w(name, i)
          JOIN pg_dist_shard d ON d.logicalrelid = w.name::regclass
          JOIN pg_dist_shard s ON s.shardid = sid AND s.shardminvalue = d.shardminvalue;
      END IF;
      IF coalesce(array_length(shard, 1), 0) <> array_length(wanted, 1) THEN
        RAISE EXCEPTION '{fn.name}: no co-located shards of % for %', wanted, TG_TABLE_NAME;
      END IF;"""
    return _function(fn.name, "\n      ".join(lines), replace=True, declare=declare,
                     prologue=prologue)
