"""Bad input never reaches the database, and every error uses the envelope (issue 9,
faults 1 and 2): bounded timestamps, NUL and lone surrogates refused in every string a
caller can send, unknown fields and query parameters refused, malformed bodies, unknown
routes and methods answered in the envelope, and the retention job total over every
stored timestamp."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.errors import InternalError, MnemoError, ValidationError
from mnemovault.governance import retention
from mnemovault.vault import MemoryVault


@pytest.fixture(scope="module")
def client(vault: MemoryVault) -> TestClient:
    return TestClient(create_app(vault), raise_server_exceptions=False)


@pytest.fixture
def keys(vault: MemoryVault, tenant: str) -> dict[str, str]:
    return {role: vault.create_key(tenant, role)[0]  # type: ignore[arg-type]
            for role in ("owner", "member", "service")}


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _envelope(r: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message"}
    if field is not None:
        assert err.get("field") == field, err
    return dict(err)


def _count(vault: MemoryVault, tenant: str) -> int:
    with psycopg.connect(vault.db.url) as conn:
        row = conn.execute("SELECT count(*) FROM memories WHERE tenant_id = %s",
                           (tenant,)).fetchone()
    assert row is not None
    return int(row[0])


# -- timestamps ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-12:00", "1899-12-31T23:59:59Z",
                                   "9999-06-01T00:00:00Z"])
def test_out_of_range_created_at_is_refused_for_every_writer(
        client: TestClient, keys: dict[str, str], vault: MemoryVault, tenant: str,
        value: str) -> None:
    r = client.post("/v1/memories", headers=_h(keys["service"]),
                    json={"content": "x", "scope": "s", "created_at": value})
    err = _envelope(r, 422, "created_at")
    assert "1900" in err["message"] and "9999" in err["message"]
    assert _count(vault, tenant) == 0


def test_library_refuses_a_year_10000_timestamp(vault: MemoryVault, tenant: str) -> None:
    from datetime import timedelta, timezone

    late = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=12)))
    with pytest.raises(ValidationError) as err:
        vault.remember("x", scope="s", created_at=late, principal=vault.principal(tenant))
    assert err.value.field == "created_at"


@pytest.mark.parametrize("field", ["since", "until"])
def test_out_of_range_filter_times_are_refused(client: TestClient, keys: dict[str, str],
                                              field: str) -> None:
    r = client.post("/v1/recall", headers=_h(keys["member"]), json={
        "query": "q", "scope": "s", "filters": {field: "9999-12-31T23:59:59-12:00"}})
    _envelope(r, 422, f"filters.{field}")


def test_retention_is_total_over_old_timestamps(vault: MemoryVault, tenant: str) -> None:
    from unittest import mock

    from tests.test_retention import _id_at

    who = vault.principal(tenant)
    # idle time counts from the later of the record's time and when it was stored (the
    # id's time): stored at the epoch, written in 1930
    with mock.patch("mnemovault.memories.write.uuid7",
                    lambda: _id_at(datetime(1970, 1, 1, tzinfo=UTC))):
        old = vault.remember("written in 1930", scope="s", principal=who,
                             created_at=datetime(1930, 1, 1, tzinfo=UTC)).id
    res = vault.run_retention(principal=who)
    assert res.error is None and old in res.archived
    policy = retention.Policy()
    assert retention.score(10**9, 0, False, policy) >= 0.0


def test_a_failing_tenant_is_named_and_reported(vault: MemoryVault, tenant: str,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    real = retention.archive
    vault.remember("kept", scope="s", principal=vault.principal(tenant))

    def archive(conn: Any, policy: Any, now: Any, *, dry_run: bool = False) -> Any:
        row = conn.execute("SELECT mv_current_tenant() AS t").fetchone()
        if row["t"] == tenant:
            raise RuntimeError("injected")
        return real(conn, policy, now, dry_run=dry_run)

    monkeypatch.setattr(retention, "archive", archive)
    with caplog.at_level(logging.ERROR):
        results = vault.run_retention_all(dry_run=True)
    failed = [r for r in results if r.error is not None]
    assert [r.tenant for r in failed] == [tenant]
    assert failed[0].error is not None and failed[0].error["code"] == "internal"
    assert any(tenant in rec.getMessage() for rec in caplog.records)
    assert len(results) > 1  # the other tenants still ran


# -- strings ------------------------------------------------------------------------------
NUL = "a\x00b"
SURROGATE = "a\ud800b"


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/memories", {"content": "x", "scope": "s", "provenance": {"source": "BAD"}},
     "provenance.source"),
    ("/v1/memories", {"content": "x", "scope": "s", "provenance": {"agent": "BAD"}},
     "provenance.agent"),
    ("/v1/memories", {"content": "x", "scope": "s", "provenance": {"tags": ["BAD"]}},
     "provenance.tags"),
    ("/v1/memories", {"content": "x", "scope": "s", "provenance": {"extra": "BAD"}},
     "provenance"),
    ("/v1/memories", {"content": "BAD", "scope": "s"}, "content"),
    ("/v1/memories", {"content": "x", "scope": "BAD"}, "scope"),
    ("/v1/recall", {"query": "q", "scope": "BAD"}, "scope"),
    ("/v1/recall", {"query": "BAD", "scope": "s"}, "query"),
    ("/v1/recall", {"query": "q", "scope": "s", "filters": {"subject": "BAD"}},
     "filters.subject"),
    ("/v1/recall", {"query": "q", "scope": "s", "filters": {"tags": ["BAD"]}},
     "filters.tags"),
    ("/v1/forget/preview", {"query": "q", "scope": "BAD"}, "scope"),
    ("/v1/forget/preview", {"query": "BAD", "scope": "s"}, "query"),
    ("/v1/chat", {"message": "BAD", "scope": "s"}, "message"),
])
def test_bad_strings_in_bodies_are_refused(client: TestClient, keys: dict[str, str],
                                          vault: MemoryVault, tenant: str, path: str,
                                          body: dict[str, Any], field: str, bad: str) -> None:
    import json

    raw = json.dumps(body).replace("BAD", json.dumps(bad)[1:-1])
    r = client.post(path, headers={**_h(keys["owner"]), "Content-Type": "application/json"},
                    content=raw.encode())
    _envelope(r, 422, field)
    assert _count(vault, tenant) == 0


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/v1/memories", {"scope": NUL}, "scope"),
    ("/v1/memories", {"subject": NUL}, "subject"),
    ("/v1/vault", {"cursor": NUL}, "cursor"),
    ("/v1/memories", {"scope": "x" * 201}, "scope"),
    ("/v1/vault", {"cursor": "x" * 65}, "cursor"),
])
def test_bad_query_strings_are_refused(client: TestClient, keys: dict[str, str], path: str,
                                       params: dict[str, str], field: str) -> None:
    _envelope(client.get(path, headers=_h(keys["owner"]), params=params), 422, field)


def test_bad_placeholder_paths_are_refused(client: TestClient, keys: dict[str, str]) -> None:
    _envelope(client.get("/v1/vault/a%00b", headers=_h(keys["owner"])), 422, "placeholder")
    _envelope(client.get("/v1/vault/" + "x" * 65, headers=_h(keys["owner"])), 422,
              "placeholder")


def test_library_refuses_bad_strings_before_the_database(vault: MemoryVault,
                                                         tenant: str) -> None:
    who = vault.principal(tenant)
    calls = [
        (lambda: vault.list(scope=NUL, principal=who), "scope"),
        (lambda: vault.list(subject=SURROGATE, principal=who), "subject"),
        (lambda: vault.recall("q", scope=NUL, principal=who), "scope"),
        (lambda: vault.recall("q", scope="s", filters={"subject": SURROGATE},
                              principal=who), "filters.subject"),
        (lambda: vault.forget_preview(query="q", scope=NUL, principal=who), "scope"),
        (lambda: vault.vault_entries(cursor=NUL, principal=who), "cursor"),
        (lambda: vault.vault_entry(NUL, principal=who), "placeholder"),
        (lambda: vault.pin([str(uuid.uuid4())], scope=NUL, principal=who), "scope"),
    ]
    for call, field in calls:
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field


def test_the_library_raises_mnemovault_kinds_for_database_refusals(
        vault: MemoryVault, tenant: str) -> None:
    with pytest.raises(InternalError) as err, vault.db.transaction(tenant) as conn:
        conn.execute("SELECT 1/0")
    assert isinstance(err.value, MnemoError)
    assert isinstance(err.value.__cause__, psycopg.errors.DivisionByZero)
    assert "1/0" not in err.value.message


# -- unknown fields and parameters --------------------------------------------------------
def test_unknown_fields_are_refused_and_nothing_is_deleted(
        client: TestClient, keys: dict[str, str], vault: MemoryVault, tenant: str) -> None:
    mid = vault.remember("keep me", scope="s", principal=vault.principal(tenant)).id
    r = client.post("/v1/forget", headers=_h(keys["owner"]),
                    json={"ids": [str(mid)], "force": True})
    _envelope(r, 422, "force")
    assert vault.get(mid, principal=vault.principal(tenant)).content == "keep me"
    for path, body in [("/v1/recall", {"query": "q", "scope": "s", "top_k": 3}),
                       ("/v1/forget/preview", {"ids": [str(mid)], "x": 1}),
                       ("/v1/memories/batch", {"items": [{"content": "x", "scope": "s"}],
                                               "atomic": False})]:
        _envelope(client.post(path, headers=_h(keys["owner"]), json=body), 422)


def test_unknown_query_parameters_are_refused(client: TestClient,
                                              keys: dict[str, str]) -> None:
    r = client.get("/v1/memories", headers=_h(keys["owner"]), params={"scoep": "s"})
    _envelope(r, 422, "scoep")


# -- malformed requests, unknown routes and methods ---------------------------------------
def test_invalid_json_names_the_body(client: TestClient, keys: dict[str, str]) -> None:
    r = client.post("/v1/recall", headers={**_h(keys["owner"]),
                                           "Content-Type": "application/json"},
                    content=b'{"query": "q", "scope": ')
    err = _envelope(r, 422, "body")
    assert "JSON" in err["message"] and "character" in err["message"]


@pytest.mark.parametrize("content", [b'{"query": "\xff\xfe", "scope": "s"}',
                                     b"[" * 100_000 + b"]" * 100_000],
                         ids=["utf8", "nesting"])
def test_unparseable_bodies_use_the_envelope(client: TestClient, keys: dict[str, str],
                                             content: bytes) -> None:
    r = client.post("/v1/recall", headers={**_h(keys["owner"]),
                                           "Content-Type": "application/json"},
                    content=content)
    err = _envelope(r, 422, "body")
    assert err["code"] == "validation"


def test_unknown_routes_and_methods_use_the_envelope(client: TestClient) -> None:
    assert _envelope(client.get("/v1/nope"), 404)["code"] == "not_found"
    r = client.put("/v1/recall", json={})
    assert _envelope(r, 405)["code"] == "method_not_allowed"
    assert "POST" in r.headers.get("allow", "")


@pytest.mark.parametrize("raw", [b'{"content": "x", "scope": "s", "provenance": {"n": 1e400}}',
                                 b'{"content": "x", "scope": "s", "provenance": {"n": -1e400}}',
                                 b'{"content": "x", "scope": "s", "provenance": {"n": '
                                 b'12345678901234567890}}'],
                         ids=["inf", "-inf", "big-int"])
def test_numbers_json_cannot_hold_are_refused(client: TestClient, keys: dict[str, str],
                                             vault: MemoryVault, tenant: str,
                                             raw: bytes) -> None:
    r = client.post("/v1/memories", headers={**_h(keys["owner"]),
                                             "Content-Type": "application/json"}, content=raw)
    _envelope(r, 422, "provenance")
    assert _count(vault, tenant) == 0


def test_lax_numbers_and_repeated_parameters_are_refused(client: TestClient,
                                                         keys: dict[str, str]) -> None:
    h = _h(keys["owner"])
    for k in ("3", 3.0, True):
        r = client.post("/v1/recall", headers=h, json={"query": "q", "scope": "s", "k": k})
        _envelope(r, 422, "k")
    r = client.get("/v1/memories", headers=h, params=[("scope", "a"), ("scope", "b")])
    _envelope(r, 422, "scope")


def test_a_subject_limited_key_cannot_list_another_subject(
        client: TestClient, vault: MemoryVault, tenant: str) -> None:
    token = vault.create_key(tenant, "member", subject="ana")[0]
    r = client.get("/v1/memories", headers=_h(token), params={"subject": "bob"})
    _envelope(r, 403, "subject")
    assert client.get("/v1/memories", headers=_h(token),
                      params={"subject": "ana"}).status_code == 200
