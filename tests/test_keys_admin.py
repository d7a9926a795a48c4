"""Listing and revoking API keys (``keys:manage``): metadata only, never a secret or hash;
revocation is idempotent, audited, and stops the key at once; other tenants' keys are
"not found"; the same over the CLI."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.auth import hash_secret, parse_token
from mnemovault.cli import app as cli_app
from mnemovault.config import Settings
from mnemovault.errors import Unauthenticated
from mnemovault.vault import MemoryVault


@pytest.fixture(scope="module")
def client(vault: MemoryVault) -> TestClient:
    return TestClient(create_app(vault))


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _key(vault: MemoryVault, tenant: str, role: Any = "member", **kw: Any) -> tuple[str, str]:
    token, key_id = vault.create_key(tenant, role, **kw)
    return token, str(key_id)


def _audit(vault: MemoryVault, tenant: str) -> str:
    return b"".join(vault.audit.export(vault.principal(tenant))).decode()


def _cli(settings: Settings, *args: str) -> Any:
    return CliRunner().invoke(cli_app, ["--data-dir", str(Path(settings.data_dir)), *args])


def test_list_shows_keys_without_any_secret(client: TestClient, vault: MemoryVault,
                                            tenant: str) -> None:
    owner, owner_id = _key(vault, tenant, "owner", name="ops")
    member, member_id = _key(vault, tenant, "service", permissions=["memory:read"])
    limited, limited_id = _key(vault, tenant, "member", scope="alice", subject="alice")
    r = client.get("/v1/keys", headers=_h(owner))
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["next_cursor"] is None
    items = {k["key_id"]: k for k in page["items"]}
    assert list(items) == [owner_id, member_id, limited_id]  # oldest first
    assert items[owner_id]["role"] == "owner" and items[owner_id]["name"] == "ops"
    assert "keys:manage" in items[owner_id]["permissions"]
    assert items[member_id]["permissions"] == ["memory:read"]
    assert items[limited_id]["scope"] == "alice" and items[limited_id]["subject"] == "alice"
    assert "keys:manage" not in items[limited_id]["permissions"]
    assert all(k["revoked_at"] is None and k["created_at"] for k in items.values())
    assert items[owner_id]["last_used_at"] is not None  # it made this request
    assert items[member_id]["last_used_at"] is None
    for token in (owner, member, limited):
        secret = parse_token(token)[2]
        digest = hash_secret(secret)
        for leak in (token, secret, digest.hex(), base64.b64encode(digest).decode()):
            assert leak not in r.text
    assert not {"token", "key_hash", "hash", "secret"} & set(items[owner_id])


def test_list_pages_by_cursor(client: TestClient, vault: MemoryVault, tenant: str) -> None:
    owner, _ = _key(vault, tenant, "owner")
    made = [_key(vault, tenant, "service")[1] for _ in range(4)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/keys", headers=_h(owner), params=params).json()
        assert len(page["items"]) <= 2
        seen += [k["key_id"] for k in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen[1:] == made and len(set(seen)) == 5
    for bad in ({"limit": 0}, {"limit": 101}, {"cursor": "nope"},
                {"cursor": str(uuid.uuid4())}):
        r = client.get("/v1/keys", headers=_h(owner), params=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["error"]["code"] == "validation"


def test_revoked_key_answers_401_on_the_next_request(client: TestClient, vault: MemoryVault,
                                                     tenant: str) -> None:
    owner, _ = _key(vault, tenant, "owner")
    member, member_id = _key(vault, tenant, "member")
    assert client.get("/v1/memories", headers=_h(member)).status_code == 200
    r = client.delete(f"/v1/keys/{member_id}", headers=_h(owner))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["key_id"] == member_id and body["already_revoked"] is False
    assert body["revoked_at"]
    for call in (lambda: client.get("/v1/memories", headers=_h(member)),
                 lambda: client.post("/v1/recall", headers=_h(member),
                                     json={"query": "x", "scope": "s"})):
        r = call()
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    listed = {k["key_id"]: k for k in client.get("/v1/keys", headers=_h(owner)).json()["items"]}
    assert listed[member_id]["revoked_at"] is not None
    log = _audit(vault, tenant)
    assert "KEY_REVOKE" in log and member_id in log
    assert parse_token(member)[2] not in log and member not in log


def test_revoking_twice_reports_already_revoked(client: TestClient, vault: MemoryVault,
                                                tenant: str) -> None:
    owner, _ = _key(vault, tenant, "owner")
    _, key_id = _key(vault, tenant, "service")
    first = client.delete(f"/v1/keys/{key_id}", headers=_h(owner)).json()
    second = client.delete(f"/v1/keys/{key_id}", headers=_h(owner))
    assert second.status_code == 200
    assert second.json()["already_revoked"] is True
    assert second.json()["revoked_at"] == first["revoked_at"]
    assert _audit(vault, tenant).count("KEY_REVOKE") == 1  # the no-op is not audited again


def test_a_key_may_revoke_itself(client: TestClient, vault: MemoryVault, tenant: str) -> None:
    admin, admin_id = _key(vault, tenant, "admin")
    r = client.delete(f"/v1/keys/{admin_id}", headers=_h(admin))
    assert r.status_code == 200 and r.json()["already_revoked"] is False
    assert client.get("/v1/keys", headers=_h(admin)).status_code == 401


def test_unknown_or_malformed_key_id(client: TestClient, vault: MemoryVault,
                                     tenant: str) -> None:
    owner, _ = _key(vault, tenant, "owner")
    r = client.delete(f"/v1/keys/{uuid.uuid4()}", headers=_h(owner))
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"
    assert client.delete("/v1/keys/not-a-uuid", headers=_h(owner)).status_code == 422


@pytest.mark.parametrize("role", ["member", "service"])
def test_a_key_without_keys_manage_cannot_list_or_revoke(
        client: TestClient, vault: MemoryVault, tenant: str, role: str) -> None:
    token, key_id = _key(vault, tenant, role)
    for r in (client.get("/v1/keys", headers=_h(token)),
              client.delete(f"/v1/keys/{key_id}", headers=_h(token))):
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["details"]["permission"] == "keys:manage"
        assert "keys:manage" in err["message"]
    assert client.get("/v1/memories", headers=_h(token)).status_code == 200  # not revoked


def test_a_limited_owner_key_cannot_list(client: TestClient, vault: MemoryVault,
                                         tenant: str) -> None:
    token, _ = _key(vault, tenant, "owner", scope="alice")
    r = client.get("/v1/keys", headers=_h(token))
    assert r.status_code == 403 and r.json()["error"]["details"]["permission"] == "keys:manage"


def test_another_tenants_key_is_not_found(client: TestClient, vault: MemoryVault,
                                          tenant: str) -> None:
    other = f"{tenant}-b"
    vault.ensure_tenant(other)
    owner, owner_id = _key(vault, tenant, "owner")
    theirs, their_id = _key(vault, other, "member")
    r = client.delete(f"/v1/keys/{their_id}", headers=_h(owner))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.get("/v1/memories", headers=_h(theirs)).status_code == 200
    listed = client.get("/v1/keys", headers=_h(owner)).json()["items"]
    assert [k["key_id"] for k in listed] == [owner_id]
    r = client.get("/v1/keys", headers=_h(owner), params={"cursor": their_id})
    assert r.status_code == 422


def test_library_list_and_revoke(vault: MemoryVault, tenant: str) -> None:
    token, key_id = _key(vault, tenant, "member")
    who = vault.principal(tenant)
    assert [k["key_id"] for k in vault.list_keys(principal=who)["items"]] == [key_id]
    assert vault.revoke_key(key_id, principal=who)["already_revoked"] is False
    with pytest.raises(Unauthenticated):
        vault.authenticate(token)


def test_cli_list_and_revoke(settings: Settings, vault: MemoryVault, tenant: str) -> None:
    token, key_id = _key(vault, tenant, "member", name="bot")
    res = _cli(settings, "keys", "list", "--tenant", tenant, "--json")
    assert res.exit_code == 0, res.output
    page = json.loads(res.stdout)
    assert [k["key_id"] for k in page["items"]] == [key_id]
    assert page["items"][0]["name"] == "bot" and page["next_cursor"] is None
    assert parse_token(token)[2] not in res.stdout
    res = _cli(settings, "keys", "revoke", key_id, "--tenant", tenant, "--json")
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["key_id"] == key_id and body["already_revoked"] is False
    res = _cli(settings, "keys", "revoke", key_id, "--tenant", tenant, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["already_revoked"] is True
    res = _cli(settings, "keys", "revoke", str(uuid.uuid4()), "--tenant", tenant, "--json")
    assert res.exit_code == 3, res.output
    res = _cli(settings, "keys", "revoke", "not-a-uuid", "--tenant", tenant)
    assert res.exit_code == 2, res.output
    res = _cli(settings, "keys", "list", "--tenant", tenant)  # the table
    assert res.exit_code == 0 and key_id in res.stdout


def test_cli_keys_commands_default_to_the_global_tenant(settings: Settings,
                                                        tenant: str) -> None:
    res = _cli(settings, "--tenant", tenant, "keys", "create", "--role", "service", "--json")
    assert res.exit_code == 0, res.output
    made = json.loads(res.stdout)
    assert made["tenant"] == tenant
    res = _cli(settings, "--tenant", tenant, "keys", "list", "--json")
    assert res.exit_code == 0, res.output
    assert [k["key_id"] for k in json.loads(res.stdout)["items"]] == [made["key_id"]]
    res = _cli(settings, "--tenant", tenant, "keys", "revoke", made["key_id"], "--json")
    assert res.exit_code == 0, res.output
    # the command's own --tenant wins over the global one
    res = _cli(settings, "--tenant", "default", "keys", "list", "--tenant", tenant, "--json")
    assert [k["key_id"] for k in json.loads(res.stdout)["items"]] == [made["key_id"]]


def test_cli_list_and_revoke_never_create_a_database(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    for args in (["keys", "list", "--tenant", "acme"],
                 ["keys", "revoke", str(uuid.uuid4()), "--tenant", "acme"]):
        res = CliRunner().invoke(cli_app, ["--data-dir", str(empty), *args])
        assert res.exit_code == 7, res.output
    assert not (empty / "pg").exists()
