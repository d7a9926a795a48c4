"""Keys narrowed to fewer permissions, one scope, one subject (issue 9, fault 6): creatable
through the API, the CLI and the library, and honoured by every endpoint, the vault
endpoints included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.cli import app as cli_app
from mnemovault.vault import MemoryVault


@pytest.fixture(scope="module")
def client(vault: MemoryVault) -> TestClient:
    return TestClient(create_app(vault))


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def world(client: TestClient, vault: MemoryVault, tenant: str) -> dict[str, Any]:
    """An owner key, memories of two scopes and two subjects (with personal values), and an
    owner-role key limited to scope 'alice' and subject 'alice'."""
    owner = vault.create_key(tenant, "owner")[0]
    ids = {}
    for scope, subject, text in [("alice", "alice", "Alice's mail is alice@example.org"),
                                 ("alice", "bob", "Bob's mail is bob@example.org"),
                                 ("carol", "carol", "Carol's mail is carol@example.org")]:
        r = client.post("/v1/memories", headers=_h(owner),
                        json={"content": text, "scope": scope, "subject": subject})
        assert r.status_code == 201, r.text
        ids[subject] = r.json()["id"]
    # alice and bob share one value, so shredding it reaches past alice's limits
    r = client.post("/v1/memories", headers=_h(owner), json={
        "content": "Alice and Bob both use shared@example.org", "scope": "alice",
        "subject": "bob"})
    assert r.status_code == 201
    r = client.post("/v1/keys", headers=_h(owner),
                    json={"role": "owner", "scope": "alice", "subject": "alice"})
    assert r.status_code == 201, r.text
    return {"owner": owner, "limited": r.json(), "ids": ids}


def test_created_key_reports_its_limits(world: dict[str, Any]) -> None:
    k = world["limited"]
    assert k["scope"] == "alice" and k["subject"] == "alice" and k["role"] == "owner"
    assert "pii:reveal" in k["permissions"] and "memory:forget" in k["permissions"]
    for wide in ("audit:read", "keys:manage", "admin:export", "admin:delete"):
        assert wide not in k["permissions"]


def test_limited_key_reads_only_within_its_limits(client: TestClient,
                                                  world: dict[str, Any]) -> None:
    h = _h(world["limited"]["token"])
    ids = world["ids"]
    items = client.get("/v1/memories", headers=h).json()["items"]
    assert [m["id"] for m in items] == [ids["alice"]]
    assert client.get(f"/v1/memories/{ids['bob']}", headers=h).status_code == 404
    assert client.get(f"/v1/memories/{ids['carol']}", headers=h).status_code == 404
    assert client.get(f"/v1/memories/{ids['alice']}", headers=h).status_code == 200
    r = client.post("/v1/recall", headers=h, json={"query": "mail", "scope": "alice", "k": 10})
    assert [x["memory"]["id"] for x in r.json()["hits"]] == [ids["alice"]]
    r = client.post("/v1/recall", headers=h, json={"query": "mail", "scope": "carol"})
    assert r.status_code == 403 and r.json()["error"]["field"] == "scope"


def test_limited_key_writes_only_within_its_limits(client: TestClient, vault: MemoryVault,
                                                   tenant: str,
                                                   world: dict[str, Any]) -> None:
    h = _h(world["limited"]["token"])
    r = client.post("/v1/memories", headers=h, json={"content": "x", "scope": "carol"})
    assert r.status_code == 403
    r = client.post("/v1/memories", headers=h,
                    json={"content": "x", "scope": "alice", "subject": "bob"})
    assert r.status_code == 403 and r.json()["error"]["field"] == "subject"
    r = client.post("/v1/memories", headers=h, json={"content": "no subject", "scope": "alice"})
    assert r.status_code == 201
    got = vault.get(r.json()["id"], principal=vault.principal(tenant))
    assert got.subject == "alice"


def test_limited_key_forgets_and_pins_only_within_its_limits(
        client: TestClient, vault: MemoryVault, tenant: str, world: dict[str, Any]) -> None:
    h = _h(world["limited"]["token"])
    bob = world["ids"]["bob"]
    r = client.post("/v1/forget", headers=h, json={"ids": [bob]})
    assert r.status_code == 200 and r.json()["deleted"] == [] and r.json()["not_found"] == [bob]
    assert client.post(f"/v1/memories/{bob}/pin", headers=h).status_code == 404
    assert client.delete(f"/v1/memories/{bob}", headers=h).status_code == 404
    r = client.post("/v1/forget/preview", headers=h, json={"ids": [bob]})
    assert r.status_code == 200 and r.json()["items"] == []
    assert vault.get(bob, principal=vault.principal(tenant)).id is not None


def test_vault_endpoints_honour_the_limits(client: TestClient, vault: MemoryVault,
                                           tenant: str, world: dict[str, Any]) -> None:
    h = _h(world["limited"]["token"])
    owner = _h(world["owner"])
    every = {e["placeholder"] for e in client.get("/v1/vault", headers=owner,
                                                  params={"limit": 100}).json()}
    mine = client.get("/v1/vault", headers=h, params={"limit": 100}).json()
    assert len(mine) == 1 and len(every) >= 4
    alice_ph = mine[0]["placeholder"]
    r = client.get(f"/v1/vault/{alice_ph}", headers=h, params={"reveal": "true"})
    assert r.status_code == 200 and r.json()["value"] == "alice@example.org"
    for other in every - {alice_ph}:
        assert client.get(f"/v1/vault/{other}", headers=h).status_code == 404
        assert client.delete(f"/v1/vault/{other}", headers=h).status_code == 404
    assert client.get("/v1/vault/export", headers=h).status_code == 403
    assert client.get("/v1/admin/audit/export", headers=h).status_code == 403
    # a value alice's memory shares with bob's cannot be shredded by alice's key
    r = client.post("/v1/memories", headers=h, json={
        "content": "Alice also writes to shared@example.org", "scope": "alice"})
    assert r.status_code == 201
    shared = {e["placeholder"] for e in client.get("/v1/vault", headers=h).json()} - {alice_ph}
    assert len(shared) == 1
    r = client.delete(f"/v1/vault/{shared.pop()}", headers=h)
    assert r.status_code == 403
    assert client.delete(f"/v1/vault/{alice_ph}", headers=h).status_code == 200


def test_narrowing_is_checked(client: TestClient, vault: MemoryVault,
                              world: dict[str, Any], tenant: str) -> None:
    owner = _h(world["owner"])
    r = client.post("/v1/keys", headers=owner,
                    json={"role": "member", "permissions": ["memory:read"]})
    assert r.status_code == 201 and r.json()["permissions"] == ["memory:read"]
    reader = _h(r.json()["token"])
    r2 = client.post("/v1/memories", headers=reader, json={"content": "x", "scope": "s"})
    assert r2.status_code == 403
    assert r2.json()["error"]["details"]["permission"] == "memory:write"
    r = client.post("/v1/keys", headers=owner,
                    json={"role": "member", "permissions": ["audit:read"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "permissions.0"
    r = client.post("/v1/keys", headers=owner, json={"role": "owner", "force": True})
    assert r.status_code == 422
    # asking a limited key for a tenant-wide permission is refused, not silently dropped
    r = client.post("/v1/keys", headers=owner, json={
        "role": "owner", "scope": "alice", "permissions": ["memory:read", "audit:read"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "permissions.1"
    member = vault.create_key(tenant, "member")[0]
    r = client.post("/v1/keys", headers=_h(member), json={"role": "member"})
    assert r.status_code == 403
    # a limited key cannot manage keys at all
    r = client.post("/v1/keys", headers=_h(world["limited"]["token"]), json={"role": "member"})
    assert r.status_code == 403


def test_limits_are_stored_pseudonymised(client: TestClient, vault: MemoryVault,
                                         tenant: str, world: dict[str, Any]) -> None:
    owner = _h(world["owner"])
    r = client.post("/v1/memories", headers=owner, json={
        "content": "Dana's notes", "scope": "notes", "subject": "dana@example.org"})
    assert r.status_code == 201
    r = client.post("/v1/keys", headers=owner,
                    json={"role": "member", "subject": "dana@example.org"})
    assert r.status_code == 201 and r.json()["subject"] == "dana@example.org"
    with psycopg.connect(vault.db.url) as conn:
        stored = conn.execute("SELECT subject_id FROM api_keys WHERE tenant_id = %s AND "
                              "key_id = %s", (tenant, r.json()["key_id"])).fetchone()
    assert stored is not None and "dana@" not in stored[0] and stored[0].startswith("{email:")
    items = client.get("/v1/memories", headers=_h(r.json()["token"]),
                       params={"scope": "notes"}).json()["items"]
    assert [m["content"] for m in items] == ["Dana's notes"]


def test_cli_creates_narrowed_keys(settings: Any, tenant: str) -> None:
    res = CliRunner().invoke(cli_app, [
        "--data-dir", str(Path(settings.data_dir)), "keys", "create", "--tenant", tenant,
        "--role", "member", "--scope", "alice", "--permission", "memory:read", "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["scope"] == "alice" and body["permissions"] == ["memory:read"]
    res = CliRunner().invoke(cli_app, [
        "--data-dir", str(Path(settings.data_dir)), "keys", "create", "--tenant", tenant,
        "--role", "service", "--permission", "memory:forget"])
    assert res.exit_code == 2
