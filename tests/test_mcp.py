"""The MCP server (the ``mcp`` SDK, version 2), driven by the SDK's own client: over stdio
(``python -m mnemovault.cli --data-dir … mcp``, the key in ``MNEMOVAULT_API_KEY``) and over
streamable HTTP at ``/mcp`` of the HTTP app (uvicorn on 127.0.0.1, the session's vault).

One stdio server and one HTTP server per module. The async client runs in an anyio
blocking portal (a thread with an event loop), so the tests themselves stay synchronous.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from mnemovault.api import create_app
from mnemovault.chat.context import RULE
from mnemovault.vault import MemoryVault
from tests.servers import serve

TOOLS = {"remember", "recall", "forget", "pin", "unpin", "erase_value", "timeline", "wake",
         "procedure_capture", "procedure_recall", "procedure_run", "procedure_feedback",
         "procedure_evaluate", "subject_memories", "subject_export", "rectify",
         "subject_erase", "audit_verify", "audit_inclusion_proof"}
PLACEHOLDER = re.compile(r"\{[a-z][a-z_]*:p_[0-9a-f]{10}\}")
Portal = anyio.from_thread.BlockingPortal


class Session:
    """A connected SDK client, called synchronously through the portal."""

    def __init__(self, portal: Portal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.client.call_tool, tool, arguments)

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        res = self.call(tool, **arguments)
        assert not res.is_error, res.content
        assert res.structured_content is not None
        return res.structured_content

    def error(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The error envelope's ``error`` of a call that must fail."""
        res = self.call(tool, **arguments)
        assert res.is_error, res.structured_content
        assert res.structured_content is not None
        text = res.content[0].text  # type: ignore[union-attr]
        assert json.loads(text) == res.structured_content  # the same envelope, as text
        return res.structured_content["error"]


@contextmanager
def connect(portal: Portal, server: Any) -> Iterator[tuple[Session, list[Exception]]]:
    """A client session; the list collects transport-level problems (a line on stdout
    that is not a protocol message lands there)."""
    problems: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            problems.append(message)

    with portal.wrap_async_context_manager(
            Client(server, message_handler=on_message, read_timeout_seconds=60)) as client:
        yield Session(portal, client), problems


@pytest.fixture(scope="module")
def portal() -> Iterator[Portal]:
    with anyio.from_thread.start_blocking_portal() as p:
        yield p


# -- stdio -----------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "MNEMOVAULT_API_KEY")}
    return {**env, "TOKENIZERS_PARALLELISM": "false"}


def _cli(data_dir: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mnemovault.cli", "--data-dir", str(data_dir),
                           *args], env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def stdio_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="mv-mcp-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def stdio(portal: Portal, stdio_dir: Path) -> Iterator[tuple[Session, list[Exception], Path]]:
    made = _cli(stdio_dir, "keys", "create", "--tenant", "acme", "--role", "member", "--json")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mnemovault.cli", "--data-dir", str(stdio_dir),
                                      "mcp"],
        env={"MNEMOVAULT_API_KEY": token, "TOKENIZERS_PARALLELISM": "false",
             # the tree under test when PYTHONPATH points at one (not the installed copy)
             **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    log = stdio_dir / "server-stderr.log"
    with log.open("w") as errlog, connect(portal, stdio_client(params, errlog=errlog)) as (
            session, problems):
        yield session, problems, log


def test_the_sdk_is_not_shadowed_by_the_package() -> None:
    import mcp

    import mnemovault
    import mnemovault.mcp.server as server

    package = Path(mnemovault.__file__).resolve().parent
    sdk = Path(mcp.__file__).resolve()
    assert not sdk.is_relative_to(package), sdk  # the SDK, not mnemovault/mcp/
    assert mcp.__name__ == "mcp" and (sdk.parent / "server").is_dir()
    assert server.MCPServer.__module__.startswith("mcp.server.")


def test_stdio_refuses_to_start_without_a_key(stdio_dir: Path) -> None:
    run = _cli(stdio_dir, "mcp", timeout=60)
    assert run.returncode == 4
    assert "MNEMOVAULT_API_KEY" in run.stderr and "--local" in run.stderr
    assert run.stdout == ""


def test_stdio_tools_remember_recall_forget(
        stdio: tuple[Session, list[Exception], Path]) -> None:
    s, problems, log = stdio
    tools = s.portal.call(s.client.list_tools).tools
    assert {t.name for t in tools} == TOOLS
    for t in tools:
        assert t.description and t.annotations is not None, t.name
    assert {t.name for t in tools if t.annotations and t.annotations.destructive_hint} == {
        "forget", "erase_value", "rectify", "subject_erase"}
    assert {t.name for t in tools if t.annotations and t.annotations.read_only_hint} == {
        "timeline", "wake", "procedure_recall", "subject_memories", "audit_verify",
        "audit_inclusion_proof"}
    prompts = s.portal.call(s.client.list_prompts).prompts
    assert [p.name for p in prompts] == ["memory_rules"]
    guide = s.portal.call(s.client.get_prompt, "memory_rules").messages[0].content
    assert RULE in guide.text  # type: ignore[union-attr]

    a = s.ok("remember", content="Ana keeps three hives of bees on her allotment.",
             scope="ana", subject="ana")
    s.ok("remember", content="Ana takes the 7:40 train to work.", scope="ana", subject="ana")
    hits = s.ok("recall", query="what does Ana do with bees?", scope="ana", k=1)
    assert [h["id"] for h in hits["hits"]] == [a["id"]] and hits["rule"] == RULE

    preview = s.ok("forget", topic="Ana's beehives", scope="ana")
    assert preview["preview"] is True and preview["deleted"] == []
    assert a["id"] in [m["id"] for m in preview["matches"]]
    assert len(preview["matches"]) <= 8
    again = s.ok("recall", query="what does Ana do with bees?", scope="ana", k=1)
    assert [h["id"] for h in again["hits"]] == [a["id"]]  # the preview deleted nothing

    gone = s.ok("forget", ids=[a["id"]], scope="ana")
    assert gone["deleted"] == [a["id"]] and gone["audit_seq"]
    after = s.ok("recall", query="what does Ana do with bees?", scope="ana", k=5)
    assert a["id"] not in [h["id"] for h in after["hits"]]

    woke = s.ok("wake", scope="ana", subject="ana")
    assert woke["pack"].startswith(RULE) and "7:40 train" in woke["pack"]
    assert problems == []  # stdout carried protocol messages only
    assert "jsonrpc" not in log.read_text()


# -- streamable HTTP -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def http_url(vault: MemoryVault) -> Iterator[str]:
    with serve(create_app(vault)) as base:
        yield f"{base}/mcp"


@contextmanager
def http(portal: Portal, url: str, token: str) -> Iterator[Session]:
    hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                            timeout=httpx2.Timeout(60.0))
    try:
        with connect(portal, streamable_http_client(url, http_client=hc)) as (session, _):
            yield session
    finally:
        portal.call(hc.aclose)


def _key(vault: MemoryVault, tenant: str, role: str = "member", **limits: str) -> str:
    return vault.create_key(tenant, role, **limits)[0]  # type: ignore[arg-type]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream",
          "Content-Type": "application/json"}


def test_http_needs_a_bearer_key(http_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer mvk_nope"},
                    {"Authorization": f"Bearer mvk_acme_{'0' * 32}_{'0' * 64}"}):
        r = httpx.post(http_url, json=INIT, headers={**ACCEPT, **headers})
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["www-authenticate"] == "Bearer" and r.headers["x-request-id"]


def test_http_keeps_dns_rebinding_protection(http_url: str, vault: MemoryVault,
                                             tenant: str) -> None:
    auth = {**ACCEPT, "Authorization": f"Bearer {_key(vault, tenant)}"}
    assert httpx.post(http_url, json=INIT, headers=auth).status_code == 200
    r = httpx.post(http_url, json=INIT, headers={**auth, "Host": "evil.example"})
    assert r.status_code == 421
    r = httpx.post(http_url, json=INIT, headers={**auth, "Origin": "http://evil.example"})
    assert r.status_code == 403
    r = httpx.post(http_url, json=INIT, headers={**auth, "Origin": "http://localhost:3000"})
    assert r.status_code == 200


def test_http_tools_remember_recall_forget(portal: Portal, http_url: str,
                                           vault: MemoryVault, tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant)) as s:
        assert {t.name for t in s.portal.call(s.client.list_tools).tools} == TOOLS
        ids = [s.ok("remember", content=f"Ben's cat number {n} sleeps on the red sofa.",
                    scope="ben", subject="ben")["id"] for n in range(10)]
        other = s.ok("remember", content="Ben cycles to work along the canal.", scope="ben",
                     subject="ben", type="fact")["id"]
        hits = s.ok("recall", query="where do Ben's cats sleep?", scope="ben", k=3)["hits"]
        assert hits and all(h["id"] in ids for h in hits)

        preview = s.ok("forget", topic="Ben's cats on the sofa", scope="ben")
        assert preview["preview"] is True and preview["deleted"] == []
        assert len(preview["matches"]) == 8 and preview["total"] >= 9
        assert all(m["excerpt"] and len(m["excerpt"]) <= 180 for m in preview["matches"])
        assert len(s.ok("timeline", scope="ben", limit=100)["items"]) == 11  # nothing went

        gone = s.ok("forget", ids=ids[:2], scope="ben")
        assert sorted(gone["deleted"]) == sorted(ids[:2]) and gone["not_found"] == []
        page = s.ok("timeline", scope="ben", limit=5)
        assert [m["id"] for m in page["items"]] == ids[2:7] and page["next_cursor"]
        rest = s.ok("timeline", scope="ben", cursor=page["next_cursor"])
        assert [m["id"] for m in rest["items"]] == [*ids[7:], other]
        future = s.ok("timeline", scope="ben", since="2999-01-01T00:00:00Z")
        assert future["items"] == []

        assert s.ok("pin", ids=[ids[5]])["changed"] == [ids[5]]
        woke = s.ok("wake", scope="ben", subject="ben", budget_tokens=130)
        assert woke["pack"].startswith(RULE) and woke["omitted"] > 0
        assert [r["reason"] for r in woke["records"]] == ["pinned"]  # only it fits
        woke = s.ok("wake", scope="ben", subject="ben")
        assert [r["id"] for r in woke["records"][:2]] == [ids[5], other]
        assert [r["reason"] for r in woke["records"][:3]] == ["pinned", "fact", "recent"]
        assert woke["tokens_estimated"] <= 1000
        assert s.ok("unpin", ids=[ids[5]])["changed"] == [ids[5]]


def test_semantic_forget_is_refused_with_the_candidates(portal: Portal, http_url: str,
                                                        vault: MemoryVault,
                                                        tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant)) as s:
        mid = s.ok("remember", content="Cleo is allergic to peanuts.", scope="cleo")["id"]
        e = s.error("forget", query="Cleo's peanut allergy", scope="cleo")
        assert e["code"] == "refused" and mid in e["details"]["candidates"]
        assert len(s.ok("timeline", scope="cleo")["items"]) == 1
        e = s.error("forget", topic="peanuts", ids=[mid], scope="cleo")
        assert e["code"] == "validation" and e["field"] == "topic"


def test_unknown_arguments_are_refused_with_the_envelope(portal: Portal, http_url: str,
                                                        vault: MemoryVault,
                                                        tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant)) as s:
        tools = s.portal.call(s.client.list_tools).tools
        assert all(t.input_schema.get("additionalProperties") is False for t in tools)
        e = s.error("remember", content="Kai keeps koi.", scope="kai", bogus=1)
        assert e["code"] == "validation" and e["field"] == "bogus", e
        assert "bogus: unknown argument" in e["message"] and "content" in e["message"]
        assert s.ok("timeline", scope="kai")["items"] == []  # nothing was stored
        s.ok("remember", content="Kai keeps koi.", scope="kai")
        for tool, args in (("timeline", {"scope": "kai", "sinse": "2999-01-01T00:00:00Z"}),
                           ("recall", {"query": "koi", "scope": "kai", "K": 1}),
                           ("wake", {"scope": "kai", "ctx": {}}),
                           ("forget", {"ids": [str(uuid.uuid4())], "scopes": "kai"})):
            bad = next(a for a in args if a not in ("scope", "query", "ids"))
            e = s.error(tool, **args)
            assert (e["code"], e["field"]) == ("validation", bad), (tool, e)
        assert len(s.ok("timeline", scope="kai")["items"]) == 1


def test_invalid_arguments_are_refused_with_the_envelope(portal: Portal, http_url: str,
                                                        vault: MemoryVault,
                                                        tenant: str) -> None:
    """Issue 28 item 6: a wrong type, a missing required argument and a value out of range
    come back in the envelope unknown arguments get (field and rule), not pydantic's
    text."""
    with http(portal, http_url, _key(vault, tenant)) as s:
        s.ok("remember", content="Noor paints boats.", scope="noor")
        for tool, args, field in (
                ("recall", {"query": "boats", "scope": "noor", "k": "many"}, "k"),
                ("recall", {"query": "boats"}, "scope"),
                ("recall", {"query": "boats", "scope": "noor", "k": 10_000}, "k"),
                ("remember", {"content": ["not", "text"], "scope": "noor"}, "content")):
            e = s.error(tool, **args)
            assert (e["code"], e["field"]) == ("validation", field), (tool, e)
            assert e["message"].startswith(f"{field}: ") and "pydantic" not in e["message"]
            assert e["details"]["errors"][0]["field"] == field
        assert len(s.ok("timeline", scope="noor")["items"]) == 1  # nothing more stored


def test_a_missing_permission_is_named(portal: Portal, http_url: str, vault: MemoryVault,
                                       tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant, "service")) as s:
        mid = s.ok("remember", content="Dev likes oat milk.", scope="dev")["id"]
        assert s.ok("recall", query="Dev milk", scope="dev")["hits"]
        assert s.ok("forget", topic="oat milk", scope="dev")["deleted"] == []  # read only
        for tool, args in (("forget", {"ids": [mid]}), ("pin", {"ids": [mid]}),
                           ("unpin", {"ids": [mid]})):
            e = s.error(tool, **args)
            assert e["code"] == "forbidden", tool
            assert e["details"]["permission"] == "memory:forget"
            assert "memory:forget" in e["message"]
        assert len(s.ok("timeline", scope="dev")["items"]) == 1
    with http(portal, http_url, _key(vault, tenant, "member")) as s:
        e = s.error("erase_value", placeholder="{email:p_0123456789}")
        assert e["code"] == "forbidden" and e["details"]["permission"] == "subject:erase"


def test_another_tenant_cannot_touch_the_ids(portal: Portal, http_url: str,
                                             vault: MemoryVault, tenant: str) -> None:
    other = f"b-{uuid.uuid4().hex[:10]}"
    vault.ensure_tenant(other)
    with http(portal, http_url, _key(vault, tenant)) as a:
        mid = a.ok("remember", content="Eli's email is eli@example.org; Eli plays chess.",
                   scope="eli", subject="eli")["id"]
        stored = a.ok("timeline", scope="eli")["items"][0]["content"]
        placeholder = PLACEHOLDER.search(stored)
        assert placeholder, stored
    with http(portal, http_url, _key(vault, other, "owner")) as b:
        res = b.ok("forget", ids=[mid])
        assert res["deleted"] == [] and res["not_found"] == [mid]
        res = b.ok("forget", ids=[mid], scope="eli")
        assert res["deleted"] == [] and res["not_found"] == [mid]
        for tool in ("pin", "unpin"):
            res = b.ok(tool, ids=[mid])
            assert res["changed"] == [] and res["not_found"] == [mid]
        assert b.ok("recall", query="Eli chess", scope="eli")["hits"] == []
        assert b.ok("forget", topic="Eli chess", scope="eli")["matches"] == []
        assert b.ok("timeline", scope="eli")["items"] == []
        assert b.ok("wake", scope="eli", subject="eli")["records"] == []
        assert b.error("erase_value", placeholder=placeholder.group(0))["code"] == "not_found"
    with http(portal, http_url, _key(vault, tenant)) as a:
        hits = a.ok("recall", query="Eli chess", scope="eli")["hits"]
        assert [h["id"] for h in hits] == [mid] and "[erased]" not in hits[0]["content"]


def test_a_limited_key_stays_limited(portal: Portal, http_url: str, vault: MemoryVault,
                                     tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant)) as full:
        fay = full.ok("remember", content="Fay runs marathons.", scope="fay", subject="fay")
        gus = full.ok("remember", content="Gus runs a bakery.", scope="gus", subject="gus")
        hal = full.ok("remember", content="Hal runs the chess club.", scope="fay",
                      subject="hal")
    with http(portal, http_url, _key(vault, tenant, scope="fay")) as s:
        for tool, args in (("remember", {"content": "Gus bakes rye.", "scope": "gus"}),
                           ("recall", {"query": "Gus", "scope": "gus"}),
                           ("timeline", {"scope": "gus"}), ("wake", {"scope": "gus"}),
                           ("forget", {"ids": [gus["id"]], "scope": "gus"}),
                           ("forget", {"topic": "bakery", "scope": "gus"})):
            e = s.error(tool, **args)
            assert e["code"] == "forbidden" and e["details"]["permission"] == "scope", tool
        assert s.ok("forget", ids=[gus["id"]])["not_found"] == [gus["id"]]
        assert s.ok("pin", ids=[gus["id"]])["not_found"] == [gus["id"]]
        seen = {m["id"] for m in s.ok("timeline", scope="fay")["items"]}
        assert seen == {fay["id"], hal["id"]}
    with http(portal, http_url, _key(vault, tenant, scope="fay", subject="fay")) as s:
        assert {m["id"] for m in s.ok("timeline", scope="fay")["items"]} == {fay["id"]}
        hits = s.ok("recall", query="who runs what?", scope="fay")["hits"]
        assert [h["id"] for h in hits] == [fay["id"]]
        assert s.ok("forget", ids=[hal["id"]])["not_found"] == [hal["id"]]
        assert [r["id"] for r in s.ok("wake", scope="fay")["records"]] == [fay["id"]]


def test_erase_value_shreds_one_value(portal: Portal, http_url: str, vault: MemoryVault,
                                      tenant: str) -> None:
    with http(portal, http_url, _key(vault, tenant, "owner")) as s:
        s.ok("remember", content="Ivy's phone is +44 20 7946 0958; she likes jazz.",
             scope="ivy")
        stored = s.ok("timeline", scope="ivy")["items"][0]["content"]
        placeholder = PLACEHOLDER.search(stored)
        assert placeholder and "7946" not in stored, stored
        assert s.ok("erase_value", placeholder=placeholder.group(0))["shredded"] == [
            placeholder.group(0)]
        assert "[erased]" in s.ok("recall", query="Ivy jazz", scope="ivy")["hits"][0]["content"]
        e = s.error("erase_value", placeholder=placeholder.group(0))
        assert e["code"] == "not_found"


def test_http_audit_rows_carry_the_request_id(http_url: str, vault: MemoryVault,
                                              tenant: str) -> None:
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "remember",
                       "arguments": {"content": "Jo waters the ferns on Sundays.",
                                     "scope": "jo"}}}
    rid = f"rid-{uuid.uuid4()}"
    r = httpx.post(http_url, json=call, headers={
        **ACCEPT, "Authorization": f"Bearer {_key(vault, tenant)}", "x-request-id": rid})
    assert r.status_code == 200 and r.headers["x-request-id"] == rid, r.text
    result = r.json()["result"]
    assert not result["isError"], result
    rows = [json.loads(line) for chunk in vault.audit.export(vault.principal(tenant))
            for line in chunk.splitlines()]
    assert rid in {row.get("request_id") for row in rows}


def test_the_endpoint_answers_503_until_the_app_has_started(vault: MemoryVault,
                                                            tenant: str) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(create_app(vault))  # no `with`: the lifespan never ran
    # with a key: the edge answers a request without one 401 before the endpoint is reached
    r = client.post("/mcp", json=INIT, headers={**ACCEPT, "Authorization":
                                                f"Bearer {_key(vault, tenant)}"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
