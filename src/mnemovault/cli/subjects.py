"""Data-subject rights on the command line (:mod:`mnemovault.subjects`)::

    mnemovault erase --subject ada@example.org --scope support [--yes] [--receipt r.json]
    mnemovault erase --scope support [--yes]          # a whole scope (type its name)
    mnemovault export-subject --subject ada@example.org --scope support [--reveal] [-o f]
    mnemovault rectify 0190… "Ada prefers green tea"
    mnemovault receipt verify r.json [--public-key audit_signing.key.pub]
    mnemovault ledger export ledger.jsonl
    mnemovault ledger verify [ledger.jsonl]               # signatures and chain
    mnemovault reapply-erasures [--ledger ledger.jsonl]   # after a backup restore

Every command acts as the local operator (owner of ``--tenant``) and has ``--json``. Erase
asks for a typed confirmation (the subject, or for a whole scope the scope) unless
``--yes``; a wrong answer does nothing (exit 5). ``receipt verify`` runs offline (no
database): a tampered receipt exits 2 naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mnemovault.cli._common import (
    JSON_HELP,
    _declined,
    _emit_json,
    _fail,
    _hint,
    _state,
    _vault,
    err,
    out,
)
from mnemovault.errors import MnemoError

receipt_app = typer.Typer(help="Erasure receipts.", no_args_is_help=True)
ledger_app = typer.Typer(help="The erasure ledger.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def _typed(prompt: str, expected: str) -> bool:
    """Ask for ``expected`` to be typed; end of input or Ctrl-C is a no."""
    try:
        answer = typer.prompt(prompt, err=True, default="", show_default=False)
    except typer.Abort:
        err.print()
        return False
    return bool(answer == expected)


def erase(
    ctx: typer.Context,
    scope: Annotated[str, typer.Option(help="The scope to erase from.")],
    subject: Annotated[str | None, typer.Option(
        help="The subject to erase (omit to erase the whole scope).")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Skip the typed confirmation.")] = False,
    receipt: Annotated[Path | None, typer.Option(
        help="Write the signed receipt (JSON) to this file.")] = None,
    scrub: Annotated[bool, typer.Option(
        "--scrub", help="Then rewrite the tables the erase touched and retire the WAL, so "
        "no byte of it stays in the data directory (ACCESS EXCLUSIVE lock per table; see "
        "`mnemovault scrub --help`).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Erase a subject's memories in a scope (or a whole scope): versions, derived facts,
    graph, vault values nothing else uses; prints a signed receipt."""
    if not yes:
        what, expected = (("subject", subject) if subject is not None else ("scope", scope))
        err.print(f"This erases every memory of this {what} in scope {scope!r} for good.",
                  highlight=False, markup=False)
        if not _typed(f"Type the {what} to confirm", expected):
            _declined()
    try:
        with _vault(ctx, create=False) as vault, err.status("erasing…"):
            if subject is None:
                res = vault.subjects.erase_scope(scope, trigger="cli", scrub=scrub)
            else:
                res = vault.subjects.erase(subject, scope=scope, trigger="cli", scrub=scrub)
    except MnemoError as exc:
        _fail(exc)
        return
    if receipt is not None:
        import json

        receipt.write_text(json.dumps(res.receipt, indent=2) + "\n", "utf-8")
    if as_json:
        _emit_json(res.model_dump(mode="json"))
        return
    c = res.receipt["counts"]
    out.print(f"erased {c['memories']} memories ({c['derived']} derived, {c['versions']} "
              f"versions), shredded {c['vault_values']} vault values; audit seq "
              f"{res.receipt['audit_seq']}", highlight=False)
    if receipt is not None:
        out.print(f"receipt written to {receipt}", highlight=False, soft_wrap=True)
    if res.scrub is not None:
        done = "complete" if res.scrub["complete"] else "INCOMPLETE: " + "; ".join(
            res.scrub["incomplete"])
        out.print(f"scrub: {len(res.scrub['tables'])} tables rewritten in "
                  f"{res.scrub['seconds']:.1f} s; {done}", highlight=False, markup=False)


def export_subject(
    ctx: typer.Context,
    subject: Annotated[str, typer.Option(help="The subject.")],
    scope: Annotated[str, typer.Option(help="The scope.")],
    reveal: Annotated[bool, typer.Option(
        help="Resolve placeholders to their values (audited).")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="Write to this file.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Export everything about a subject in a scope (mnemovault-subject-export/1; schema
    in docs/schemas/subject-export.schema.json)."""
    import json

    try:
        with _vault(ctx, create=False) as vault:
            doc = vault.subjects.export(subject, scope=scope, reveal=reveal)
    except MnemoError as exc:
        _fail(exc)
        return
    text = json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
    if output is not None:
        output.write_text(text, "utf-8")
        if as_json:
            _emit_json({"file": str(output), "memories": len(doc["memories"]),
                        "vault_entries": len(doc["vault_entries"])})
        else:
            out.print(f"{len(doc['memories'])} memories written to {output}",
                      highlight=False, soft_wrap=True)
        return
    out.file.write(text)


def rectify(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id.")],
    content: Annotated[str, typer.Argument(help="The corrected content.")],
    as_json: JsonOption = False,
) -> None:
    """Correct a memory's content in place (new version; the old text is not kept)."""
    try:
        with _vault(ctx, create=False) as vault:
            res = vault.subjects.rectify(memory_id, content, trigger="cli")
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res.model_dump(mode="json"))
    else:
        out.print(f"memory {res.id} is now version {res.version}; shredded "
                  f"{len(res.shredded)} vault values", highlight=False)


@receipt_app.command("verify")
def receipt_verify(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The receipt (JSON).")],
    public_key: Annotated[Path | None, typer.Option(
        help="The signing key's public half (default: this deployment's).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Verify an erasure receipt offline; a tampered one fails naming the field (exit 2)."""
    from mnemovault.subjects.receipt import verify_with

    try:
        text = file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        from mnemovault.errors import ValidationError

        _fail(ValidationError(f"file: cannot read {file} ({type(exc).__name__})",
                              field="file"))
        return
    try:
        doc = verify_with(_state(ctx).settings, text, public_key)
    except MnemoError as exc:
        if as_json:
            _emit_json({"valid": False, "field": exc.field, "error": exc.message})
        _fail(exc)
        return
    if as_json:
        _emit_json({"valid": True, "audit_seq": doc["audit_seq"], "tenant": doc["tenant"]})
    else:
        out.print(f"receipt OK: tenant {doc['tenant']}, {doc['counts'].get('memories', 0)} "
                  f"memories, audit seq {doc['audit_seq']}", highlight=False)


@ledger_app.command("export")
def ledger_export(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the ledger (JSON Lines).")],
    as_json: JsonOption = False,
) -> None:
    """Write the tenant's erasure ledger, from the database, to FILE (keep it with the KEK,
    apart from the backups)."""
    try:
        with _vault(ctx, create=False) as vault:
            n = vault.subjects.export_ledger(file)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"file": str(file), "entries": n})
    else:
        out.print(f"{n} ledger entries written to {file}", highlight=False, soft_wrap=True)


@ledger_app.command("verify")
def ledger_verify(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(
        help="A ledger file (default: every tenant's file of the ledger directory).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Check ledger files line by line: each line's signature (this deployment's audit key)
    and its link to the line before (exit 2 when any problem is found)."""
    try:
        with _vault(ctx, create=False) as vault:
            report = vault.subjects.verify_ledger(file)
    except MnemoError as exc:
        _fail(exc)
        return
    bad = any(r["problems"] for r in report.values())
    if as_json:
        _emit_json({"valid": not bad, "files": report})
    else:
        for path, r in report.items():
            out.print(f"{'FAIL' if r['problems'] else 'OK'} {path}: {r['lines']} lines",
                      highlight=False, soft_wrap=True)
            for p in r["problems"]:
                out.print(f"  {p}", highlight=False)
        if not report:
            out.print("no ledger files", highlight=False)
    if bad:
        raise typer.Exit(2)


def reapply_erasures(
    ctx: typer.Context,
    ledger: Annotated[Path | None, typer.Option(
        help="A ledger file (default: every file of the ledger directory).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Remove again whatever the ledger says was erased and exists again (through the
    forget path, audited as REAPPLY); every start does this by itself for what the database
    lacks, this is the operator's way (any ledger file, unsigned lines too). It also names
    the purged tenants the restore brought back (`mnemovault tenant purge` purges them
    again). Safe to repeat."""
    from rich.progress import Progress

    from mnemovault.subjects import ledger as ledger_mod
    from mnemovault.tenants import lifecycle

    results: list[dict[str, Any]] = []
    try:
        with _vault(ctx, create=False) as vault:
            entries = ledger_mod.read(ledger_mod.files(vault.rt, ledger))
            tenants = sorted({e["tenant"] for e in entries})
            with Progress(console=err, transient=True, disable=as_json) as progress:
                task = progress.add_task("reapplying", total=len(tenants))
                for t in tenants:
                    res = ledger_mod.reapply(vault.rt, vault.principal(t), entries)
                    results.append(res.model_dump(mode="json"))
                    progress.advance(task)
            restored = lifecycle.restored_purges(vault.rt)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json({"tenants": results, "restored_purged_tenants": restored})
        return
    for p in restored:
        err.print(f"tenant {p['tenant']} was purged at {p['purged_at']:%Y-%m-%dT%H:%M:%SZ} and "
                  f"is back (a backup restore): `{_hint('tenant purge')}` purges it again",
                  highlight=False, markup=False)
    if not results:
        out.print("the ledger is empty: nothing to reapply", highlight=False)
    for r in results:
        out.print(f"tenant {r['tenant']}: {r['entries']} entries; removed "
                  f"{len(r['removed'])} memories, {len(r['runs_removed'])} procedure runs, "
                  f"shredded {len(r['shredded'])} values"
                  + (f"; check {len(r['to_rectify'])} rectified memories"
                     if r["to_rectify"] else ""), highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``erase``, ``export-subject``, ``rectify``, ``reapply-erasures`` and the
    ``receipt`` and ``ledger`` groups to ``app``."""
    app.command("erase")(erase)
    app.command("export-subject")(export_subject)
    app.command("rectify")(rectify)
    app.command("reapply-erasures")(reapply_erasures)
    app.add_typer(receipt_app, name="receipt")
    app.add_typer(ledger_app, name="ledger")
