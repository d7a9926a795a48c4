"""``mnemovault keys`` (API keys: ``keys create``) and ``mnemovault kek`` (key-encryption
keys of the PII vault: ``kek rotate``)."""

from __future__ import annotations

from typing import Annotated

import typer

from mnemovault.cli._common import _emit_json, _fail, _vault, err, out
from mnemovault.errors import MnemoError

keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
kek_app = typer.Typer(help="Key-encryption keys of the PII vault.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="Tenant id (created if new).")],
    role: Annotated[str, typer.Option(help="owner, admin, member or service.")] = "member",
    name: Annotated[str | None, typer.Option(help="A label for the key.")] = None,
    scope: Annotated[str | None, typer.Option(
        help="Limit the key to this scope.")] = None,
    subject: Annotated[str | None, typer.Option(
        help="Limit the key to this subject.")] = None,
    permission: Annotated[list[str] | None, typer.Option(
        "--permission", help="Narrow the role's permissions to these (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create an API key. The token is printed once and never stored. A key limited to a
    scope or subject sees only what lies within it, and holds no tenant-wide permission."""
    try:
        with _vault(ctx) as vault:
            token, key_id = vault.create_key(tenant, role, name=name, scope=scope,
                                             subject=subject, permissions=permission)
            made = vault.authenticate(token)
    except MnemoError as exc:
        _fail(exc)
        return
    limits = {"scope": made.scope, "subject": made.subject}
    if as_json:
        _emit_json({"tenant": tenant, "role": role, "key_id": str(key_id), "token": token,
                    "permissions": sorted(made.permissions), **limits})
    else:
        where = "".join(f", {k} {v!r}" for k, v in limits.items() if v is not None)
        out.print(f"key [bold]{key_id}[/] for tenant [bold]{tenant}[/], role {role}{where}:",
                  highlight=False)
        out.print(token, highlight=False, soft_wrap=True)
        err.print("[dim]store it now: it cannot be shown again[/]")


@kek_app.command("rotate")
def kek_rotate(
    ctx: typer.Context,
    retire: Annotated[bool, typer.Option(
        help="Destroy the old KEK versions after rewrapping (irreversible).")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Rewrap every data key under a new KEK version (ciphertexts are not touched)."""
    try:
        with _vault(ctx, create=False) as vault:
            res = vault.rotate_kek(retire=retire)
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res)
    else:
        out.print(f"KEK version {res['kek_version']} is current; rewrapped {res['rewrapped']} "
                  f"data keys in {res['tenants']} tenant(s)"
                  + (f"; destroyed versions {res['retired']}" if res["retired"] else ""))


def register(app: typer.Typer) -> None:
    """Add the ``keys`` and ``kek`` groups to ``app``."""
    app.add_typer(keys_app, name="keys")
    app.add_typer(kek_app, name="kek")
