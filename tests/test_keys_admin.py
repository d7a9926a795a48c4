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
from mnemovault.errors import Conflict, Forbidden, Unauthenticated
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


# -- the key hierarchy (issue 19, item 5) --------------------------------------------------
NARROW_OWNER = ["memory:read", "keys:manage"]  # an owner key narrowed below every owner's


def _alive(client: TestClient, token: str) -> bool:
    return client.get("/v1/memories", headers=_h(token)).status_code == 200


def _key_count(vault: MemoryVault, tenant: str) -> int:
    with vault.db.transaction(tenant) as conn:
        return int(conn.execute("SELECT count(*) AS n FROM api_keys WHERE tenant_id = %s",
                                (tenant,)).fetchone()["n"])


def test_a_key_creates_only_keys_at_or_below_its_role(client: TestClient, vault: MemoryVault,
                                                      tenant: str) -> None:
    admin, _ = _key(vault, tenant, "admin")
    before = _key_count(vault, tenant)
    for body in ({"role": "owner"}, {"role": "owner", "permissions": ["memory:read"]}):
        r = client.post("/v1/keys", headers=_h(admin), json=body)
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["details"]["rule"] == "key_hierarchy" and err["field"] == "role"
        assert "key hierarchy" in err["message"] and "'owner'" in err["message"]
    assert _key_count(vault, tenant) == before  # nothing was stored
    for role in ("admin", "member", "service"):
        r = client.post("/v1/keys", headers=_h(admin), json={"role": role})
        assert r.status_code == 201 and r.json()["role"] == role, r.text
    # a narrowed owner key is still an owner: it creates owner keys no broader than itself
    narrow, _ = _key(vault, tenant, "owner", permissions=NARROW_OWNER)
    r = client.post("/v1/keys", headers=_h(narrow),
                    json={"role": "owner", "permissions": ["memory:read"]})
    assert r.status_code == 201 and r.json()["permissions"] == ["memory:read"], r.text
    who = vault.authenticate(_key(vault, tenant, "member")[0])
    with pytest.raises(Forbidden):
        vault.create_key(tenant, "member", principal=who)  # no keys:manage at all
    admin_who = vault.authenticate(admin)
    with pytest.raises(Forbidden) as info:
        vault.create_key(tenant, "owner", principal=admin_who)
    assert info.value.details["rule"] == "key_hierarchy"


def test_a_lower_role_cannot_revoke_a_higher_one(client: TestClient, vault: MemoryVault,
                                                 tenant: str) -> None:
    """Issue 19, item 5: an admin, or a narrowed owner key, revoked an unlimited owner
    key."""
    owner, owner_id = _key(vault, tenant, "owner")
    _key(vault, tenant, "owner")  # a second unlimited owner: the last-owner rule is not it
    admin, admin_id = _key(vault, tenant, "admin")
    narrow, narrow_id = _key(vault, tenant, "owner", permissions=NARROW_OWNER)
    for token in (admin, narrow):
        r = client.delete(f"/v1/keys/{owner_id}", headers=_h(token))
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["details"]["rule"] == "key_hierarchy" and err["field"] == "key_id"
    assert "only an unlimited owner key" in err["message"]
    assert _alive(client, owner)
    assert "KEY_REVOKE" not in _audit(vault, tenant)  # refusals change and record nothing
    # an admin may not revoke the narrowed owner key either: it is still an owner key
    r = client.delete(f"/v1/keys/{narrow_id}", headers=_h(admin))
    assert r.status_code == 403 and "'admin'" in r.json()["error"]["message"], r.text
    # at or below its own role: an admin revokes an admin, a narrowed owner an admin
    other_admin, other_admin_id = _key(vault, tenant, "admin")
    r = client.delete(f"/v1/keys/{other_admin_id}", headers=_h(admin))
    assert r.status_code == 200 and not _alive(client, other_admin), r.text
    r = client.delete(f"/v1/keys/{admin_id}", headers=_h(narrow))
    assert r.status_code == 200 and not _alive(client, admin), r.text
    # a key may always revoke itself; an unlimited owner revokes a narrowed owner
    r = client.delete(f"/v1/keys/{narrow_id}", headers=_h(narrow))
    assert r.status_code == 200, r.text
    narrow2, narrow2_id = _key(vault, tenant, "owner", permissions=NARROW_OWNER)
    r = client.delete(f"/v1/keys/{narrow2_id}", headers=_h(owner))
    assert r.status_code == 200 and not _alive(client, narrow2), r.text
    # the library says the same
    member_id = _key(vault, tenant, "member")[1]
    admin_who = vault.authenticate(_key(vault, tenant, "admin")[0])
    with pytest.raises(Forbidden) as info:
        vault.revoke_key(owner_id, principal=admin_who)
    assert info.value.details["rule"] == "key_hierarchy"
    assert vault.revoke_key(member_id, principal=admin_who)["already_revoked"] is False


def test_the_last_owner_key_cannot_be_revoked_by_a_key(
        client: TestClient, vault: MemoryVault, tenant: str, settings: Settings) -> None:
    owner, owner_id = _key(vault, tenant, "owner")
    _key(vault, tenant, "owner", permissions=NARROW_OWNER)  # narrowed: does not count
    r = client.delete(f"/v1/keys/{owner_id}", headers=_h(owner))
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "conflict" and err["details"]["rule"] == "last_owner"
    assert "last owner key" in err["message"]
    assert _alive(client, owner) and "KEY_REVOKE" not in _audit(vault, tenant)
    _, second_id = _key(vault, tenant, "owner")
    r = client.delete(f"/v1/keys/{second_id}", headers=_h(owner))  # one remains: fine
    assert r.status_code == 200 and r.json()["last_owner"] is False, r.text
    r = client.delete(f"/v1/keys/{owner_id}", headers=_h(owner))
    assert r.status_code == 409
    third, third_id = _key(vault, tenant, "owner")
    r = client.delete(f"/v1/keys/{owner_id}", headers=_h(third))  # another unlimited one
    assert r.status_code == 200 and not _alive(client, owner), r.text
    # the local operator may revoke the last one (it can always make a new key): the CLI
    res = _cli(settings, "keys", "revoke", third_id, "--tenant", tenant)
    assert res.exit_code == 0, res.output
    assert "no unlimited owner key left" in res.output
    assert not _alive(client, third)
    rows = [json.loads(line) for line in _audit(vault, tenant).splitlines()]
    last = [x for x in rows if x["operation"] == "KEY_REVOKE"][-1]
    assert last["details"]["key_id"] == third_id and last["details"]["last_owner"] is True
    assert last["actor"] == "local"


def test_the_last_narrowed_owner_key_is_kept_too(client: TestClient, vault: MemoryVault,
                                                 tenant: str) -> None:
    narrow, narrow_id = _key(vault, tenant, "owner", permissions=NARROW_OWNER)
    r = client.delete(f"/v1/keys/{narrow_id}", headers=_h(narrow))
    assert r.status_code == 409 and r.json()["error"]["details"]["rule"] == "last_owner"
    res = vault.revoke_key(narrow_id, principal=vault.principal(tenant))
    assert res["last_owner"] is True and not _alive(client, narrow)


# -- key metadata shows personal values as placeholders (issue 19, item 6) -----------------
def test_limits_are_placeholders_without_pii_reveal(client: TestClient, vault: MemoryVault,
                                                    tenant: str, settings: Settings) -> None:
    owner, _ = _key(vault, tenant, "owner")
    admin, _ = _key(vault, tenant, "admin")
    r = client.post("/v1/keys", headers=_h(owner), json={
        "role": "member", "scope": "erin@example.org", "subject": "dana@example.org"})
    assert r.status_code == 201 and r.json()["subject"] == "dana@example.org", r.text
    limited_id = r.json()["key_id"]
    # an admin (no pii:reveal): the listing and the single view show the placeholders
    listed = {k["key_id"]: k for k in client.get("/v1/keys", headers=_h(admin)).json()["items"]}
    one = client.get(f"/v1/keys/{limited_id}", headers=_h(admin))
    assert one.status_code == 200, one.text
    for view in (listed[limited_id], one.json()):
        assert view["subject"].startswith("{email:p_") and view["scope"].startswith("{email:")
        assert view["subject"] != view["scope"]
    for text in (client.get("/v1/keys", headers=_h(admin)).text, one.text):
        assert "dana@" not in text and "erin@" not in text
    with vault.db.transaction(tenant) as conn:
        stored = conn.execute("SELECT subject_id FROM api_keys WHERE key_id = %s",
                              (uuid.UUID(limited_id),)).fetchone()["subject_id"]
    assert one.json()["subject"] == stored
    # a key an admin creates is shown to it the same way
    r = client.post("/v1/keys", headers=_h(admin), json={"role": "service",
                                                          "subject": "dana@example.org"})
    assert r.status_code == 201 and r.json()["subject"] == stored, r.text
    # with pii:reveal (an owner; the library's and the CLI's local operator) in clear
    one = client.get(f"/v1/keys/{limited_id}", headers=_h(owner)).json()
    assert (one["subject"], one["scope"]) == ("dana@example.org", "erin@example.org")
    admin_who = vault.authenticate(admin)
    assert vault.get_key(limited_id, principal=admin_who)["subject"] == stored
    by_lib = {k["key_id"]: k for k in vault.list_keys(principal=admin_who)["items"]}
    assert by_lib[limited_id]["subject"] == stored
    assert vault.get_key(limited_id, principal=vault.principal(tenant))["subject"] == (
        "dana@example.org")
    res = _cli(settings, "keys", "list", "--tenant", tenant, "--json")
    cli_items = {k["key_id"]: k for k in json.loads(res.stdout)["items"]}
    assert cli_items[limited_id]["subject"] == "dana@example.org"
    # a shredded value is [erased] for everyone
    vault.shred([stored], principal=vault.principal(tenant))
    for token in (admin, owner):
        one = client.get(f"/v1/keys/{limited_id}", headers=_h(token)).json()
        assert one["subject"] == "[erased]", one
    assert client.get(f"/v1/keys/{uuid.uuid4()}", headers=_h(admin)).status_code == 404
    member, _ = _key(vault, tenant, "member")
    r = client.get(f"/v1/keys/{limited_id}", headers=_h(member))
    assert r.status_code == 403 and r.json()["error"]["details"]["permission"] == "keys:manage"


def test_two_owners_revoking_each_other_leave_one(vault: MemoryVault, tenant: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Both revocations read the tenant's owner keys before either writes (the barrier):
    the lock on those rows makes the second wait for the first and see its revocation."""
    import contextlib
    import threading

    from mnemovault.store import tenants as tenants_store

    a, a_id = _key(vault, tenant, "owner")
    b, b_id = _key(vault, tenant, "owner")
    real = tenants_store.live_owner_keys
    barrier = threading.Barrier(2, timeout=3)

    def read_then_wait(conn: Any, t: str) -> list[dict[str, Any]]:
        rows = real(conn, t)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()  # the other revocation reads too, unless the lock holds it
        return rows

    monkeypatch.setattr(tenants_store, "live_owner_keys", read_then_wait)
    outcome: dict[str, str] = {}

    who = {a: vault.authenticate(a), b: vault.authenticate(b)}  # before either revokes

    def revoke(me: str, other_id: str) -> None:
        try:
            vault.revoke_key(other_id, principal=who[me])
            outcome[me] = "revoked"
        except Conflict as exc:
            outcome[me] = str(exc.details.get("rule"))

    threads = [threading.Thread(target=revoke, args=(a, b_id)),
               threading.Thread(target=revoke, args=(b, a_id))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcome.values()) == ["last_owner", "revoked"], outcome
    with vault.db.transaction(tenant) as conn:
        live = conn.execute("SELECT count(*) AS n FROM api_keys WHERE role = 'owner' "
                            "AND revoked_at IS NULL").fetchone()["n"]
    assert live == 1
