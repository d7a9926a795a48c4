"""The HTTP API: keys, roles, tenant isolation, error shape."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.vault import MemoryVault


@pytest.fixture(scope="module")
def client(vault: MemoryVault) -> TestClient:
    return TestClient(create_app(vault))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keys(vault: MemoryVault, tenant: str) -> dict[str, str]:
    return {role: vault.create_key(tenant, role)[0]  # type: ignore[arg-type]
            for role in ("owner", "admin", "member", "service")}


def test_health_needs_no_key(client: TestClient) -> None:
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_create_get_list_recall_delete(client: TestClient, keys: dict[str, str]) -> None:
    h = _auth(keys["member"])
    r = client.post("/v1/memories", headers=h, json={
        "content": "Ines keeps bees on her allotment in Porto.", "scope": "ines",
        "subject": "ines", "provenance": {"source": "test", "tags": ["hobby"]}})
    assert r.status_code == 201, r.text
    mid = r.json()["id"]
    assert r.headers["x-request-id"]

    r = client.post("/v1/memories/batch", headers=h, json={"items": [
        {"content": "Ines works night shifts as a nurse.", "scope": "ines"},
        {"content": "Ines is saving for a trip to Japan.", "scope": "ines"}]})
    assert r.status_code == 201 and len(r.json()) == 2

    got = client.get(f"/v1/memories/{mid}", headers=h).json()
    assert got["content"].startswith("Ines keeps bees") and got["provenance"]["tags"] == ["hobby"]

    page = client.get("/v1/memories", headers=h, params={"scope": "ines", "limit": 2}).json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    rest = client.get("/v1/memories", headers=h,
                      params={"scope": "ines", "cursor": page["next_cursor"]}).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None

    r = client.post("/v1/recall", headers=h,
                    json={"query": "what does Ines do with insects?", "scope": "ines", "k": 1})
    assert r.status_code == 200
    assert r.json()["hits"][0]["memory"]["id"] == mid

    r = client.delete(f"/v1/memories/{mid}", headers=h)
    assert r.status_code == 200 and r.json()["deleted"] == [mid]
    assert client.get(f"/v1/memories/{mid}", headers=h).status_code == 404
    assert client.delete(f"/v1/memories/{mid}", headers=h).status_code == 404


def test_second_tenant_sees_nothing(client: TestClient, vault: MemoryVault,
                                    keys: dict[str, str], tenant: str) -> None:
    mine = _auth(keys["owner"])
    mid = client.post("/v1/memories", headers=mine, json={
        "content": "The vault code is kept in the blue notebook.", "scope": "shared"}).json()["id"]
    other_tenant = tenant + "-b"
    theirs = _auth(vault.create_key(other_tenant, "owner")[0])

    assert client.get(f"/v1/memories/{mid}", headers=theirs).status_code == 404
    assert client.get("/v1/memories", headers=theirs,
                      params={"scope": "shared"}).json()["items"] == []
    r = client.post("/v1/recall", headers=theirs,
                    json={"query": "vault code notebook", "scope": "shared"})
    assert r.status_code == 200 and r.json()["hits"] == []
    assert client.delete(f"/v1/memories/{mid}", headers=theirs).status_code == 404
    # still there for its owner
    assert client.get(f"/v1/memories/{mid}", headers=mine).status_code == 200


def test_service_key_cannot_delete_and_is_told_which_permission(
        client: TestClient, keys: dict[str, str]) -> None:
    mid = client.post("/v1/memories", headers=_auth(keys["service"]),
                      json={"content": "written by a service", "scope": "s"}).json()["id"]
    r = client.delete(f"/v1/memories/{mid}", headers=_auth(keys["service"]))
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "forbidden" and err["details"]["permission"] == "memory:forget"
    assert "memory:forget" in err["message"]
    assert client.get(f"/v1/memories/{mid}", headers=_auth(keys["owner"])).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "s"}, "content"),
        ({"content": "", "scope": "s"}, "content"),
        ({"content": "x", "scope": "s", "type": "opinion"}, "type"),
        ({"content": "x", "scope": "s", "colour": "red"}, "colour"),
        ({"content": "x", "scope": "s", "created_at": "yesterday"}, "created_at"),
    ],
)
def test_bad_field_is_named(client: TestClient, keys: dict[str, str], body: dict,
                            field: str) -> None:
    r = client.post("/v1/memories", headers=_auth(keys["member"]), json=body)
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "validation" and err["field"] == field
    assert err["message"].startswith(field + ":")


def test_bad_batch_item_is_named_and_nothing_is_stored(client: TestClient,
                                                       keys: dict[str, str]) -> None:
    h = _auth(keys["member"])
    r = client.post("/v1/memories/batch", headers=h, json={"items": [
        {"content": "ok", "scope": "batch"}, {"content": "ok", "scope": ""}]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "items.1.scope"
    assert client.get("/v1/memories", headers=h, params={"scope": "batch"}).json()["items"] == []


def test_recall_k_out_of_range(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/v1/recall", headers=_auth(keys["member"]),
                    json={"query": "x", "scope": "s", "k": 500})
    assert r.status_code == 422 and r.json()["error"]["field"] == "k"


@pytest.mark.parametrize("header", [
    None, "Bearer nonsense", "Basic abc",
    f"Bearer mvk_nobody_{uuid.uuid4().hex}_{'0' * 64}",
])
def test_bad_or_missing_key_is_401(client: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    r = client.get("/v1/memories", headers=headers)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_wrong_secret_for_a_real_key_is_401(client: TestClient, keys: dict[str, str]) -> None:
    token = keys["owner"]
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    assert client.get("/v1/memories", headers=_auth(forged)).status_code == 401


def test_keys_are_stored_hashed(vault: MemoryVault, tenant: str,
                                keys: dict[str, str]) -> None:
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT key_hash FROM api_keys").fetchall()
    secrets = {t.rsplit("_", 1)[1] for t in keys.values()}
    for row in rows:
        assert bytes(row["key_hash"]).hex() not in secrets
        assert len(bytes(row["key_hash"])) == 32
