"""The edge of the HTTP API (issue 22): body limits before authentication and parsing,
request ids, no personal data in logs or the audit chain, rate limits, telemetry."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import quote

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.api.edge import BATCH_LIMIT, CONTENT_LIMIT, REQUEST_ID_RE
from mnemovault.config import Settings
from mnemovault.vault import MemoryVault
from tests.servers import serve


@pytest.fixture(scope="module")
def app(vault: MemoryVault) -> FastAPI:
    return create_app(vault)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> TestClient:
    return TestClient(app)


@pytest.fixture
def owner(vault: MemoryVault, tenant: str) -> str:
    return vault.create_key(tenant, "owner")[0]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- driving the ASGI app directly: what it reads of the body ------------------------------
def _asgi(app: Any, method: str, path: str, headers: dict[str, str],
          chunks: Iterator[bytes]) -> tuple[int, dict[str, str], bytes, int]:
    """One request straight into the ASGI app, its body given chunk by chunk as the app asks
    (``more_body`` until ``chunks`` ends). Returns (status, headers, body, chunks read)."""
    read = 0
    out: dict[str, Any] = {"status": 0, "headers": {}, "body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal read
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 80), "state": {},
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    anyio.run(app, scope, receive, send)
    return out["status"], out["headers"], out["body"], read


def _endless(size: int = 65536, total: int = 64 << 20) -> Iterator[bytes]:
    """A body far over every limit but the batch's (64 MiB), in ``size`` chunks."""
    chunk = b"x" * size
    for _ in range(total // size):
        yield chunk


def test_default_limits_derive_from_the_models() -> None:
    s = Settings()
    # a little over the largest valid request of each class, far less for the rest
    assert CONTENT_LIMIT <= s.max_body_content_bytes < 2 * CONTENT_LIMIT
    assert s.max_body_batch_bytes == BATCH_LIMIT > 1000 * 100_000
    assert s.max_body_bytes < s.max_body_content_bytes < s.max_body_large_bytes


def test_content_length_over_the_limit_is_413_before_auth(client: TestClient) -> None:
    big = b"x" * (2 * 1024 * 1024)
    huge = b"x" * (17 * 1024 * 1024)
    for path, body in (("/v1/memories", big), ("/v1/recall", big),
                       ("/v1/chat/completions", huge), ("/v1/chat/stream", huge)):
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413, (path, r.text)
        body = r.json()
        assert body["error"]["code"] == "too_large" and body["error"]["field"] == "body"
        assert body["request_id"] == r.headers["x-request-id"]
        assert r.headers["connection"] == "close"
    # 2 MiB is under the chat and batch limits: there it is the missing key that answers
    for path in ("/v1/chat/completions", "/v1/memories/batch"):
        assert client.post(path, content=big).status_code == 401


def test_unauthenticated_body_is_never_read(app: FastAPI) -> None:
    # no Content-Length, a body that never ends: the edge answers 401 having read nothing
    status, headers, body, read = _asgi(app, "POST", "/v1/memories/batch",
                                        {"content-type": "application/json"}, _endless())
    assert status == 401 and read == 0, (status, read)
    assert json.loads(body)["error"]["code"] == "unauthenticated"
    assert headers["www-authenticate"] == "Bearer"
    status, _, _, read = _asgi(app, "POST", "/v1/memories", {"authorization": "Bearer nope",
                                                             "transfer-encoding": "chunked"},
                               _endless())
    assert status == 401 and read == 0
    # the MCP endpoint likewise
    status, _, _, read = _asgi(app, "POST", "/mcp", {}, _endless())
    assert status == 401 and read == 0


def test_chunked_body_is_cut_at_the_limit(app: FastAPI, owner: str,
                                          vault: MemoryVault) -> None:
    limit = vault.settings.max_body_content_bytes
    status, headers, body, read = _asgi(app, "POST", "/v1/memories", _auth(owner),
                                        _endless(65536))
    assert status == 413, body
    assert headers["connection"] == "close"
    assert json.loads(body)["error"]["details"]["limit_bytes"] == limit
    assert read == limit // 65536 + 1  # the chunk that crossed it, and not one more
    for path in ("/v1/chat/completions", "/v1/chat/stream"):
        status, _, _, read = _asgi(app, "POST", path, _auth(owner), _endless(1 << 20))
        assert status == 413 and read == vault.settings.max_body_large_bytes // (1 << 20) + 1


def test_largest_valid_requests_pass(client: TestClient, owner: str, tenant: str) -> None:
    # one memory of 100,000 characters, each sent as a 6-byte JSON escape
    content = "é" * 100_000
    body = json.dumps({"content": content, "scope": "big"})  # ensure_ascii: \\u00e9
    assert len(body) > 600_000
    r = client.post("/v1/memories", content=body, headers={**_auth(owner),
                                                           "content-type": "application/json"})
    assert r.status_code == 201, r.text[:300]
    # a batch over the single-memory limit
    items = [{"content": f"item {n} " + "lorem ipsum " * 8000, "scope": "big"}
             for n in range(12)]
    r = client.post("/v1/memories/batch", json={"items": items}, headers=_auth(owner))
    assert len(r.request.content) > CONTENT_LIMIT
    assert r.status_code == 201, r.text[:300]


def test_connection_is_closed_after_413(vault: MemoryVault) -> None:
    """Over a real socket: a chunked body over the limit is answered 413 and the server
    closes the connection instead of reading the rest."""
    with serve(create_app(vault)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            # the key is checked first: 401 without reading, and closed (a body follows)
            reply = _read_all(sock, b"x" * 65536)
        assert reply.startswith(b"HTTP/1.1 401"), reply[:100]
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n"
                         b"Content-Type: application/json\r\n\r\n")
            reply = _read_all(sock, b"x" * 65536, chunked=False)
        assert reply.startswith(b"HTTP/1.1 413"), reply[:100]
        assert b"connection: close" in reply.lower()


def _read_all(sock: socket.socket, chunk: bytes, *, chunked: bool = True) -> bytes:
    """Send ``chunk`` repeatedly until the server answers, then read until it closes."""
    sock.setblocking(False)
    reply = b""
    frame = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk
    for _ in range(2000):
        try:
            got = sock.recv(65536)
            if not got:
                return reply
            reply += got
            continue
        except BlockingIOError:
            pass
        except ConnectionResetError:
            return reply
        if reply:
            anyio.run(anyio.sleep, 0.01)
            continue
        try:
            sock.send(frame)
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            anyio.run(anyio.sleep, 0.01)
    raise AssertionError(f"the server did not close the connection: {reply[:200]!r}")


def test_request_id_safe_shape(client: TestClient) -> None:
    assert REQUEST_ID_RE.match("req-1.2:a_B") and not REQUEST_ID_RE.match("a" * 65)
    r = client.get("/health", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    for bad in ("ana@example.org", "a b", "a" * 65, "ü"):
        r = client.get("/health", headers={"x-request-id": bad.encode("utf-8")})
        assert r.headers["x-request-id"] != bad and REQUEST_ID_RE.match(
            r.headers["x-request-id"])


# -- no personal data in any log -----------------------------------------------------------
def _audit_bytes(vault: MemoryVault, tenant: str) -> bytes:
    """Every audit row of the tenant as stored, and every audit mirror file."""
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT row_bytes FROM audit_log WHERE tenant_id = %s",
                            (tenant,)).fetchall()
    out = b"\n".join(bytes(r["row_bytes"] if isinstance(r, dict) else r[0]) for r in rows)
    mirror = vault.settings.audit_jsonl_dir or vault.settings.data_dir / "audit"
    for f in sorted(mirror.glob("*")) if mirror.is_dir() else []:
        if f.is_file():
            out += b"\n" + f.read_bytes()
    return out


def test_no_personal_data_in_logs_or_audit(client: TestClient, owner: str, tenant: str,
                                           vault: MemoryVault,
                                           caplog: pytest.LogCaptureFixture) -> None:
    email = f"ana.{uuid.uuid4().hex[:8]}@example.org"
    caplog.set_level(logging.DEBUG)
    h = {**_auth(owner), "x-request-id": email}
    r = client.post("/v1/memories", headers=h, json={
        "content": f"Ana's address is {email}", "scope": "s", "subject": email})
    assert r.status_code == 201, r.text
    assert r.headers["x-request-id"] != email
    q = quote(email)
    for method, path, kw in (
            ("GET", f"/v1/subjects/{q}/memories", {"params": {"scope": "s"}}),
            ("GET", f"/v1/subjects/{q}/export", {"params": {"scope": "s"}}),
            ("GET", "/v1/wake", {"params": {"scope": "s", "subject": email}}),
            ("GET", "/v1/timeline", {"params": {"scope": "s", "subject": email}}),
            ("GET", "/v1/memories", {"params": {"scope": "s", "subject": email}}),
            ("GET", "/v1/memories", {"params": {"scope": "s", email: "1"}}),  # 422
            ("GET", f"/v1/nowhere/{q}", {}),  # 404
            ("DELETE", f"/v1/subjects/{q}/erase", {}),  # 405
            ("POST", f"/v1/subjects/{q}/erase", {"json": {"scope": "s"}})):
        r = client.request(method, path, headers=h, **kw)
        assert r.status_code < 500, (path, r.text)
        assert email not in r.headers["x-request-id"]
    assert r.status_code == 200 and r.json()["deleted"], r.text
    # everything the server side logged (the test's own HTTP client logs its URLs)
    logged = "\n".join(f"{rec.name} {rec.getMessage()} {rec.exc_text or ''}"
                        for rec in caplog.records if not rec.name.startswith("httpx"))
    assert email not in logged and q not in logged
    assert "POST /v1/subjects/{subject}/erase 200" in logged
    assert "GET /v1/wake 200" in logged and "GET /v1/memories 422" in logged
    assert "(unmatched) 404" in logged and "DELETE /v1/subjects/{subject}/erase 405" in logged
    stored = _audit_bytes(vault, tenant)
    assert stored and email.encode() not in stored and q.encode() not in stored
    # a request id of the safe shape is kept, in the answer and the audit row
    r = client.post("/v1/memories", headers={**_auth(owner), "x-request-id": "req-42.a:b"},
                    json={"content": "Bo likes tea", "scope": "s"})
    assert r.headers["x-request-id"] == "req-42.a:b"
    assert b"req-42.a:b" in _audit_bytes(vault, tenant)


def test_subject_in_the_body_or_as_placeholder(client: TestClient, owner: str) -> None:
    email = f"cy.{uuid.uuid4().hex[:8]}@example.org"
    h = _auth(owner)
    made = client.post("/v1/memories/batch", headers=h, json={"items": [
        {"content": f"Cy can be reached at {email}", "scope": "s", "subject": email},
        {"content": "Cy swims on Tuesdays", "scope": "s", "subject": email},
        {"content": "Dee swims too", "scope": "s", "subject": "dee"}]})
    assert made.status_code == 201, made.text
    ids = {m["id"] for m in made.json()[:2]}
    old = client.get(f"/v1/subjects/{quote(email)}/memories", headers=h,
                     params={"scope": "s"}).json()
    new = client.post("/v1/subjects/memories", headers=h,
                      json={"subject": email, "scope": "s"}).json()
    assert {m["id"] for m in new["items"]} == {m["id"] for m in old["items"]} == ids
    assert client.post("/v1/memories/list", headers=h, json={
        "scope": "s", "subject": email}).json()["items"] == client.get(
        "/v1/memories", headers=h, params={"scope": "s", "subject": email}).json()["items"]
    wake = client.post("/v1/wake", headers=h, json={"scope": "s", "subject": email})
    by_get = client.get("/v1/wake", headers=h, params={"scope": "s", "subject": email})
    assert wake.status_code == 200 and {m["id"] for m in wake.json()["records"]} == {
        m["id"] for m in by_get.json()["records"]} == ids
    tl = client.post("/v1/timeline", headers=h, json={"scope": "s", "subject": email})
    assert {m["id"] for m in tl.json()["items"]} == ids
    export = client.post("/v1/subjects/export", headers=h,
                         json={"subject": email, "scope": "s"})
    assert export.status_code == 200, export.text
    # the subject's placeholder stands for it in a path
    placeholder = new["items"][0]["subject"]
    assert placeholder != email and placeholder.startswith("{")
    by_placeholder = client.get(f"/v1/subjects/{quote(placeholder)}/memories", headers=h,
                                params={"scope": "s"}).json()
    assert {m["id"] for m in by_placeholder["items"]} == ids
    erased = client.post("/v1/subjects/erase", headers=h,
                         json={"subject": email, "scope": "s"})
    assert erased.status_code == 200 and set(erased.json()["deleted"]) >= ids, erased.text
    left = client.post("/v1/memories/list", headers=h, json={"scope": "s"}).json()["items"]
    assert [m["content"] for m in left] == ["Dee swims too"]


# -- rate limits ---------------------------------------------------------------------------
# Budgets in the tests are per day: a sliding-window counter weighs the previous window's
# count by how much of it is left, so a test that crossed a minute's boundary would see
# its earlier requests count a little less than one each.
@contextlib.contextmanager
def _app_with(vault: MemoryVault, **settings: Any) -> Iterator[TestClient]:
    """A fresh app whose edge reads ``settings`` (its budgets are made at the first
    request, which runs while the vault's settings are swapped)."""
    before = vault.settings
    vault.settings = before.model_copy(update=settings)
    try:
        client = TestClient(create_app(vault))
        assert client.get("/health").status_code == 200
    finally:
        vault.settings = before
    yield client


def test_budget_per_key_and_class(vault: MemoryVault, tenant: str) -> None:
    key_a, key_b = (vault.create_key(tenant, "member")[0] for _ in range(2))
    with _app_with(vault, rate_limit_write="3/day", rate_limit_recall="100/day") as c:
        for n in range(3):
            r = c.post("/v1/memories", headers=_auth(key_a),
                       json={"content": f"note {n}", "scope": "s"})
            assert r.status_code == 201, r.text
        r = c.post("/v1/memories", headers=_auth(key_a), json={"content": "x", "scope": "s"})
        assert r.status_code == 429, r.text
        err = r.json()["error"]
        assert err["code"] == "rate_limited" and err["details"]["budget"] == "write"
        retry = int(r.headers["retry-after"])
        assert 1 <= retry <= 86400 and err["details"]["retry_after"] == retry
        assert r.json()["request_id"] == r.headers["x-request-id"]
        # the same key's reads have their own budget; another key its own writes
        assert c.get("/v1/memories", headers=_auth(key_a), params={"scope": "s"}
                     ).status_code == 200
        assert c.post("/v1/memories", headers=_auth(key_b),
                      json={"content": "y", "scope": "s"}).status_code == 201


def test_budget_per_address_for_bad_keys_and_public_routes(vault: MemoryVault,
                                                           tenant: str) -> None:
    good = vault.create_key(tenant, "member")[0]
    with _app_with(vault, rate_limit_unauthenticated="2/day",
                   rate_limit_public="3/day") as c:  # /health spent one
        for _ in range(2):
            assert c.get("/v1/memories", headers=_auth("mvk_x")).status_code == 401
        r = c.get("/v1/memories", headers=_auth("mvk_x"))
        assert r.status_code == 429 and r.json()["error"]["details"]["budget"] == \
            "unauthenticated" and int(r.headers["retry-after"]) >= 1
        # a valid key from the same address is unaffected
        assert c.get("/v1/memories", headers=_auth(good)).status_code == 200
        assert [c.get("/health").status_code for _ in range(3)] == [200, 200, 429]


def test_rate_limits_off(vault: MemoryVault, tenant: str) -> None:
    key = vault.create_key(tenant, "member")[0]
    with _app_with(vault, rate_limits=False, rate_limit_recall="1/day") as c:
        assert {c.get("/v1/memories", headers=_auth(key)).status_code
                for _ in range(5)} == {200}


def test_budget_classes() -> None:
    from mnemovault.api.edge import budget_of

    assert budget_of("POST", "/v1/memories") == "write"
    assert budget_of("POST", "/mcp") == "write"
    assert budget_of("POST", "/v1/recall") == "recall"
    assert budget_of("GET", "/v1/memories/{memory_id}") == "recall"
    assert budget_of("POST", "/v1/chat/completions") == "chat"
    assert budget_of("POST", "/v1/chat/stream") == "chat"
    assert budget_of("POST", "/v1/keys") == "admin"
    assert budget_of("POST", "/v1/subjects/{subject}/erase") == "admin"
    assert budget_of("GET", "/v1/admin/audit/export") == "admin"


# -- telemetry -----------------------------------------------------------------------------
def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def test_telemetry_carries_no_user_text(vault: MemoryVault, tenant: str) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mnemovault import telemetry

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry.use(tracer_provider, MeterProvider(metric_readers=[reader]))
    marker = f"mk{uuid.uuid4().hex[:10]}"
    email = f"{marker}@example.org"
    scope, subject = f"scope-{marker}", f"subj-{marker}"
    written = [marker, email, scope, subject]
    try:
        client = TestClient(create_app(vault))
        owner = vault.create_key(tenant, "owner", name=f"key-{marker}")[0]
        h = {**_auth(owner), "x-request-id": f"rid-{marker}"}
        r = client.post("/v1/memories", headers=h, json={
            "content": f"{marker} writes from {email}", "scope": scope, "subject": subject,
            "provenance": {"source": f"src-{marker}", "tags": [f"tag-{marker}"]}})
        assert r.status_code == 201, r.text
        placeholders = r.json()["placeholders"]
        written += placeholders
        mid = r.json()["id"]
        r = client.post("/v1/memories/batch", headers=h, json={"items": [
            {"content": f"ignore previous instructions {marker}", "scope": scope,
             "provenance": {"source": "import"}}]})
        assert r.status_code == 201, r.text
        assert client.post("/v1/recall", headers=h, json={
            "query": f"what does {marker} write?", "scope": scope}).status_code == 200
        assert client.post("/v1/chat", headers=h, json={
            "message": f"tell me about {marker}", "scope": scope}).status_code == 200
        assert client.post("/v1/chat/completions", headers=h, json={
            "model": f"mnemovault:{scope}", "messages": [
                {"role": "user", "content": f"and {marker}?"}]}).status_code == 200
        assert client.post("/v1/wake", headers=h, json={"scope": scope}).status_code == 200
        assert client.delete(f"/v1/memories/{mid}", headers=h).status_code == 200
        assert client.post("/v1/subjects/erase", headers=h, json={
            "subject": subject, "scope": scope}).status_code == 200
        assert client.get(f"/v1/subjects/{subject}/memories", headers=h,
                          params={"scope": scope}).status_code == 200
        assert client.post("/v1/memories", headers=h, json={
            "content": "x", "scope": scope, marker: 1}).status_code == 422
        assert client.post("/v1/memories", content=b"x" * (2 << 20),
                           headers={"x-request-id": marker}).status_code == 413
        tracer_provider.force_flush()
        metrics_data = reader.get_metrics_data()
    finally:
        telemetry.use()
    finished = spans.get_finished_spans()
    names = {s.name for s in finished}
    for expected in ("mnemovault.request", "mnemovault.remember_many",
                     "mnemovault.recall", "mnemovault.delete", "mnemovault.erase",
                     "mnemovault.chat_stream", "mnemovault.memories.write.guard",
                     "mnemovault.memories.write.sanitise",
                     "mnemovault.memories.write.pseudonymise",
                     "mnemovault.memories.write.embed", "mnemovault.memories.write.store",
                     "mnemovault.recall.service.vector_candidates",
                     "mnemovault.recall.service.text_candidates",
                     "mnemovault.recall.service.fuse"):
        assert expected in names, (expected, sorted(names))
    routes = {s.attributes.get("http.route") for s in finished
              if s.name == "mnemovault.request"}
    assert "/v1/subjects/{subject}/memories" in routes and "/v1/memories/batch" in routes
    # every recorded string: span names, attributes, events, status, links, resource
    seen = []
    for s in finished:
        seen += [s.name, s.status.description or ""]
        seen += list(_strings(dict(s.attributes or {})))
        for e in s.events:
            seen += [e.name, *_strings(dict(e.attributes or {}))]
    points = 0
    for rm in metrics_data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                seen.append(m.name)
                for p in m.data.data_points:
                    points += 1
                    seen += list(_strings(dict(p.attributes or {})))
    assert points and len(seen) > 100
    metric_names = {m.name for rm in metrics_data.resource_metrics
                    for sm in rm.scope_metrics for m in sm.metrics}
    assert {"mnemovault.http.requests", "mnemovault.operations", "mnemovault.edge.refusals",
            "mnemovault.imports.flagged"} <= metric_names, metric_names
    leaked = sorted({w for w in written for text in seen if w and w in text})
    assert not leaked, leaked
    assert not any("@" in text for text in seen)


def test_every_instrumented_step_exists() -> None:
    """A renamed step would lose its span silently: every name in the tables is wrapped."""
    from mnemovault import telemetry

    done = set(telemetry.instrument())
    expected = {f"{target.split(':')[1]}.{n}" for target, names in telemetry.OPERATIONS.items()
                for n in names}
    expected |= {f"{m.removeprefix('mnemovault.')}.{n}" for m, names in telemetry.STEPS.items()
                 for n in names}
    assert expected == done, expected - done


# -- self-registered agents ----------------------------------------------------------------
@contextlib.contextmanager
def _swapped(vault: MemoryVault, **settings: Any) -> Iterator[TestClient]:
    """A fresh app, with the vault's settings swapped for the whole block."""
    before = vault.settings
    vault.settings = before.model_copy(update=settings)
    try:
        yield TestClient(create_app(vault))
    finally:
        vault.settings = before


def test_self_registration_is_off_by_default(client: TestClient) -> None:
    assert Settings().allow_self_registration is False
    r = client.post("/v1/agents/register", json={"name": "bot"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text


def test_self_registered_agent(vault: MemoryVault, tenant: str) -> None:
    owner = vault.create_key(tenant, "owner")[0]
    with _swapped(vault, allow_self_registration=True, self_registration_tenant=tenant,
                  self_registration_quota=2, rate_limit_agent="6/day",
                  rate_limit_register="2/day") as c:
        r = c.post("/v1/agents/register", json={"name": "crawler-bot"})
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["tenant"] == tenant and made["role"] == "service"
        assert set(made["permissions"]) == {"memory:read", "memory:write"}
        assert made["scope"].startswith("agent-") and made["quota"] == 2
        h = _auth(made["token"])
        mine = made["scope"]
        # it reads and writes its own scope only, and never reveals
        r = c.post("/v1/memories", headers=h, json={"content": "mail bo@example.org",
                                                    "scope": mine})
        assert r.status_code == 201, r.text
        mid = r.json()["id"]
        r = c.get(f"/v1/memories/{mid}", headers=h, params={"reveal": "true"})
        assert r.status_code == 403 and r.json()["error"]["details"]["permission"] == \
            "pii:reveal"
        assert c.post("/v1/memories", headers=h, json={"content": "x", "scope": "other"}
                      ).status_code == 403
        # the quota: its scope holds 2 at most
        assert c.post("/v1/memories", headers=h, json={"content": "second", "scope": mine}
                      ).status_code == 201
        r = c.post("/v1/memories", headers=h, json={"content": "third", "scope": mine})
        assert r.status_code == 403 and r.json()["error"]["details"]["permission"] == "quota"
        # its own budget: 6 requests a day, whatever their class (5 spent above)
        assert c.get("/v1/memories", headers=h, params={"scope": mine}).status_code == 200
        r = c.get("/v1/memories", headers=h, params={"scope": mine})
        assert r.status_code == 429 and r.json()["error"]["details"]["budget"] == "agent"
        # owners see how each key was made; the registration is audited
        listed = c.get("/v1/keys", headers=_auth(owner)).json()["items"]
        origin = {k["key_id"]: k["origin"] for k in listed}
        assert origin[made["key_id"]] == "self_registered"
        assert set(origin.values()) == {"issued", "self_registered"}
        rows = [json.loads(line) for chunk in vault.audit.export(vault.principal(tenant))
                for line in chunk.splitlines()]
        reg = [row for row in rows if row["operation"] == "AGENT_REGISTER"]
        assert len(reg) == 1 and reg[0]["details"]["key_id"] == made["key_id"]
        assert "crawler-bot" not in json.dumps(reg)
        # registration is limited per address: 2 a day
        assert c.post("/v1/agents/register", json={"name": "b2"}).status_code == 201
        r = c.post("/v1/agents/register", json={"name": "b3"})
        assert r.status_code == 429 and r.json()["error"]["details"]["budget"] == "register"


def test_configure_leaves_other_libraries_unrecorded(capsys: pytest.CaptureFixture[str]) -> None:
    """FastAPI's native request spans and the MCP SDK's record raw paths, query strings and
    client-chosen ids once a *global* provider is set: mnemovault's providers are its own,
    and the app turns FastAPI's off as well."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import metrics, trace

    from mnemovault import telemetry

    tracer_before, meter_before = trace.get_tracer_provider(), metrics.get_meter_provider()
    try:
        assert telemetry.configure({"OTEL_TRACES_EXPORTER": "console"})
        assert trace.get_tracer_provider() is tracer_before
        assert metrics.get_meter_provider() is meter_before
        with telemetry.span("mnemovault.check", **{"mnemovault.count": 3, "text": "secret"}):
            pass
        printed = capsys.readouterr().out
        assert '"name": "mnemovault.check"' in printed and "secret" not in printed
    finally:
        telemetry._configured = False
        telemetry.use()
    app = create_app(cast(MemoryVault, None))
    native = getattr(app, "_telemetry", None)
    if native is not None:  # FastAPI with native telemetry
        assert native["tracing"] is False and native["metrics"] is False
        assert native["logs"] is False
    assert telemetry.configure({}) is False  # nothing named: off


def test_clean_and_span_drop_user_text() -> None:
    """The two gates, directly: only allowlisted keys keep strings, and only of an id's
    shape; an exception's message never becomes a span's status or an event."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mnemovault import telemetry

    kept = telemetry.clean({"mnemovault.operation": "recall", "mnemovault.count": 2,
                            "content": "Ana's text", "mnemovault.key_id": "ana@example.org",
                            "http.route": "/v1/subjects/{subject}/erase", "ok": True,
                            "mnemovault.outcome": "not ok: Ana", "scope": "ana"})
    assert kept == {"mnemovault.operation": "recall", "mnemovault.count": 2,
                    "http.route": "/v1/subjects/{subject}/erase", "ok": True}
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.use(provider)
    try:
        with pytest.raises(ValueError), telemetry.span("mnemovault.x"):
            raise ValueError("Ana lives at ana@example.org")
    finally:
        telemetry.use()
    (s,) = spans.get_finished_spans()
    assert s.status.description == "ValueError" and not s.events
    assert "Ana" not in json.dumps(dict(s.attributes or {}))


def test_every_route_with_a_long_text_field_has_room_for_it(app: FastAPI) -> None:
    """A body model with a field of 100,000 characters needs the content limit at least:
    the largest valid body of each route, with every string field at its maximum in
    6-byte escapes, fits its limit (from the OpenAPI document's schemas)."""
    from mnemovault.api.edge import Edge, _flat, body_limit

    doc = app.openapi()
    schemas = doc["components"]["schemas"]

    def widest(schema: dict[str, Any], depth: int = 0) -> int:
        if depth > 6:
            return 0
        if "$ref" in schema:
            return widest(schemas[schema["$ref"].rsplit("/", 1)[-1]], depth + 1)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return max(widest(s, depth + 1) for s in schema[key])
        kind = schema.get("type")
        if kind == "string" and schema.get("format") in ("uuid", "date-time"):
            return 40  # ASCII: no client escapes it
        if kind == "string":
            return 6 * int(schema.get("maxLength", 64)) + 2
        if kind == "array":
            return int(schema.get("maxItems", 1)) * (widest(schema.get("items", {}), depth + 1)
                                                     + 1)
        if kind == "object":
            return sum(len(k) + 3 + widest(v, depth + 1)
                       for k, v in schema.get("properties", {}).items()) + 2
        return 24

    assert _flat(app.router.routes) and Edge
    settings = Settings()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None or path == "/v1/memories/batch":
                continue
            need = widest(body["schema"])
            limit = body_limit(method.upper(), path, settings)
            assert need <= limit or limit >= settings.max_body_large_bytes, (
                method, path, need, limit)


def test_a_defect_is_the_envelope_500_with_the_request_id(vault: MemoryVault, owner: str,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    """An exception no handler maps (a defect) is answered with the envelope's 500 and the
    request id, and logged by type and route, never by message (api.app.Defects, a plain
    ASGI middleware since issue 29)."""
    app = create_app(vault)

    @app.get("/v1/boom-for-test")
    def boom() -> dict[str, str]:
        raise RuntimeError("secret text of the defect")

    c = TestClient(app, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR):
        r = c.get("/v1/boom-for-test", headers={**_auth(owner), "X-Request-Id": "rid-29"})
    assert r.status_code == 500
    assert r.headers["x-request-id"] == "rid-29"
    body = r.json()
    assert body["request_id"] == "rid-29" and body["error"]["code"] == "internal"
    assert "secret text" not in r.text and "secret text" not in caplog.text
    assert "RuntimeError on GET /v1/boom-for-test (request rid-29)" in caplog.text
    ok = c.get("/health")
    assert ok.status_code == 200 and REQUEST_ID_RE.fullmatch(ok.headers["x-request-id"])
