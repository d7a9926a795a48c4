"""``mnemovault serve`` (the HTTP API) and ``mnemovault demo`` (import the bundled example
conversation into tenant ``demo`` and recall from it)."""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

import typer

from mnemovault.cli._common import (
    _emit_json,
    _fail,
    _import,
    _print_hits,
    _state,
    _vault,
    err,
    out,
)
from mnemovault.errors import MnemoError


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8077,
) -> None:
    """Run the HTTP API (docs at /docs)."""
    import uvicorn

    from mnemovault.api import create_app

    try:
        with _vault(ctx) as vault:
            err.print(f"serving on http://{host}:{port} (OpenAPI docs at /docs)")
            uvicorn.run(create_app(vault), host=host, port=port, log_level="info")
    except MnemoError as exc:
        _fail(exc)


DEMO_QUESTIONS = (
    "Which pets can Priya be around?",
    "Which market does Priya go to every Saturday?",
)


def demo(ctx: typer.Context,
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Import the example conversation into tenant 'demo', recall from it, show next steps."""
    state = _state(ctx)
    state.settings = state.settings.model_copy(update={"tenant": "demo"})
    example = resources.files("mnemovault.examples") / "demo_conversation.jsonl"
    report: dict[str, Any] = {"data_dir": str(state.settings.data_dir)
                              if not state.settings.database_url else None}
    try:
        with _vault(ctx) as vault, resources.as_file(example) as path:
            existing = vault.list(scope="demo", limit=1)
            if existing.items:
                report["import"] = {"skipped": "scope 'demo' already holds the example"}
            else:
                report["import"] = _import(vault, path, scope="demo", fmt="jsonl",
                                           batch_size=64, quiet=as_json)
            report["recall"] = []
            for q in DEMO_QUESTIONS:
                hits = vault.recall(q, scope="demo", k=3)
                report["recall"].append({"query": q, "hits": [
                    {"score": round(h.score, 4), "content": h.memory.content} for h in hits]})
                if not as_json:
                    out.print(f"\n[bold]recall[/] {q!r}")
                    _print_hits(hits)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(report)
        return
    imp = report["import"]
    if "imported" in imp:
        out.print(f"\nimported {imp['imported']} turns of the example conversation "
                  f"in {imp['seconds']} s")
    where = report["data_dir"] or "DATABASE_URL"
    out.print(f"""
[bold]Try next[/] (database: {where})
  mnemovault --tenant demo recall "what is Sam training for?" --scope demo
  mnemovault --tenant demo remember "Priya's birthday is in May" --scope demo --subject priya
  mnemovault import my_conversation.jsonl --scope me      # JSON Lines or LoCoMo
  mnemovault keys create --tenant demo --role owner       # an API key for the HTTP service
  mnemovault serve                                        # HTTP API on http://127.0.0.1:8077/docs
""", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``demo`` to ``app``."""
    app.command()(serve)
    app.command()(demo)
