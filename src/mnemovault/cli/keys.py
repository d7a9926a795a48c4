"""``mnemovault keys`` (API keys: ``keys create``, ``keys list``, ``keys revoke``) and
``mnemovault kek`` (key-encryption keys of the PII vault: ``kek rotate``).

The ``keys`` commands act as the local operator (owner) of ``--tenant``, which defaults to
the global ``--tenant`` option (``mnemovault --tenant acme keys list``), itself defaulting
to ``MNEMOVAULT_TENANT`` or ``default``. As the operator they see key limits in clear and
may create and revoke any key, the tenant's last owner key too (:mod:`mnemovault.keys`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from mnemovault.cli._common import JSON_HELP, _emit_json, _fail, _hint, _state, _vault, err, out
from mnemovault.errors import MnemoError

keys_app = typer.Typer(help="API keys.", no_args_is_help=True)

TenantOption = Annotated[str | None, typer.Option(
    help="Tenant id (default: the global --tenant).")]


def _tenant(ctx: typer.Context, tenant: str | None) -> str:
    """``--tenant`` of the command, else the global one (settings.tenant)."""
    return tenant if tenant is not None else str(_state(ctx).settings.tenant)
kek_app = typer.Typer(help="Key-encryption keys of the PII vault.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(
        help="Tenant id, created if new (default: the global --tenant).")] = None,
    role: Annotated[str, typer.Option(help="owner, admin, member or service.")] = "member",
    name: Annotated[str | None, typer.Option(help="A label for the key.")] = None,
    scope: Annotated[str | None, typer.Option(
        help="Limit the key to this scope.")] = None,
    subject: Annotated[str | None, typer.Option(
        help="Limit the key to this subject.")] = None,
    permission: Annotated[list[str] | None, typer.Option(
        "--permission", help="Narrow the role's permissions to these (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Create an API key. The token is printed once and never stored. A key limited to a
    scope or subject sees only what lies within it, and holds no tenant-wide permission."""
    tenant = _tenant(ctx, tenant)
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


@keys_app.command("list")
def keys_list(
    ctx: typer.Context,
    tenant: TenantOption = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 100,
    cursor: Annotated[str | None, typer.Option(
        help="Last key id of the previous page.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the tenant's API keys, oldest first, revoked ones included: metadata only
    (never a token or its hash)."""
    try:
        with _vault(ctx, create=False) as vault:
            page = vault.list_keys(limit=limit, cursor=cursor,
                                   principal=vault.principal(_tenant(ctx, tenant)))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(page)
        return
    table = Table()
    table.add_column("key id", no_wrap=True)  # whole: it is what `keys revoke` takes
    for col in ("role", "name", "limits", "made", "created", "last used", "revoked"):
        table.add_column(col, overflow="fold")
    for k in page["items"]:
        limits = ", ".join(f"{f} {k[f]}" for f in ("scope", "subject") if k[f] is not None)
        made = "self-registered" if k.get("origin") == "self_registered" else "issued"
        table.add_row(k["key_id"], k["role"], Text(k["name"] or ""), Text(limits), made,
                      *(f"{k[f]:%Y-%m-%d %H:%M}" if k[f] else "-"
                        for f in ("created_at", "last_used_at", "revoked_at")))
    out.print(table)
    if page["next_cursor"]:
        out.print(f"next page: --cursor {page['next_cursor']}", soft_wrap=True,
                  highlight=False)


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (see keys list).")],
    tenant: TenantOption = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Revoke an API key: every later request with it is refused (401). Revoking a
    revoked key changes nothing. Exit 3 if the tenant has no such key. As the local
    operator this may revoke the tenant's last owner key (a key cannot): a note says so."""
    try:
        with _vault(ctx, create=False) as vault:
            res = vault.revoke_key(key_id, principal=vault.principal(_tenant(ctx, tenant)))
    except MnemoError as exc:
        _fail(exc)
        return
    if as_json:
        _emit_json(res)
    elif res["already_revoked"]:
        out.print(f"key {res['key_id']} was already revoked at {res['revoked_at']}",
                  highlight=False)
    else:
        out.print(f"key {res['key_id']} revoked at {res['revoked_at']}", highlight=False)
    if res["last_owner"] and not as_json:
        err.print("the tenant has no unlimited owner key left; "
                  f"`{_hint('keys create --role owner')}` makes one", style="dim",
                  markup=False, highlight=False)


@kek_app.command("rotate")
def kek_rotate(
    ctx: typer.Context,
    retire: Annotated[bool, typer.Option(
        help="Destroy the old KEK versions after rewrapping (irreversible).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
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
