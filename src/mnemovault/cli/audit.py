"""``mnemovault audit``: the tamper-evident audit log (``audit verify``, ``audit export``,
``audit checkpoint``, ``audit proof``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from mnemovault.cli._common import _emit_json, _fail, _vault, err, out
from mnemovault.errors import MnemoError, ValidationError

audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)


@audit_app.command("verify")
def audit_verify(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(
        help="A JSON Lines export; without it, the tenant's chain in the database.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="A saved signed checkpoint.")] = None,
    public_key: Annotated[Path | None, typer.Option(
        help="The checkpoint signer's public key (vkey file).")] = None,
    allow_partial: Annotated[bool, typer.Option(
        help="Accept an export that does not start at seq 1.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check every link and row hash (and, with a checkpoint, truncation and rewrites).
    Prints the first failing line and why; exits 1 on failure."""
    from mnemovault.audit.verify import verify_file

    try:
        if file is not None:
            result = verify_file(file, checkpoint, public_key, allow_partial=allow_partial)
        else:
            with _vault(ctx) as vault:
                result = vault.audit.verify(vault.principal())
    except MnemoError as exc:
        _fail(exc)
        return
    except (OSError, ValueError) as exc:
        err.print(f"[bold red]error[/]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        _emit_json(result.to_dict())
    else:
        (out if result.ok else err).print(Text(result.summary()))
    raise typer.Exit(0 if result.ok else 1)


@audit_app.command("export")
def audit_export(
    ctx: typer.Context,
    start: Annotated[int | None, typer.Option("--from", help="First seq (inclusive).")] = None,
    end: Annotated[int | None, typer.Option("--to", help="Last seq (inclusive).")] = None,
) -> None:
    """Write the tenant's chain as JSON Lines to stdout."""
    try:
        with _vault(ctx) as vault:
            for chunk in vault.audit.export(vault.principal(), start, end):
                sys.stdout.buffer.write(chunk)
    except MnemoError as exc:
        _fail(exc)


@audit_app.command("checkpoint")
def audit_checkpoint(
    ctx: typer.Context,
    sign: Annotated[bool, typer.Option(help="Sign one at the current size first.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the latest signed checkpoint (save it: it catches later truncation)."""
    try:
        with _vault(ctx) as vault:
            cp = vault.audit.checkpoint(vault.principal(), sign_now=sign)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(cp)
    else:
        sys.stdout.write(cp["note"])


@audit_app.command("proof")
def audit_proof(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="inclusion or consistency")],
    a: Annotated[int, typer.Argument(help="seq (inclusion) or first size (consistency)")],
    b: Annotated[int, typer.Argument(help="tree size (inclusion) or second size")],
) -> None:
    """An RFC 9162 inclusion or consistency proof, as JSON."""
    try:
        with _vault(ctx) as vault:
            who = vault.principal()
            if kind == "inclusion":
                _emit_json(vault.audit.inclusion(who, a, b))
            elif kind == "consistency":
                _emit_json(vault.audit.consistency(who, a, b))
            else:
                raise ValidationError("kind: must be inclusion or consistency", field="kind")
    except MnemoError as exc:
        _fail(exc)


def register(app: typer.Typer) -> None:
    """Add the ``audit`` group to ``app``."""
    app.add_typer(audit_app, name="audit")
