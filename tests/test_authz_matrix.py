"""The authorisation matrix (SPEC section 11), generated from the OpenAPI document: every
operation × every role (owner, admin, member, service) × no key.

Each operation's required permissions live in one table here, ``TABLE``, keyed by
(method, path), with a valid minimal request for each; an operation in the OpenAPI document
but not in the table fails (that is how a new endpoint gets covered), and so does a table
entry no longer in the document. For each cell:

- no key: 401 in the error envelope (``/health`` and the docs need none);
- a role lacking a permission: 403 in the envelope, naming the first permission it lacks
  (``details.permission`` and the message);
- a role holding them all: the request succeeds (2xx: so never 401 or 403).

The roles' permissions come from :data:`mnemovault.auth.ROLE_PERMISSIONS`, which
``test_roles_match_the_spec`` checks against SPEC section 11's table.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.auth import ROLE_PERMISSIONS, ROLES
from mnemovault.vault import MemoryVault


@dataclass
class World:
    """A tenant of this module's own: a key per role, a client, and helpers that make the
    rows a request needs (fresh for every cell, since some requests delete them)."""

    vault: MemoryVault
    client: TestClient
    tenant: str
    tokens: dict[str, str]
    _n: Iterator[int] = field(default_factory=itertools.count)

    def headers(self, role: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}

    def owner_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(path, json=body, headers=self.headers("owner"))
        assert r.status_code in (200, 201), r.text
        return cast(dict[str, Any], r.json())

    def memory(self) -> str:
        """A new memory in scope ``m`` that names a person's email address (so it has a
        vault entry and ``reveal`` has something to reveal); its id."""
        n = next(self._n)
        receipt = self.owner_post("/v1/memories", {
            "content": f"Write to ada{n}@example.org about the garden plan.", "scope": "m"})
        return str(receipt["id"])

    def placeholder(self) -> str:
        """A new vault entry (a fresh email address); its placeholder."""
        n = next(self._n)
        receipt = self.owner_post("/v1/memories", {
            "content": f"Grace's address is grace{n}@example.org.", "scope": "m"})
        return str(receipt["placeholders"][0])


@dataclass(frozen=True)
class Request:
    path_params: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Access:
    """``needs``: the permissions the operation checks, in the order it checks them
    (``None``: public, no key needed); ``request``: a valid minimal request."""

    needs: tuple[str, ...] | None
    request: Callable[[World], Request] = lambda w: Request()
    label: str = ""


PUBLIC = None
OFF = ("off",)  # a public operation that is off by default: 403 for everyone


def _id(w: World) -> Request:
    return Request(path_params={"memory_id": w.memory()})


def _new_key_id(w: World) -> str:
    """The id of a new service key of the world's tenant (one to revoke)."""
    created: Any = w.vault.create_key(w.tenant, "service")
    return str(created.key_id if hasattr(created, "key_id") else created[1])


def _pending(w: World) -> str:
    """The id of a new memory held by the review gate (REQUIRE_REVIEW on for its write),
    written by the service key: a reviewer may not approve its own capture."""
    settings = w.vault.settings
    w.vault.settings = settings.model_copy(update={"require_review": True})
    try:
        r = w.client.post("/v1/memories", headers=w.headers("service"),
                          json={"content": "The garden plan is due in May.", "scope": "m"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])
    finally:
        w.vault.settings = settings


def _tenant_op(w: World, *, job: bool = False, live: bool = False) -> Request:
    """A request on the world's own tenant with its typed confirmation; ``job``: with the
    id of a new export job; ``live``: first cancel the deletion an earlier cell made (the
    owner's cell soft-deletes the tenant, which would lock every later cell out)."""
    if live:
        w.vault.tenants.cancel_delete(w.tenant)
    params = {"tenant_id": w.tenant}
    if job:
        params["job_id"] = w.vault.tenants.export(w.tenant, confirm=f"DELETE-{w.tenant}")[
            "job_id"]
    return Request(path_params=params, json={"confirm": f"DELETE-{w.tenant}"})


def _chat(message: str | None = None, **extra: Any) -> Callable[[World], Request]:
    def build(w: World) -> Request:
        text = message.format(id=w.memory()) if message else "what about the garden?"
        return Request(json={"message": text, "scope": "m", **extra})
    return build


def _completion(*, headers: dict[str, str] | None = None,
                **extra: Any) -> Callable[[World], Request]:
    return lambda w: Request(headers=headers or {}, json={
        "model": "mnemovault:m", **extra,
        "messages": [{"role": "user", "content": "what about the garden?"}]})


def _procedure(w: World, run: bool = False) -> str:
    """A new procedure (tests/test_procedures.py covers the rest); its id, or with ``run``
    the id of a run recorded on it."""
    steps = {"nodes": [{"id": "a", "tool": "water_garden"}]}
    pid = str(w.owner_post("/v1/procedures", {"question": "water the garden?", "scope": "m",
                                               "steps": steps})["id"])
    return str(w.owner_post(f"/v1/procedures/{pid}/runs", {"verdict": "success"})["run_id"]
               ) if run else pid


# (method, path) -> each way of calling it that needs a different set of permissions
TABLE: dict[tuple[str, str], list[Access]] = {
    ("GET", "/health"): [Access(PUBLIC)],
    ("POST", "/v1/memories"): [Access(("memory:write",), lambda w: Request(
        json={"content": "The garden needs water on Fridays.", "scope": "m"}))],
    ("POST", "/v1/memories/batch"): [Access(("memory:write",), lambda w: Request(
        json={"items": [{"content": "Tomatoes go in the south bed.", "scope": "m"}]}))],
    ("GET", "/v1/memories"): [Access(("memory:read",), lambda w: Request(
        params={"scope": "m", "limit": 1}))],
    ("GET", "/v1/memories/{memory_id}"): [
        Access(("memory:read",), _id),
        Access(("memory:read", "pii:reveal"), lambda w: Request(
            path_params={"memory_id": w.memory()}, params={"reveal": "true"}), "reveal"),
    ],
    ("DELETE", "/v1/memories/{memory_id}"): [Access(("memory:forget",), _id)],
    ("POST", "/v1/memories/{memory_id}/pin"): [Access(("memory:forget",), _id)],
    ("POST", "/v1/memories/{memory_id}/unpin"): [Access(("memory:forget",), _id)],
    ("POST", "/v1/recall"): [
        Access(("memory:read",), lambda w: Request(json={"query": "garden", "scope": "m"})),
        Access(("memory:read", "pii:reveal"), lambda w: Request(
            json={"query": "garden", "scope": "m", "reveal": True}), "reveal"),
    ],
    ("GET", "/v1/wake"): [Access(("memory:read",), lambda w: Request(params={"scope": "m"}))],
    # the body forms of the GETs that can carry a subject (issue 22: no subject in a URL)
    ("POST", "/v1/wake"): [Access(("memory:read",), lambda w: Request(json={"scope": "m"}))],
    ("POST", "/v1/timeline"): [Access(("memory:read",), lambda w: Request(
        json={"scope": "m", "limit": 1}))],
    ("POST", "/v1/memories/list"): [Access(("memory:read",), lambda w: Request(
        json={"scope": "m", "subject": "ada@example.org", "limit": 1}))],
    ("POST", "/v1/subjects/memories"): [Access(("memory:read",), lambda w: Request(
        json={"subject": "ada@example.org", "scope": "m", "limit": 1}))],
    ("POST", "/v1/subjects/export"): [Access(("subject:erase",), lambda w: Request(
        json={"subject": "ada@example.org", "scope": "m"}))],
    ("POST", "/v1/subjects/erase"): [Access(("subject:erase",), lambda w: Request(
        json={"subject": f"ada{next(w._n)}@example.org", "scope": "m"}))],
    # needs no key, and is off by default (tests/test_edge.py covers it when on)
    ("POST", "/v1/agents/register"): [Access(OFF, lambda w: Request(json={"name": "bot"}))],
    ("GET", "/v1/timeline"): [Access(("memory:read",), lambda w: Request(
        params={"scope": "m", "limit": 1}))],
    ("GET", "/v1/vault"): [Access(("memory:read",), lambda w: Request(params={"limit": 1}))],
    ("GET", "/v1/vault/export"): [Access(("admin:export", "pii:reveal"))],
    ("GET", "/v1/vault/{placeholder}"): [
        Access(("memory:read",), lambda w: Request(
            path_params={"placeholder": w.placeholder()})),
        Access(("memory:read", "pii:reveal"), lambda w: Request(
            path_params={"placeholder": w.placeholder()}, params={"reveal": "true"}),
            "reveal"),
    ],
    ("DELETE", "/v1/vault/{placeholder}"): [Access(("subject:erase",), lambda w: Request(
        path_params={"placeholder": w.placeholder()}))],
    ("GET", "/v1/admin/audit/export"): [Access(("audit:read",), lambda w: Request(
        params={"from": 1, "to": 1}))],
    ("GET", "/v1/admin/audit/checkpoint"): [Access(("audit:read",))],
    ("POST", "/v1/admin/pii/watch"): [Access(("subject:erase",), lambda w: Request(
        json={"dry_run": True}))],
    ("POST", "/v1/admin/audit/checkpoint"): [Access(("audit:read",))],
    ("POST", "/v1/admin/librarian/run"): [Access(("memory:write", "memory:forget"),
                                                 lambda w: Request(json={"dry_run": True}))],
    ("GET", "/v1/admin/audit/proof/inclusion"): [Access(("audit:read",), lambda w: Request(
        params={"seq": 1, "size": 1}))],
    ("GET", "/v1/admin/audit/proof/consistency"): [Access(("audit:read",), lambda w: Request(
        params={"first": 1, "second": 2}))],
    ("POST", "/v1/keys"): [Access(("keys:manage",), lambda w: Request(
        json={"role": "service"}))],
    ("GET", "/v1/keys"): [Access(("keys:manage",), lambda w: Request(params={"limit": 1}))],
    ("GET", "/v1/keys/{key_id}"): [Access(("keys:manage",), lambda w: Request(
        path_params={"key_id": _new_key_id(w)}))],
    ("DELETE", "/v1/keys/{key_id}"): [Access(("keys:manage",), lambda w: Request(
        path_params={"key_id": _new_key_id(w)}))],
    ("POST", "/v1/chat"): [
        Access(("memory:read", "memory:write"), _chat()),
        Access(("memory:read",), _chat(store=False), "store=false"),
        Access(("memory:read", "pii:reveal"), _chat(reveal=True, store=False), "reveal"),
        Access(("memory:read", "memory:forget"), _chat("PIN: {id}"), "PIN command"),
    ],
    ("POST", "/v1/chat/stream"): [
        Access(("memory:read", "memory:write"), _chat()),
        Access(("memory:read", "pii:reveal"), _chat(reveal=True, store=False), "reveal"),
        Access(("memory:read", "memory:forget"), _chat("FORGET: {id}"), "FORGET command"),
    ],
    # OpenAI-compatible: any valid key may list models
    ("GET", "/v1/models"): [Access(())],
    ("GET", "/v1/models/{model}"): [Access((), lambda w: Request(
        path_params={"model": "mnemovault:m"}))],
    ("POST", "/v1/chat/completions"): [
        Access(("memory:read", "memory:write"), _completion()),
        Access(("memory:read",), _completion(store=False), "store=false"),
        Access(("memory:read", "pii:reveal"), _completion(
            store=False, headers={"X-Mnemovault-Reveal": "true"}), "reveal"),
    ],
    ("POST", "/v1/forget/preview"): [Access(("memory:read",), lambda w: Request(
        json={"ids": [w.memory()]}))],
    ("POST", "/v1/forget"): [Access(("memory:forget",), lambda w: Request(
        json={"ids": [w.memory()]}))],
    # subject rights (tests/test_erase.py and friends cover the behaviour)
    ("POST", "/v1/subjects/{subject}/erase"): [Access(("subject:erase",), lambda w: Request(
        path_params={"subject": f"ada{next(w._n)}@example.org"}, json={"scope": "m"}))],
    ("POST", "/v1/scopes/{scope}/erase"): [Access(("subject:erase",), lambda w: (lambda z: Request(
        path_params={"scope": z}, json={"confirm": z}))(f"gone{next(w._n)}"))],
    ("GET", "/v1/subjects/{subject}/memories"): [Access(("memory:read",), lambda w: Request(
        path_params={"subject": "ada@example.org"}, params={"scope": "m", "limit": 1}))],
    ("GET", "/v1/subjects/{subject}/export"): [
        Access(("subject:erase",), lambda w: Request(
            path_params={"subject": "ada@example.org"}, params={"scope": "m"})),
        Access(("subject:erase", "pii:reveal"), lambda w: Request(
            path_params={"subject": "ada@example.org"},
            params={"scope": "m", "reveal": "true"}), "reveal"),
    ],
    ("PUT", "/v1/memories/{memory_id}/content"): [Access(("subject:erase",), lambda w: Request(
        path_params={"memory_id": w.memory()}, json={"content": "The garden plan changed."}))],
    ("POST", "/v1/admin/tenants/{tenant_id}/export"): [Access(("admin:export",), _tenant_op)],
    ("GET", "/v1/admin/tenants/{tenant_id}/export/{job_id}"): [Access(
        ("admin:export",), lambda w: _tenant_op(w, job=True))],
    ("POST", "/v1/admin/tenants/{tenant_id}/delete"): [Access(
        ("admin:delete",), lambda w: _tenant_op(w, live=True))],
    ("POST", "/v1/admin/tenants/{tenant_id}/delete/cancel"): [Access(
        ("admin:delete",), lambda w: _tenant_op(w, live=True))],
    ("POST", "/v1/procedures"): [Access(("memory:write",), lambda w: Request(json={
        "question": "water the garden?", "scope": "m",
        "steps": {"nodes": [{"id": "a", "tool": "water_garden"}]}}))],
    ("GET", "/v1/procedures/{procedure_id}"): [Access(("memory:read",), lambda w: Request(
        path_params={"procedure_id": _procedure(w)}))],
    ("POST", "/v1/procedures/recall"): [Access(("memory:read",), lambda w: Request(
        json={"question": "garden", "scope": "m"}))],
    ("POST", "/v1/procedures/{procedure_id}/runs"): [Access(("memory:write",), lambda w: Request(
        path_params={"procedure_id": _procedure(w)}, json={"verdict": "success"}))],
    ("POST", "/v1/runs/{run_id}/feedback"): [Access(("memory:write",), lambda w: Request(
        path_params={"run_id": _procedure(w, run=True)}, json={"accuracy": 1}))],
    ("POST", "/v1/runs/{run_id}/evaluate"): [Access(("memory:write",), lambda w: Request(
        path_params={"run_id": _procedure(w, run=True)},
        json={"question": "water the garden?", "answer": "watered"}))],
    ("POST", "/v1/procedures/{procedure_id}/versions"): [Access(("memory:write",),
        lambda w: Request(path_params={"procedure_id": _procedure(w)},
                          json={"steps": {"nodes": [{"id": "b", "tool": "weed"}]}}))],
    ("POST", "/v1/procedures/prune"): [Access(("memory:forget",), lambda w: Request(
        json={"runs_days": 30, "dry_run": True}))],
    # the review queue (tests/test_review_gate.py covers the behaviour)
    ("GET", "/v1/review"): [Access(("review:approve",), lambda w: Request(params={"limit": 1}))],
    ("POST", "/v1/review/{memory_id}/approve"): [Access(("review:approve",), lambda w: Request(
        path_params={"memory_id": _pending(w)}, json={"comment": "looks right"}))],
    ("POST", "/v1/review/{memory_id}/reject"): [Access(("review:approve",), lambda w: Request(
        path_params={"memory_id": _pending(w)}))],
}

# pages that are not operations of the document and need no key
PUBLIC_PAGES = ("/docs", "/openapi.json")


def _operations() -> list[tuple[str, str]]:
    """(METHOD, path) of every operation in the app's OpenAPI document (building the
    document needs no vault)."""
    doc = create_app(cast(MemoryVault, None)).openapi()
    return [(method.upper(), path) for path, ops in doc["paths"].items() for method in ops
            if method in ("get", "put", "post", "delete", "patch", "head", "options")]


OPERATIONS = _operations()


def _cells() -> Iterator[Any]:
    for op in OPERATIONS:
        for n, access in enumerate(TABLE.get(op, [Access(())])):
            for role in (*ROLES, None):
                label = f" [{access.label}]" if access.label else ""
                yield pytest.param(op, n, role, id=f"{op[0]} {op[1]}{label} {role or 'no-key'}")


@pytest.fixture(scope="module")
def world(vault: MemoryVault) -> World:
    tenant = f"authz-{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(tenant)
    tokens = {}
    for role in ROLES:
        created: Any = vault.create_key(tenant, role)
        tokens[role] = str(created.token if hasattr(created, "token") else created[0])
    w = World(vault=vault, client=TestClient(create_app(vault)), tenant=tenant,
              tokens=tokens)
    for _ in range(2):  # audit rows for the proofs, and a signed checkpoint
        w.memory()
    w.owner_post("/v1/admin/audit/checkpoint", {})
    return w


def _envelope(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text[:300]}"
    body = r.json()
    assert set(body) <= {"error", "request_id"}, body
    err = body["error"]
    assert err["code"] == code and isinstance(err["message"], str) and err["message"], body
    return cast(dict[str, Any], err)


def test_every_operation_is_in_the_table() -> None:
    missing = sorted(set(OPERATIONS) - set(TABLE))
    stale = sorted(set(TABLE) - set(OPERATIONS))
    assert not missing, (f"operations without an entry in TABLE (add their permissions and a "
                         f"minimal request): {missing}")
    assert not stale, f"TABLE entries for operations the API no longer has: {stale}"


def test_roles_match_the_spec() -> None:
    """SPEC section 11's table, written out once more: the matrix's expectations derive
    from ROLE_PERMISSIONS, so this pins ROLE_PERMISSIONS to the spec."""
    spec = {
        "memory:read": "owner admin member service", "memory:write": "owner admin member service",
        "memory:forget": "owner admin member", "pii:reveal": "owner",
        "review:approve": "owner admin", "audit:read": "owner admin",
        "keys:manage": "owner admin", "admin:export": "owner admin",
        "subject:erase": "owner admin", "admin:delete": "owner",
    }
    for role in ROLES:
        assert ROLE_PERMISSIONS[role] == {p for p, who in spec.items()
                                          if role in who.split()}, role


@pytest.mark.parametrize(("op", "variant", "role"), list(_cells()))
def test_cell(world: World, op: tuple[str, str], variant: int, role: str | None) -> None:
    assert op in TABLE, f"{op[0]} {op[1]} is not in TABLE: add its permissions"
    access = TABLE[op][variant]
    req = access.request(world)
    method, path = op
    url = path.format(**req.path_params)
    r = world.client.request(method, url, params=req.params or None, json=req.json,
                             headers={**req.headers, **world.headers(role)})
    if access.needs is PUBLIC:
        assert r.status_code == 200, r.text[:300]
        return
    if access.needs is OFF:
        _envelope(r, 403, "forbidden")
        return
    if role is None:
        _envelope(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"] == "Bearer"
        return
    lacking = [p for p in access.needs if p not in ROLE_PERMISSIONS[role]]
    if lacking:
        err = _envelope(r, 403, "forbidden")
        assert err["details"]["permission"] == lacking[0], err
        assert lacking[0] in err["message"], err
    else:
        assert 200 <= r.status_code < 300, f"{r.status_code}: {r.text[:300]}"


@pytest.mark.parametrize("path", PUBLIC_PAGES)
def test_docs_need_no_key(world: World, path: str) -> None:
    assert world.client.get(path).status_code == 200
