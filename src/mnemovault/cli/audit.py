"""``mnemovault audit``: the tamper-evident audit log (``audit verify``, ``audit export``,
``audit checkpoint``, ``audit proof``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer
from rich.text import Text

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _state, _vault, err, out
from mnemovault.errors import MnemoError, ValidationError

if TYPE_CHECKING:
    from mnemovault.auth import Principal

audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)


@audit_app.command("verify")
def audit_verify(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(
        help="A JSON Lines export; without it, the tenant's chain in the database.")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="A saved signed checkpoint.")] = None,
    public_key: Annotated[Path | None, typer.Option(
        help="The checkpoint signer's public key (PEM or vkey file); default: this "
             "deployment's own audit signing key.")] = None,
    allow_unsigned: Annotated[bool, typer.Option(
        help="If no public key can be found, trust the checkpoint as given (with a "
             "warning) instead of failing. A signature that does not verify still fails.")
    ] = False,
    strict: Annotated[bool, typer.Option(
        help="Fail when rows follow the checkpoint's size (default: a warning).")] = False,
    allow_partial: Annotated[bool, typer.Option(
        help="Accept an export that does not start at seq 1.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Check every link and row hash (and, with a checkpoint, truncation and rewrites).
    Prints the first failing line and why. Exit 0 valid, 1 verification failed, 2 bad
    input (missing or unreadable file or key, no key for a checkpoint), 3 nothing to
    verify (no rows, no database), 7 the deployment's signing key is unusable."""
    from mnemovault.audit.service import deployment_public_key, signing_key_path
    from mnemovault.audit.verify import (
        VerifyResult,
        exit_status,
        read_public_key,
        read_text_file,
        require_file,
        verify_file,
    )

    settings = _state(ctx).settings
    if strict and checkpoint is None:
        _bad_input("--strict needs --checkpoint")
    if public_key is not None and checkpoint is None:
        _bad_input("--public-key needs --checkpoint")
    result: VerifyResult
    try:
        cp_text = None if checkpoint is None else read_text_file(checkpoint, "--checkpoint")
        pk: Any = None
        key_source: str | None = None
        if public_key is not None:
            pk, key_source = read_public_key(public_key, "--public-key"), str(public_key)
        elif cp_text is not None:
            found = deployment_public_key(settings)
            if found is not None:
                pk, key_source = found[0], f"this deployment's key {found[1]}"
            elif not allow_unsigned:
                key = signing_key_path(settings)
                _bad_input(
                    f"no public key to check the checkpoint's signature with: this deployment "
                    f"has no audit signing key ({key} and {key}.pub do not exist); pass "
                    "--public-key PK, or --allow-unsigned to trust the checkpoint as given")
        where: str
        if file is not None:
            require_file(file, "FILE")
            where = str(file)
            result = verify_file(file, cp_text, pk, allow_unsigned=allow_unsigned,
                                 strict=strict, allow_partial=allow_partial)
        else:
            data_dir = Path(settings.data_dir).expanduser()
            # the embedded cluster lives in <data dir>/pg (mnemovault.store.embedded); don't
            # create an empty database just to report that it holds no rows
            if settings.database_url is None and not (data_dir / "pg").is_dir():
                err.print(Text(f"NO ROWS: there is no database in {data_dir} (nothing to "
                               "verify; give an export FILE, or the right --data-dir)"),
                          soft_wrap=True)
                raise typer.Exit(3)
            with _vault(ctx, create=False) as vault:
                who = _chain_reader(vault)
                where = f"tenant {who.tenant!r} in the database"
                result = vault.audit.verify(who, checkpoint=cp_text, public_key=pk,
                                            allow_unsigned=allow_unsigned, strict=strict)
    except MnemoError as exc:
        _fail(exc)
        return
    except OSError as exc:
        _bad_input(f"cannot read {exc.filename or file}: {exc.strerror or exc}")
        return
    except ValueError as exc:  # InputError (names the option), CheckpointError
        _bad_input(str(exc))
        return
    if result.checkpoint_signature_verified:
        result.key_source = key_source
    if as_json:
        _emit_json(result.to_dict() | {"source": where})
    else:
        for warning in result.warnings:
            err.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
        if result.empty:
            err.print(Text(f"NO ROWS: {where} has no audit rows, nothing was verified"),
                      soft_wrap=True)
        else:
            (out if result.ok else err).print(Text(result.summary()), soft_wrap=True)
    raise typer.Exit(exit_status(result))


def _chain_reader(vault: Any) -> Principal:
    """The local principal that reads ``--tenant``'s chain: also the reserved system
    tenant ``_system`` (the chain of tenant purges), which is no tenant name a caller may
    use anywhere else (:func:`mnemovault.auth.validate_tenant` refuses it)."""
    from mnemovault.auth import Principal
    from mnemovault.store.tenants import SYSTEM_TENANT

    tenant = vault.rt.settings.tenant
    if tenant == SYSTEM_TENANT:
        return Principal(tenant=SYSTEM_TENANT, role="owner",
                         permissions=frozenset({"audit:read"}))
    return cast(Principal, vault.principal())


def _bad_input(message: str) -> NoReturn:
    err.print(Text.assemble(("error", "bold red"), f": {message}"), soft_wrap=True)
    raise typer.Exit(2)


@audit_app.command("export")
def audit_export(
    ctx: typer.Context,
    start: Annotated[int | None, typer.Option("--from", help="First seq (inclusive).")] = None,
    end: Annotated[int | None, typer.Option("--to", help="Last seq (inclusive).")] = None,
) -> None:
    """Write the tenant's chain as JSON Lines to stdout."""
    try:
        with _vault(ctx, create=False) as vault:
            for chunk in vault.audit.export(_chain_reader(vault), start, end):
                sys.stdout.buffer.write(chunk)
    except MnemoError as exc:
        _fail(exc)


@audit_app.command("checkpoint")
def audit_checkpoint(
    ctx: typer.Context,
    sign: Annotated[bool, typer.Option(help="Sign one at the current size first.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Print the latest signed checkpoint (save it: it catches later truncation)."""
    try:
        with _vault(ctx, create=False) as vault:
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
        with _vault(ctx, create=False) as vault:
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
