"""The steps graph: structural checks and the default procedure name.

:func:`check` refuses a graph whose node ids repeat or whose edges name a node that does
not exist (sizes are bounded by :class:`~mnemovault.procedures.models.Steps`); the error
names the field, e.g. ``steps.edges.2.target``. Cycles are allowed (a retry loop is a
cycle)."""

from __future__ import annotations

from mnemovault.errors import ValidationError
from mnemovault.procedures.models import Steps
from mnemovault.validation import MAX_NAME_CHARS


def check(steps: Steps, field: str = "steps") -> None:
    """Raise :class:`ValidationError` naming the first structural fault of ``steps``."""
    seen: set[str] = set()
    for i, node in enumerate(steps.nodes):
        if node.id in seen:
            raise ValidationError(f"{field}.nodes.{i}.id: node ids must be unique",
                                  field=f"{field}.nodes.{i}.id")
        seen.add(node.id)
    for i, edge in enumerate(steps.edges):
        for end in ("source", "target"):
            if getattr(edge, end) not in seen:
                raise ValidationError(f"{field}.edges.{i}.{end}: no node with this id "
                                      "(dangling edge)", field=f"{field}.edges.{i}.{end}")


def default_name(steps: Steps) -> str:
    """The tool names in step order, each once, joined by `` -> `` (at most 200
    characters, cut at a tool boundary). Never the question's text."""
    tools = list(dict.fromkeys(n.tool for n in steps.nodes))
    name = ""
    for t in tools:
        nxt = t if not name else f"{name} -> {t}"
        if len(nxt) > MAX_NAME_CHARS:
            break
        name = nxt
    return name or tools[0][:MAX_NAME_CHARS]


def free_texts(steps: Steps) -> list[str]:
    """The free-text fields of a graph (node labels, edge conditions)."""
    return [*(n.name for n in steps.nodes if n.name), *(e.condition for e in steps.edges
                                                         if e.condition)]
