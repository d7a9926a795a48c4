"""The visibility matrix (issue 19): every read path × every record state × every caller,
asserting on what the response *says* (the record's text and its clear personal value
present or absent), with the expected outcome computed once, by :func:`expect`, from the
table in :mod:`mnemovault.visibility`'s docstring.

Read paths come from four tables, each checked for completeness against the product:

- ``HTTP_OPS``: every operation of ``app.openapi()`` is either a read path (its cells
  named) or in ``HTTP_NO_RECORDS`` with the reason it returns no record text or value;
- ``MCP_TOOLS``: every tool the MCP server lists, the same way;
- ``COMMANDS``: every in-band chat command prefix (:data:`~mnemovault.governance.commands.
  PREFIXES`);
- ``LIBRARY``: every public attribute of :class:`~mnemovault.vault.MemoryVault` and of its
  facade sections.

The world (one per module): a tenant with memories and procedures in each state (active,
pending_review, superseded, archived, forgotten, subject-erased, another scope, another
subject, derived into another subject) and another tenant's; each record carries a unique
canary word and (memories) its own e-mail address, so a body can be searched for the
record's text and for its clear value. Callers: an unlimited key of each role and narrowed
keys (owner limited to a scope, owner limited to a subject, member limited to a scope).

A cell is (path, record, caller). Each path's requests name their *targets* (the records
the request asks for: by id, placeholder or location); a target's text, value and listing
must be exactly as :func:`expect` says, and any other record that shows up must be one the
caller may see there (never a leak).

The reveal attacks (a narrowed owner quoting the placeholder of a value that lives only
outside its limits, in a chat message, a memory it writes and a rectified text) run in a
world of their own, against a stand-in OpenAI-compatible model on 127.0.0.1 that repeats
its whole prompt (the chat provider is ``openai`` with that base URL).
"""

from __future__ import annotations

import inspect
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio.from_thread
import numpy as np
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.errors import MnemoError
from mnemovault.facade import part
from mnemovault.governance.commands import PREFIXES
from mnemovault.llm import make_provider
from mnemovault.mcp.server import build_server
from mnemovault.vault import MemoryVault

VS, VO = "vis-s", "vis-o"  # the main scope, another scope
SA, SB, SZ = "subj-a", "subj-b", "subj-z"  # the main subject, another, an erased one
QUERY = "lantern festival notes"
PROC_QUESTION = "how do we light the lantern festival?"


# -- the world -------------------------------------------------------------------------------
@dataclass
class Rec:
    """A record of the world: where it lives, its state, and what identifies its text
    (``canary``) and its personal value (``email``, whose placeholder is ``placeholder``)."""

    state: str
    tenant: str  # "main" or "other"
    scope: str
    subject: str
    status: str = "active"
    archived: bool = False
    exists: bool = True
    kind: str = "memory"  # or "procedure"
    canary: str = ""
    email: str | None = None
    id: str = ""
    placeholder: str | None = None
    valid_at: dict[str, bool] = field(default_factory=dict)  # World.times name -> valid then

    def __str__(self) -> str:
        return self.state


@dataclass
class Caller:
    name: str
    role: str
    scope: str | None
    subject: str | None
    token: str = ""
    who: Principal | None = None

    @property
    def limited(self) -> bool:
        return self.scope is not None or self.subject is not None

    @property
    def perms(self) -> frozenset[str]:
        assert self.who is not None
        return self.who.permissions

    def __str__(self) -> str:
        return self.name


CALLERS: dict[str, tuple[str, str | None, str | None]] = {
    "owner": ("owner", None, None), "admin": ("admin", None, None),
    "member": ("member", None, None), "service": ("service", None, None),
    "owner@scope": ("owner", VS, None), "owner@subject": ("owner", None, SA),
    "member@scope": ("member", VS, None),
}


class EchoModel:
    """A stand-in OpenAI-compatible chat model on 127.0.0.1: its answer is its whole prompt
    (every message's content, the fenced context included), as one JSON completion."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = "\n".join(str(m.get("content") or "") for m in body["messages"])
                out = json.dumps({"choices": [{"message": {"role": "assistant",
                                                           "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


Portal = anyio.from_thread.BlockingPortal


class McpSession:
    """The MCP server (:func:`mnemovault.mcp.server.build_server`) over the SDK's in-process
    client; the principal of each call is the caller's (authenticated from its key)."""

    def __init__(self, portal: Portal, client: Any, holder: dict[str, Principal]) -> None:
        self.portal, self.client, self.holder = portal, client, holder

    def tools(self) -> set[str]:
        return {t.name for t in self.portal.call(self.client.list_tools).tools}

    def call(self, c: Caller, tool: str, **arguments: Any) -> str:
        assert c.who is not None
        self.holder["who"] = c.who
        res = self.portal.call(self.client.call_tool, tool, arguments)
        texts = [getattr(x, "text", "") for x in res.content]
        return json.dumps(res.structured_content, default=str) + "\n" + "\n".join(texts)


@dataclass
class World:
    vault: MemoryVault
    client: TestClient
    tenant: str
    other: str
    recs: list[Rec]
    callers: dict[str, Caller]
    mcp: McpSession
    times: dict[str, str]  # the as_of times of the as_of paths (ISO 8601): name -> time

    def main(self) -> list[Rec]:
        return [r for r in self.recs if r.tenant == "main"]

    def http(self, c: Caller, method: str, url: str, *, params: dict[str, Any] | None = None,
             json_body: Any = None, headers: dict[str, str] | None = None) -> str:
        r = self.client.request(method, url, params=params, json=json_body,
                                headers={"Authorization": f"Bearer {c.token}",
                                         **(headers or {})})
        assert r.status_code < 500, f"{method} {url}: {r.status_code} {r.text[:300]}"
        return r.text

    def lib(self, fn: Callable[[], Any]) -> str:
        try:
            return dump(fn())
        except MnemoError as exc:
            return f"error: {exc}"


def dump(obj: Any) -> str:
    """Any facade result as searchable text."""
    if hasattr(obj, "model_dump_json"):
        return str(obj.model_dump_json())
    if hasattr(obj, "collect") and hasattr(obj, "meta"):  # a ChatStream: every event
        return "\n".join(json.dumps({"event": e.event, **e.data}, default=str) for e in obj)
    if isinstance(obj, list):
        return "\n".join(dump(x) for x in obj)
    return json.dumps(obj, default=str)


def sse_text(raw: str) -> str:
    """An SSE body with the streamed text pieces joined (a canary split across token
    events is found whole), followed by the raw body."""
    pieces = []
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "text" in data:
            pieces.append(data["text"])
        for ch in data.get("choices") or []:
            pieces.append((ch.get("delta") or {}).get("content") or "")
    return "".join(pieces) + "\n" + raw


class MemoEmbedder:
    """The vault's embedder with each text's vector kept: the matrix asks the same few
    queries thousands of times (a test harness, like a swapped chat provider; the runtime
    still wraps it in the database's text view)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.model = inner, inner.model
        self.memo: dict[str, Any] = {}

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed(self, texts: list[str]) -> Any:
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if todo:
            self.memo.update(zip(todo, self.inner.embed(todo), strict=True))
        return np.stack([self.memo[t] for t in texts])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def memo(vault: MemoryVault) -> Iterator[None]:
    inner = vault.embedder.inner  # type: ignore[attr-defined]  # the runtime's view wraps it
    vault.embedder = MemoEmbedder(inner)
    try:
        yield
    finally:
        vault.embedder = inner


@pytest.fixture(scope="module")
def echo(vault: MemoryVault, memo: None) -> Iterator[EchoModel]:
    """The stand-in model, configured as the vault's chat provider (``openai``) for this
    module; the offline provider and the settings are restored after."""
    model = EchoModel()
    old_llm, old_settings = vault.llm, vault.settings
    chat_settings = old_settings.model_copy(update={
        "chat_provider": "openai", "chat_base_url": model.url, "chat_model": "echo"})
    vault.llm = make_provider(chat_settings)
    try:
        yield model
    finally:
        vault.llm, vault.settings = old_llm, old_settings
        model.close()


@pytest.fixture(scope="module")
def portal() -> Iterator[Portal]:
    with anyio.from_thread.start_blocking_portal() as p:
        yield p


@pytest.fixture(scope="module")
def mcp(vault: MemoryVault, portal: Portal) -> Iterator[McpSession]:
    holder: dict[str, Principal] = {}
    server = build_server(vault, lambda ctx: holder["who"])
    with portal.wrap_async_context_manager(Client(server, read_timeout_seconds=120)) as client:
        yield McpSession(portal, client, holder)


def _canary(state: str) -> str:
    return "cnry" + state.replace("_", "") + uuid.uuid4().hex[:6]


def _email(state: str) -> str:
    return f"{state.replace('_', '.')}.{uuid.uuid4().hex[:6]}@example.org"


class Builder:
    """Writes the world's records as the local operator of each tenant."""

    def __init__(self, vault: MemoryVault, tenants: dict[str, str]) -> None:
        self.vault, self.tenants = vault, tenants
        self.recs: list[Rec] = []

    def who(self, tenant: str) -> Principal:
        return self.vault.principal(self.tenants[tenant])

    def gated(self, on: bool) -> None:
        self.vault.settings = self.vault.settings.model_copy(update={"require_review": on})

    def memory(self, state: str, scope: str, subject: str, *, tenant: str = "main",
               key: str | None = None, review: bool = False,
               derived_from: list[str] | None = None) -> Rec:
        rec = Rec(state, tenant, scope, subject, canary=_canary(state), email=_email(state))
        self.gated(review)
        try:
            r = self.vault.remember(
                f"note {rec.canary}: write to {rec.email} about the lantern festival.",
                scope=scope, subject=subject, key=key, derived_from=derived_from,
                principal=self.who(tenant))
        finally:
            self.gated(False)
        assert len(r.placeholders) == 1, (state, r.placeholders)
        rec.id, rec.placeholder, rec.status = str(r.id), r.placeholders[0], r.status
        self.recs.append(rec)
        return rec

    def procedure(self, state: str, scope: str, subject: str, *, tenant: str = "main",
                  review: bool = False, parent: Rec | None = None) -> Rec:
        rec = Rec(state, tenant, scope, subject, kind="procedure", canary=_canary(state))
        self.gated(review)
        try:
            steps = {"nodes": [{"id": "a", "tool": "light_lanterns"}]}
            if parent is None:
                r = self.vault.procedures.capture(
                    {"question": PROC_QUESTION, "scope": scope, "subject": subject,
                     "name": f"proc {rec.canary}", "intent": "lanterns", "steps": steps},
                    principal=self.who(tenant))
            else:
                r = self.vault.procedures.new_version(
                    parent.id, {"name": f"proc {rec.canary}", "steps": steps},
                    principal=self.who(tenant))
                parent.status = "superseded"
        finally:
            self.gated(False)
        rec.id, rec.status = str(r.id), r.status
        self.recs.append(rec)
        return rec

    def forget(self, rec: Rec) -> None:
        res = self.vault.forget([rec.id], principal=self.who(rec.tenant))
        assert [str(i) for i in res.deleted] == [rec.id]
        rec.exists = False


@pytest.fixture(scope="module")
def world(vault: MemoryVault, echo: EchoModel, mcp: McpSession) -> Iterator[World]:
    assert not vault.settings.allow_semantic_forget  # FORGET: <query> must only preview
    tag = uuid.uuid4().hex[:8]
    tenants = {"main": f"vis-{tag}", "other": f"vis-other-{tag}"}
    for t in tenants.values():
        vault.ensure_tenant(t)
    b = Builder(vault, tenants)
    active = b.memory("active", VS, SA)
    superseded = b.memory("superseded", VS, SA, key="kv")
    b.memory("current", VS, SA, key="kv")
    superseded.status = "superseded"
    b.memory("pending_review", VS, SA, review=True)
    archived = b.memory("archived", VS, SA)
    with vault.db.transaction(tenants["main"]) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = %s", (archived.id,))
    archived.archived = True
    b.forget(b.memory("forgotten", VS, SA))
    erased = b.memory("subject_erased", VS, SZ)
    vault.subjects.erase(SZ, scope=VS, principal=b.who("main"))
    erased.exists = False
    b.memory("other_scope", VO, SA)
    b.memory("other_subject", VS, SB)
    b.memory("derived_other_subject", VS, SB, derived_from=[active.id])
    b.memory("other_tenant", VS, SA, tenant="other")
    b.procedure("proc_active", VS, SA)
    b.procedure("proc_current", VS, SA, parent=b.procedure("proc_superseded", VS, SA))
    b.procedure("proc_pending", VS, SA, review=True)
    b.forget(b.procedure("proc_forgotten", VS, SA))
    b.procedure("proc_other_scope", VO, SA)
    b.procedure("proc_other_subject", VS, SB)
    b.procedure("proc_other_tenant", VS, SA, tenant="other")
    assert {r.status for r in b.recs} == {"active", "superseded", "pending_review"}

    # the as_of times: between the superseded version's start and its successor's, and now
    # (after every write); each record's valid interval decides whether it was valid then
    ids = [r.id for r in b.recs if r.exists]
    spans: dict[str, tuple[Any, Any]] = {}
    for t in tenants.values():
        with vault.db.transaction(t) as conn:
            spans.update({str(r["id"]): (r["valid_from"], r["valid_to"]) for r in conn.execute(
                "SELECT id, valid_from, valid_to FROM memories WHERE id = ANY(%s::uuid[])",
                (ids,)).fetchall()})
    start, end = spans[superseded.id]
    assert end is not None and end > start, "the superseded version holds a stretch of time"
    times = {"between": start + (end - start) / 2, "now": datetime.now(UTC)}
    for rec in b.recs:
        vf, vt = spans.get(rec.id, (None, None))
        rec.valid_at = {n: vf is not None and vf <= at and (vt is None or at < vt)
                        for n, at in times.items()}
    assert superseded.valid_at == {"between": True, "now": False}

    callers = {}
    for name, (role, scope, subject) in CALLERS.items():
        token, _ = vault.create_key(tenants["main"], role, scope=scope,  # type: ignore[arg-type]
                                    subject=subject)
        callers[name] = Caller(name, role, scope, subject, token, vault.authenticate(token))
    with TestClient(create_app(vault)) as client:  # one portal for every request
        yield World(vault, client, tenants["main"], tenants["other"], b.recs, callers, mcp,
                    {n: at.isoformat() for n, at in times.items()})


# -- the rule ----------------------------------------------------------------------------------
READ_STATUSES = ("active", "superseded")  # the read purpose, pending for reviewers only


@dataclass(frozen=True)
class Req:
    """One request of a path: the records it asks for (``targets``), the body to search,
    and the part of it that lists ids or placeholders (previews, vault entries)."""

    targets: list[Rec]
    body: str
    listing: str | None = None


@dataclass(frozen=True)
class Path:
    """A read path. ``purpose``: its row of the table in :mod:`mnemovault.visibility`;
    ``needs``: the permissions it checks; ``output``: ``text`` (records' text),
    ``preview`` (forget preview rows: listed within the limits, text only when seen),
    ``ids``, ``entries`` (vault entries, by placeholder) or ``values`` (placeholders to
    values); ``reveal``: asks for clear values; ``archived``: whether it shows archived
    records (read and subject: yes; recall: when asked); ``statuses``: the path's own
    narrowing (e.g. the listing without ``include_superseded``); ``kinds``: memory
    and/or procedure rows."""

    name: str
    purpose: str
    run: Callable[[World, Caller], Iterable[Req]]
    needs: tuple[str, ...] = ("memory:read",)
    output: str = "text"
    reveal: bool = False
    archived: bool = True
    statuses: tuple[str, ...] | None = None
    kinds: tuple[str, ...] = ("memory", "procedure")
    as_of: str | None = None  # an as_of path: the name of its time in World.times


@dataclass(frozen=True)
class Expect:
    text: bool  # the record's text (its canary; for ``ids`` its id) shows
    value: bool  # its clear e-mail shows
    listed: bool  # previews: its row (id); vault entries: its placeholder


def expect(p: Path, rec: Rec, c: Caller) -> Expect:
    """THE expectation, from :mod:`mnemovault.visibility`'s docstring. See: a record of the
    caller's tenant that still exists, within the key's limits, in a status the purpose
    sees (pending only for reviewers on read, only on review; subject sees all), archived
    per the path. Reveal: ``pii:reveal``, asked, a live value; for a limited key only a
    value a record it may see (read purpose: not pending; subject purpose: any status)
    within its limits carries."""
    has = set(p.needs) <= c.perms
    live = rec.exists and rec.tenant == "main"
    within = live and (c.scope is None or rec.scope == c.scope) and (
        c.subject is None or rec.subject == c.subject)
    reviewer = "review:approve" in c.perms
    pending = rec.status == "pending_review"
    status_ok = {"read": rec.status in READ_STATUSES or (pending and reviewer),
                 "recall": rec.status == "active",
                 # as_of: current and superseded versions, each within its valid interval
                 "as_of": (rec.status in READ_STATUSES and p.as_of is not None
                           and rec.valid_at.get(p.as_of, False)),
                 "review": pending and reviewer,
                 "subject": True}[p.purpose]
    text = (has and within and status_ok and (p.archived or not rec.archived)
            and (p.statuses is None or rec.status in p.statuses) and rec.kind in p.kinds)
    # a limited key's values: those a record it may see within its limits carries
    carried = within and (p.purpose == "subject" or rec.status in READ_STATUSES)
    revealable = (p.reveal and has and "pii:reveal" in c.perms and live
                  and rec.email is not None and (not c.limited or carried))
    if p.output == "preview":
        listed = has and within and rec.kind in p.kinds
    elif p.output == "entries":  # shown to a limited key only if it could reveal it;
        # to an unlimited key every entry of its tenant (shredded ones as metadata)
        listed = (has and rec.tenant == "main" and rec.email is not None
                  and (carried if c.limited else True))
    else:
        listed = text
    value = revealable and {"text": text, "preview": text, "ids": False,
                            "entries": listed, "values": True}[p.output]
    return Expect(text=text, value=value, listed=listed)


def check(p: Path, c: Caller, w: World, reqs: Iterable[Req]) -> list[str]:
    """The failures of one path for one caller, each naming path × state × caller."""
    fails: list[str] = []
    seen_targets: set[str] = set()

    def bad(rec: Rec, what: str, body: str) -> None:
        fails.append(f"{p.name} × {rec.state} × {c.name}: {what} (body: {body[:400]!r})")

    for req in reqs:
        tids = {r.state for r in req.targets}
        seen_targets |= tids
        listing = req.listing if req.listing is not None else req.body
        for rec in w.recs:
            exp = expect(p, rec, c)
            marker = rec.id if p.output == "ids" else rec.canary
            text = p.output not in ("entries", "values") and marker in req.body
            value = rec.email is not None and rec.email in req.body
            if p.output == "preview":
                listed = rec.id in listing
            elif p.output == "entries":
                listed = rec.placeholder is not None and rec.placeholder in listing
            else:
                listed = text
            if rec.state in tids:
                if p.output not in ("entries", "values") and text != exp.text:
                    bad(rec, f"text {'shown' if text else 'missing'}, expected "
                             f"{'shown' if exp.text else 'hidden'}", req.body)
                if value != exp.value:
                    bad(rec, f"clear value {'shown' if value else 'missing'}, expected "
                             f"{'shown' if exp.value else 'withheld'}", req.body)
                # a preview lists every row within the limits; it may also list, without
                # text, a record a forget would take along (a version, a derived record)
                if p.output == "preview" and exp.listed and not listed:
                    bad(rec, "not listed, expected listed", listing)
                if p.output == "entries" and listed != exp.listed:
                    bad(rec, f"{'listed' if listed else 'not listed'}, expected "
                             f"{'listed' if exp.listed else 'absent'}", listing)
                if (p.output in ("text", "preview") and exp.text and not exp.value
                        and rec.placeholder and rec.placeholder not in req.body):
                    bad(rec, "text shown without its placeholder", req.body)
            else:  # not asked for: it may show only where the rule lets it
                if text and not exp.text:
                    bad(rec, "text leaked into another record's request", req.body)
                if value and not exp.value:
                    bad(rec, "clear value leaked into another record's request", req.body)
    assert seen_targets, f"{p.name}: no request named a target"
    return fails


# -- requests ------------------------------------------------------------------------------
def locations(w: World, *, subject: bool = True) -> list[tuple[list[Rec], str, str | None]]:
    """Each place the main tenant's records live ((scope, subject), or scope alone), with
    the records of both tenants there as its targets."""
    keys = sorted({(r.scope, r.subject if subject else "") for r in w.main()})
    return [([r for r in w.recs if r.scope == sc and (not subject or r.subject == sb)], sc,
             sb or None) for sc, sb in keys]


def at(fn: Callable[[World, Caller, str, str | None], str], *, subject: bool = True
       ) -> Callable[[World, Caller], Iterable[Req]]:
    """A path asked once per location."""
    def run(w: World, c: Caller) -> Iterator[Req]:
        for targets, scope, sub in locations(w, subject=subject):
            yield Req(targets, fn(w, c, scope, sub))
    return run


def each(fn: Callable[[World, Caller, Rec], str | tuple[str, str]], *,
         only: Callable[[Rec], bool] = lambda r: True) -> Callable[[World, Caller], Iterable[Req]]:
    """A path asked once per record (by id or placeholder); ``fn`` may return (body,
    listing)."""
    def run(w: World, c: Caller) -> Iterator[Req]:
        for rec in w.recs:
            if only(rec):
                out = fn(w, c, rec)
                body, listing = out if isinstance(out, tuple) else (out, None)
                yield Req([rec], body, listing)
    return run


def once(fn: Callable[[World, Caller], str],
         only: Callable[[Rec], bool] = lambda r: True) -> Callable[[World, Caller], Iterable[Req]]:
    def run(w: World, c: Caller) -> Iterator[Req]:
        yield Req([r for r in w.recs if only(r)], fn(w, c))
    return run


def has_value(r: Rec) -> bool:
    return r.placeholder is not None


def is_procedure(r: Rec) -> bool:
    return r.kind == "procedure"


def _chat(endpoint: str, *, reveal: bool = False, message: str = QUERY
          ) -> Callable[[World, Caller, str, str | None], str]:
    def fn(w: World, c: Caller, scope: str, subject: str | None) -> str:
        if endpoint.startswith("completions"):
            body: dict[str, Any] = {"model": f"mnemovault:{scope}", "store": False,
                                    "messages": [{"role": "user", "content": message}]}
            if subject:
                body["user"] = subject
            if endpoint == "completions-stream":
                body["stream"] = True
            raw = w.http(c, "POST", "/v1/chat/completions", json_body=body,
                         headers={"X-Mnemovault-Reveal": "true"} if reveal else None)
            return sse_text(raw) if endpoint == "completions-stream" else raw
        body = {"message": message, "scope": scope, "subject": subject, "k": 20,
                "store": False, "reveal": reveal}
        raw = w.http(c, "POST", "/v1/chat" if endpoint == "json" else "/v1/chat/stream",
                     json_body={k: v for k, v in body.items() if v is not None})
        return sse_text(raw) if endpoint == "stream" else raw
    return fn


def _command(message: Callable[[list[Rec]], str], *, reveal: bool = False
             ) -> Callable[[World, Caller, list[Rec]], tuple[str, str]]:
    """An in-band command over ``POST /v1/chat`` in the (first) record's scope: (whole
    body, the reply and the preview items: what lists ids)."""
    def fn(w: World, c: Caller, recs: list[Rec]) -> tuple[str, str]:
        raw = w.http(c, "POST", "/v1/chat", json_body={
            "message": message(recs), "scope": recs[0].scope, "store": False,
            "reveal": reveal})
        try:
            out = json.loads(raw)
        except ValueError:
            return raw, raw
        result = out.get("result") or {}
        return raw, str(out.get("reply", "")) + json.dumps(result.get("items", []))
    return fn


def batched(fn: Callable[[World, Caller, list[Rec]], str | tuple[str, str]], *,
            only: Callable[[Rec], bool] = lambda r: True, by_scope: bool = False
            ) -> Callable[[World, Caller], Iterable[Req]]:
    """A path asked for many records at once (every id in one preview; with ``by_scope``
    one query per scope naming every placeholder used there)."""
    def run(w: World, c: Caller) -> Iterator[Req]:
        chosen = [r for r in w.recs if only(r)]
        groups = sorted({r.scope for r in chosen}) if by_scope else [None]
        for g in groups:
            targets = [r for r in chosen if g is None or r.scope == g]
            out = fn(w, c, targets)
            body, listing = out if isinstance(out, tuple) else (out, None)
            yield Req(targets, body, listing)
    return run


def _ids(recs: list[Rec]) -> list[str]:
    return [r.id for r in recs]


def _phs(recs: list[Rec]) -> str:
    return " ".join(str(r.placeholder) for r in recs)


def _preview_listing(raw: str) -> tuple[str, str]:
    try:
        return raw, json.dumps(json.loads(raw).get("items", []))
    except ValueError:
        return raw, raw


def _lib_preview(rows: Any) -> tuple[str, str]:
    text = dump(rows)
    return text, text


def _mcp_preview(w: World, c: Caller, rec: Rec) -> tuple[str, str]:
    raw = w.mcp.call(c, "forget", topic=rec.placeholder, scope=rec.scope)
    return raw, raw


def _subject_args(scope: str, subject: str | None) -> dict[str, Any]:
    return {"scope": scope, **({"subject": subject} if subject else {})}


def _lib_preview_query(w: World, c: Caller, recs: list[Rec]) -> tuple[str, str]:
    text = w.lib(lambda: w.vault.forget_preview(query=_phs(recs), scope=recs[0].scope,
                                                principal=c.who))
    return text, text


def _lib_preview_ids(w: World, c: Caller, recs: list[Rec]) -> tuple[str, str]:
    text = w.lib(lambda: w.vault.forget_preview(_ids(recs), principal=c.who))
    return text, text


REVEAL = ("memory:read", "pii:reveal")

PATHS: list[Path] = [
    # -- HTTP ----------------------------------------------------------------------------
    Path("GET /v1/memories", "read", at(lambda w, c, s, sub: w.http(
        c, "GET", "/v1/memories", params={"limit": 100, **_subject_args(s, sub)})),
        statuses=("active", "pending_review")),
    Path("GET /v1/memories?include_superseded", "read", at(lambda w, c, s, sub: w.http(
        c, "GET", "/v1/memories", params={"limit": 100, "include_superseded": "true",
                                          **_subject_args(s, sub)}))),
    Path("GET /v1/memories/{id}", "read", each(lambda w, c, r: w.http(
        c, "GET", f"/v1/memories/{r.id}"))),
    Path("GET /v1/memories/{id}?reveal", "read", each(lambda w, c, r: w.http(
        c, "GET", f"/v1/memories/{r.id}", params={"reveal": "true"})), needs=REVEAL,
        reveal=True),
    Path("POST /v1/recall", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/recall", json_body={"query": QUERY, "scope": s, "k": 100,
                                            "filters": {"subject": sub}})), archived=False),
    Path("POST /v1/recall reveal", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/recall", json_body={"query": QUERY, "scope": s, "k": 100,
                                            "filters": {"subject": sub}, "reveal": True})),
        needs=REVEAL, reveal=True, archived=False),
    Path("POST /v1/recall as_of", "as_of", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/recall", json_body={"query": QUERY, "scope": s, "k": 100,
                                            "filters": {"subject": sub},
                                            "as_of": w.times["between"]})),
        archived=False, as_of="between"),
    Path("POST /v1/recall as_of now", "as_of", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/recall", params={"as_of": w.times["now"]},
        json_body={"query": QUERY, "scope": s, "k": 100, "filters": {"subject": sub}})),
        archived=False, as_of="now"),
    Path("POST /v1/recall include_archived", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/recall", json_body={
            "query": QUERY, "scope": s, "k": 100,
            "filters": {"subject": sub, "include_archived": True}}))),
    Path("GET /v1/wake", "recall", at(lambda w, c, s, sub: w.http(
        c, "GET", "/v1/wake", params={"budget": 32000, **_subject_args(s, sub)})),
        archived=False),
    Path("GET /v1/timeline", "recall", at(lambda w, c, s, sub: w.http(
        c, "GET", "/v1/timeline", params={"limit": 100, **_subject_args(s, sub)}))),
    # the body forms (issue 22: subjects out of URLs), the same cells as the GET forms
    Path("POST /v1/memories/list", "read", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/memories/list", json_body={"limit": 100, **_subject_args(s, sub)})),
        statuses=("active", "pending_review")),
    Path("POST /v1/wake", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/wake", json_body={"budget": 32000, **_subject_args(s, sub)})),
        archived=False),
    Path("POST /v1/timeline", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/timeline", json_body={"limit": 100, **_subject_args(s, sub)}))),
    Path("POST /v1/forget/preview ids", "read", batched(lambda w, c, rs: _preview_listing(
        w.http(c, "POST", "/v1/forget/preview", json_body={"ids": _ids(rs)}))),
        output="preview"),
    Path("POST /v1/forget/preview query", "read", batched(
        lambda w, c, rs: _preview_listing(w.http(c, "POST", "/v1/forget/preview", json_body={
            "query": _phs(rs), "scope": rs[0].scope})), only=has_value, by_scope=True),
        output="preview"),
    Path("POST /v1/chat", "recall", at(_chat("json")), archived=False),
    Path("POST /v1/chat reveal", "recall", at(_chat("json", reveal=True)), needs=REVEAL,
         reveal=True, archived=False),
    Path("POST /v1/chat/stream reveal", "recall", at(_chat("stream", reveal=True)),
         needs=REVEAL, reveal=True, archived=False),
    Path("POST /v1/chat/completions", "recall", at(_chat("completions")), archived=False),
    Path("POST /v1/chat/completions stream reveal", "recall", at(
        _chat("completions-stream", reveal=True)), needs=REVEAL, reveal=True, archived=False),
    Path("GET /v1/procedures/{id}", "read", each(lambda w, c, r: w.http(
        c, "GET", f"/v1/procedures/{r.id}"), only=is_procedure), kinds=("procedure",)),
    Path("POST /v1/procedures/recall", "recall", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/procedures/recall", json_body={
            "question": PROC_QUESTION, "k": 100, **_subject_args(s, sub)})),
        archived=False, kinds=("procedure",)),
    Path("GET /v1/subjects/{subject}/memories", "subject", at(lambda w, c, s, sub: w.http(
        c, "GET", f"/v1/subjects/{sub}/memories", params={"scope": s, "limit": 100}))),
    Path("GET /v1/subjects/{subject}/export", "subject", at(lambda w, c, s, sub: w.http(
        c, "GET", f"/v1/subjects/{sub}/export", params={"scope": s})),
        needs=("subject:erase",)),
    Path("GET /v1/subjects/{subject}/export?reveal", "subject", at(lambda w, c, s, sub: w.http(
        c, "GET", f"/v1/subjects/{sub}/export", params={"scope": s, "reveal": "true"})),
        needs=("subject:erase", "pii:reveal"), reveal=True),
    Path("POST /v1/subjects/memories", "subject", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/subjects/memories", json_body={"subject": sub, "scope": s,
                                                       "limit": 100}))),
    Path("POST /v1/subjects/export", "subject", at(lambda w, c, s, sub: w.http(
        c, "POST", "/v1/subjects/export", json_body={"subject": sub, "scope": s})),
        needs=("subject:erase",)),
    Path("GET /v1/vault", "read", once(lambda w, c: w.http(
        c, "GET", "/v1/vault", params={"limit": 100}), only=has_value), output="entries"),
    Path("GET /v1/vault/{placeholder}", "read", each(lambda w, c, r: w.http(
        c, "GET", f"/v1/vault/{r.placeholder}"), only=has_value), output="entries"),
    Path("GET /v1/vault/{placeholder}?reveal", "read", each(lambda w, c, r: w.http(
        c, "GET", f"/v1/vault/{r.placeholder}", params={"reveal": "true"}), only=has_value),
        output="entries", needs=REVEAL, reveal=True),
    Path("GET /v1/vault/export", "read", once(lambda w, c: w.http(
        c, "GET", "/v1/vault/export"), only=has_value), output="values",
        needs=("admin:export", "pii:reveal"), reveal=True),
    Path("GET /v1/review", "review", at(lambda w, c, s, sub: w.http(
        c, "GET", "/v1/review", params={"scope": s, "limit": 100}), subject=False),
        needs=("review:approve",)),
    # -- chat commands (POST /v1/chat; the same function serves every chat endpoint) ----
    Path("DO_NOT_STORE:", "recall", at(_chat("json", message=f"DO_NOT_STORE: {QUERY}")),
         archived=False),
    Path("FORGET_PREVIEW: ids", "read", batched(_command(
        lambda rs: "FORGET_PREVIEW: " + " ".join(_ids(rs))), by_scope=True), output="preview"),
    Path("FORGET_PREVIEW: ids reveal", "read", batched(_command(
        lambda rs: "FORGET_PREVIEW: " + " ".join(_ids(rs)), reveal=True), by_scope=True),
        output="preview", needs=REVEAL, reveal=True),
    Path("FORGET_PREVIEW: query", "read", batched(_command(
        lambda rs: f"FORGET_PREVIEW: {_phs(rs)}"), only=has_value, by_scope=True),
        output="preview"),
    # one record a request: the refusal lists the top forget_candidates (10) only
    Path("FORGET: query (refused: candidates)", "read", each(lambda w, c, r: _command(
        lambda rs: f"FORGET: {rs[0].placeholder}")(w, c, [r]), only=has_value),
        output="preview", needs=("memory:read", "memory:forget")),
    # -- MCP tools -----------------------------------------------------------------------
    Path("mcp recall", "recall", at(lambda w, c, s, sub: w.mcp.call(
        c, "recall", query=QUERY, k=100, **_subject_args(s, sub))), archived=False),
    Path("mcp recall as_of", "as_of", at(lambda w, c, s, sub: w.mcp.call(
        c, "recall", query=QUERY, k=100, as_of=w.times["between"], **_subject_args(s, sub))),
        archived=False, as_of="between"),
    Path("mcp recall include_archived", "recall", at(lambda w, c, s, sub: w.mcp.call(
        c, "recall", query=QUERY, k=100, include_archived=True, **_subject_args(s, sub)))),
    Path("mcp forget topic (preview)", "read", each(_mcp_preview, only=has_value),
         output="preview"),
    Path("mcp timeline", "recall", at(lambda w, c, s, sub: w.mcp.call(
        c, "timeline", limit=100, **_subject_args(s, sub)))),
    Path("mcp wake", "recall", at(lambda w, c, s, sub: w.mcp.call(
        c, "wake", budget_tokens=32000, **_subject_args(s, sub))), archived=False),
    Path("mcp procedure_recall", "recall", at(lambda w, c, s, sub: w.mcp.call(
        c, "procedure_recall", question=PROC_QUESTION, scope=s, k=100), subject=False),
        archived=False, kinds=("procedure",)),
    Path("mcp subject_memories", "subject", at(lambda w, c, s, sub: w.mcp.call(
        c, "subject_memories", subject=str(sub), scope=s, limit=100))),
    Path("mcp subject_export", "subject", at(lambda w, c, s, sub: w.mcp.call(
        c, "subject_export", subject=str(sub), scope=s)), needs=("subject:erase",)),
    Path("mcp subject_export reveal", "subject", at(lambda w, c, s, sub: w.mcp.call(
        c, "subject_export", subject=str(sub), scope=s, reveal=True)),
        needs=("subject:erase", "pii:reveal"), reveal=True),
    # -- the library -----------------------------------------------------------------------
    Path("mv.get", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.get(r.id, principal=c.who)))),
    Path("mv.get reveal", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.get(r.id, reveal=True, principal=c.who))), needs=REVEAL, reveal=True),
    Path("mv.list", "read", at(lambda w, c, s, sub: w.lib(lambda: w.vault.list(
        scope=s, subject=sub, limit=100, principal=c.who))),
        statuses=("active", "pending_review")),
    Path("mv.list include_superseded", "read", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.list(scope=s, subject=sub, limit=100, include_superseded=True,
                             principal=c.who)))),
    Path("mv.recall", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.recall(
        QUERY, scope=s, k=100, filters={"subject": sub}, principal=c.who))), archived=False),
    Path("mv.recall as_of", "as_of", at(lambda w, c, s, sub: w.lib(lambda: w.vault.recall(
        QUERY, scope=s, k=100, filters={"subject": sub}, principal=c.who,
        as_of=w.times["between"]))), archived=False, as_of="between"),
    Path("mv.recall reveal", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.recall(
        QUERY, scope=s, k=100, filters={"subject": sub}, reveal=True, principal=c.who))),
        needs=REVEAL, reveal=True, archived=False),
    Path("mv.wake", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.wake(
        scope=s, subject=sub, budget=32000, principal=c.who))), archived=False),
    Path("mv.timeline", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.timeline(
        scope=s, subject=sub, limit=100, principal=c.who)))),
    Path("mv.forget_preview ids", "read", batched(_lib_preview_ids), output="preview"),
    Path("mv.forget_preview query", "read", batched(_lib_preview_query, only=has_value,
                                                    by_scope=True), output="preview"),
    Path("mv.chat", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.chat(
        QUERY, scope=s, subject=sub, k=20, store=False, principal=c.who))), archived=False),
    Path("mv.chat reveal", "recall", at(lambda w, c, s, sub: w.lib(lambda: w.vault.chat(
        QUERY, scope=s, subject=sub, k=20, store=False, reveal=True, principal=c.who))),
        needs=REVEAL, reveal=True, archived=False),
    Path("mv.chat_stream reveal", "recall", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.chat_stream(QUERY, scope=s, subject=sub, k=20, store=False,
                                    reveal=True, principal=c.who))),
        needs=REVEAL, reveal=True, archived=False),
    Path("mv.placeholder_outputs", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.placeholder_outputs([r.placeholder], principal=c.who)),
        only=has_value), output="values", needs=()),
    Path("mv.placeholder_outputs reveal", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.placeholder_outputs([r.placeholder], reveal=True, principal=c.who)),
        only=has_value), output="values", needs=("pii:reveal",), reveal=True),
    Path("mv.vault_entries", "read", once(lambda w, c: w.lib(lambda: w.vault.vault_entries(
        limit=100, principal=c.who)), only=has_value), output="entries"),
    Path("mv.vault_entry reveal", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.vault_entry(str(r.placeholder), reveal=True, principal=c.who)),
        only=has_value), output="entries", needs=REVEAL, reveal=True),
    Path("mv.vault_export", "read", once(lambda w, c: w.lib(lambda: w.vault.vault_export(
        principal=c.who)), only=has_value), output="values",
        needs=("admin:export", "pii:reveal"), reveal=True),
    Path("mv.procedures.get", "read", each(lambda w, c, r: w.lib(
        lambda: w.vault.procedures.get(r.id, principal=c.who)), only=is_procedure),
        kinds=("procedure",)),
    Path("mv.procedures.recall", "recall", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.procedures.recall(PROC_QUESTION, scope=s, subject=sub, k=100,
                                          principal=c.who))),
        archived=False, kinds=("procedure",)),
    Path("mv.review.list", "review", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.review.list(scope=s, limit=100, principal=c.who)), subject=False),
        needs=("review:approve",)),
    Path("mv.review.pending", "review", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.review.pending(scope=s, principal=c.who)), subject=False),
        needs=("review:approve",), output="ids"),
    Path("mv.subjects.list", "subject", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.subjects.list(str(sub), scope=s, limit=100, principal=c.who)))),
    Path("mv.subjects.export reveal", "subject", at(lambda w, c, s, sub: w.lib(
        lambda: w.vault.subjects.export(str(sub), scope=s, reveal=True, principal=c.who))),
        needs=("subject:erase", "pii:reveal"), reveal=True),
]
BY_NAME = {p.name: p for p in PATHS}
assert len(BY_NAME) == len(PATHS), "path names must be unique"


# -- the classification tables (each checked against the product) --------------------------
def _named(prefix: str) -> list[str]:
    return [p.name for p in PATHS if p.name == prefix or p.name.startswith(prefix + " ")
            or p.name.startswith(prefix + "?")]


# (method, path) -> the matrix's paths for it
HTTP_OPS: dict[tuple[str, str], list[str]] = {
    ("GET", "/v1/memories"): _named("GET /v1/memories"),
    ("GET", "/v1/memories/{memory_id}"): _named("GET /v1/memories/{id}"),
    ("POST", "/v1/recall"): _named("POST /v1/recall"),
    ("GET", "/v1/wake"): _named("GET /v1/wake"),
    ("GET", "/v1/timeline"): _named("GET /v1/timeline"),
    ("POST", "/v1/forget/preview"): _named("POST /v1/forget/preview"),
    ("POST", "/v1/chat"): [*_named("POST /v1/chat"), "DO_NOT_STORE:", "FORGET_PREVIEW: ids",
                           "FORGET_PREVIEW: ids reveal", "FORGET_PREVIEW: query",
                           "FORGET: query (refused: candidates)"],
    ("POST", "/v1/chat/stream"): _named("POST /v1/chat/stream"),
    ("POST", "/v1/chat/completions"): _named("POST /v1/chat/completions"),
    ("GET", "/v1/procedures/{procedure_id}"): _named("GET /v1/procedures/{id}"),
    ("POST", "/v1/procedures/recall"): _named("POST /v1/procedures/recall"),
    ("GET", "/v1/subjects/{subject}/memories"): _named("GET /v1/subjects/{subject}/memories"),
    ("GET", "/v1/subjects/{subject}/export"): _named("GET /v1/subjects/{subject}/export"),
    ("GET", "/v1/vault"): _named("GET /v1/vault"),
    ("GET", "/v1/vault/{placeholder}"): _named("GET /v1/vault/{placeholder}"),
    ("GET", "/v1/vault/export"): _named("GET /v1/vault/export"),
    ("GET", "/v1/review"): _named("GET /v1/review"),
    ("POST", "/v1/memories/list"): _named("POST /v1/memories/list"),
    ("POST", "/v1/wake"): _named("POST /v1/wake"),
    ("POST", "/v1/timeline"): _named("POST /v1/timeline"),
    ("POST", "/v1/subjects/memories"): _named("POST /v1/subjects/memories"),
    ("POST", "/v1/subjects/export"): _named("POST /v1/subjects/export"),
}

# (method, path) -> why it returns no record text and no personal value
HTTP_NO_RECORDS: dict[tuple[str, str], str] = {
    ("GET", "/health"): "service status",
    ("POST", "/v1/agents/register"): "a new key's token and metadata",
    ("POST", "/v1/subjects/erase"): "the erasure receipt: ids, counts, fingerprints",
    ("POST", "/v1/memories"): "receipt: id, version, placeholders created, status",
    ("POST", "/v1/memories/batch"): "receipts",
    ("DELETE", "/v1/memories/{memory_id}"): "ids deleted and counts",
    ("POST", "/v1/memories/{memory_id}/pin"): "ids changed",
    ("POST", "/v1/memories/{memory_id}/unpin"): "ids changed",
    ("POST", "/v1/forget"): "ids deleted and counts",
    ("DELETE", "/v1/vault/{placeholder}"): "placeholders shredded",
    ("GET", "/v1/admin/audit/export"): "audit rows: ids, hashes, counts (never text)",
    ("GET", "/v1/admin/audit/checkpoint"): "a signed tree head",
    ("POST", "/v1/admin/pii/watch"): "a run report: counts and memory ids",
    ("POST", "/v1/admin/audit/checkpoint"): "a signed tree head",
    ("POST", "/v1/admin/librarian/run"): "counts and the ids of the facts written",
    ("GET", "/v1/admin/audit/proof/inclusion"): "hashes",
    ("GET", "/v1/admin/audit/proof/consistency"): "hashes",
    ("POST", "/v1/keys"): "key metadata and token",
    ("GET", "/v1/keys"): "key metadata",
    ("GET", "/v1/keys/{key_id}"): "key metadata (limits as placeholders without pii:reveal: "
                                  "tests/test_keys_admin.py)",
    ("DELETE", "/v1/keys/{key_id}"): "key metadata",
    ("GET", "/v1/models"): "model names (scopes of the key)",
    ("GET", "/v1/models/{model}"): "a model card",
    ("POST", "/v1/procedures"): "receipt of the caller's own procedure",
    ("POST", "/v1/procedures/{procedure_id}/runs"): "run receipt: verdict and counters",
    ("POST", "/v1/runs/{run_id}/feedback"): "the caller's run (NotFound outside its limits)",
    ("POST", "/v1/runs/{run_id}/evaluate"): "evaluation receipt: evaluator, verdict, score, "
                                            "counters (NotFound outside its limits)",
    ("POST", "/v1/procedures/{procedure_id}/versions"): "receipt of the caller's new version",
    ("POST", "/v1/procedures/prune"): "counts",
    ("POST", "/v1/review/{memory_id}/approve"): "decision: ids and status",
    ("POST", "/v1/review/{memory_id}/reject"): "decision: ids and status",
    ("POST", "/v1/subjects/{subject}/erase"): "signed erasure receipt: fingerprints, counts",
    ("POST", "/v1/scopes/{scope}/erase"): "signed erasure receipt: fingerprints, counts",
    ("PUT", "/v1/memories/{memory_id}/content"): "rectified: id, version, placeholders "
                                                 "(the reveal attacks check its body)",
    ("POST", "/v1/admin/tenants/{tenant_id}/export"): "a queued job (the document goes to "
                                                      "storage, not the response)",
    ("GET", "/v1/admin/tenants/{tenant_id}/export/{job_id}"): "job state and manifest hash",
    ("POST", "/v1/admin/tenants/{tenant_id}/delete"): "tenant state",
    ("POST", "/v1/admin/tenants/{tenant_id}/delete/cancel"): "tenant state",
}

# MCP tool -> the matrix's paths for it, or why it returns no record text (a str)
MCP_TOOLS: dict[str, list[str] | str] = {
    "recall": _named("mcp recall"),
    "forget": ["mcp forget topic (preview)"],  # with ids/query: ids and counts only
    "timeline": _named("mcp timeline"),
    "wake": _named("mcp wake"),
    "procedure_recall": _named("mcp procedure_recall"),
    "remember": "receipt", "pin": "ids changed", "unpin": "ids changed",
    "erase_value": "placeholders shredded", "procedure_capture": "receipt",
    "procedure_run": "run receipt", "procedure_feedback": "the caller's run",
    "procedure_evaluate": "evaluation receipt (NotFound outside its limits)",
    "subject_memories": _named("mcp subject_memories"),
    "subject_export": _named("mcp subject_export"),
    "rectify": "rectified: id, version, placeholders (as PUT /v1/memories/{id}/content)",
    "subject_erase": "signed erasure receipt: fingerprints, counts",
    "audit_verify": "a verdict: counts and hashes", "audit_inclusion_proof": "hashes",
}

# chat command prefix -> the matrix's paths for it, or why it returns no record text
COMMANDS: dict[str, list[str] | str] = {
    "DO_NOT_STORE:": ["DO_NOT_STORE:"],
    "FORGET_PREVIEW:": ["FORGET_PREVIEW: ids", "FORGET_PREVIEW: ids reveal",
                        "FORGET_PREVIEW: query"],
    "FORGET:": ["FORGET: query (refused: candidates)"],  # with ids: counts only
    "FORGET_CONFIRM:": "counts of what was deleted",
    "PIN:": "counts", "UNPIN:": "counts",
}

# public attribute of the facade (``section.name`` for sections) -> paths, or why not a read
LIBRARY: dict[str, list[str] | str] = {
    "get": _named("mv.get"), "list": _named("mv.list"), "recall": _named("mv.recall"),
    "wake": _named("mv.wake"), "timeline": _named("mv.timeline"),
    "forget_preview": _named("mv.forget_preview"), "chat": _named("mv.chat"),
    "chat_stream": _named("mv.chat_stream"),
    "placeholder_outputs": _named("mv.placeholder_outputs"),
    "vault_entries": _named("mv.vault_entries"), "vault_entry": _named("mv.vault_entry"),
    "vault_export": _named("mv.vault_export"),
    "procedures.get": _named("mv.procedures.get"),
    "procedures.recall": _named("mv.procedures.recall"),
    "review.list": _named("mv.review.list"), "review.pending": _named("mv.review.pending"),
    "subjects.list": _named("mv.subjects.list"),
    "subjects.export": _named("mv.subjects.export"),
    # not reads
    "redact": "the caller's own texts as placeholders (lookups only)",
    "remember": "receipt", "remember_many": "receipts", "forget": "ids and counts",
    "delete": "ids and counts", "pin": "ids", "unpin": "ids",
    "run_retention": "counts", "run_retention_all": "operator: counts",
    "shred": "placeholders", "rotate_kek": "operator: versions",
    "pii_watch": "section", "pii_watch.run": "a run report: counts and memory ids",
    "pii_watch.run_all": "operator: counts and memory ids", "pii_watch.pending": "a count",
    "ensure_tenant": "nothing", "create_key": "token and key id",
    "authenticate": "a principal", "list_keys": "key metadata", "get_key": "key metadata",
    "register_agent": "a new key's token and metadata",
    "subjects.ensure_checked": "ledger check: counts", "subjects.on_start": "ledger check: counts",
    "subjects.ledger_status": "ledger status: counts",
    "subjects.verify_ledger": "ledger verification: line numbers",
    "revoke_key": "key metadata",
    "open": "lifecycle", "close": "lifecycle", "principal": "a local principal",
    "health": "service status",
    "procedures": "section", "review": "section", "tenants": "section", "subjects": "section",
    "lexical": "section", "librarian": "section",
    "librarian.run": "counts and fact ids", "librarian.run_all": "operator: counts",
    "stored_source_ids": "import resume: source ids of the rows the caller's view holds "
                         "(visibility.clause)",
    "procedures.capture": "receipt", "procedures.new_version": "receipt",
    "procedures.record_run": "run receipt", "procedures.feedback": "the caller's run",
    "procedures.prune": "counts", "procedures.configure": "plugins",
    "procedures.evaluate": "evaluation receipt (NotFound outside its limits)",
    "procedures.register_evaluator": "plugins", "procedures.evaluators": "evaluator names",
    "review.approve": "decision", "review.reject": "decision",
    "review.flag": "decision (a flagged import kept or held for review)",
    "subjects.erasures": "ledger rows: ids, counts and fingerprints, no record",
    "subjects.erase": "erasure receipt", "subjects.erase_scope": "erasure receipt",
    "subjects.rectify": "rectified (the reveal attacks check it)",
    "subjects.verify_receipt": "a verdict", "subjects.export_ledger": "a count",
    "subjects.reapply_erasures": "counts", "subjects.wire": "wiring",
    "tenants.export": "a queued job", "tenants.export_status": "job state",
    "tenants.delete": "tenant state", "tenants.cancel_delete": "tenant state",
    "tenants.status": "tenant state", "tenants.purge_expired": "operator: counts",
    "tenants.purge_log": "operator: audit rows", "tenants.process_outbox": "operator: jobs",
    "tenants.background": "operator: threads", "tenants.authenticate": "a principal",
    "lexical.on_start": "operator: counts", "lexical.pending": "operator: counts",
    "lexical.reindex": "operator: counts",
}
# the runtime's parts (mv.db, mv.pii, mv.audit...): raw operator access, not governed paths
LIBRARY_PARTS = {n for n, a in vars(MemoryVault).items() if isinstance(a, part)}


def _library_names() -> set[str]:
    names = set()
    for n in dir(MemoryVault):
        if n.startswith("_") or n in LIBRARY_PARTS:
            continue
        names.add(n)
        attr = inspect.getattr_static(MemoryVault, n)
        if hasattr(attr, "cls"):  # a facade section
            names |= {f"{n}.{m}" for m in dir(attr.cls) if not m.startswith("_")}
    return names


def _classified(table: dict[Any, Any], where: str) -> list[str]:
    """Every path a table names exists; every path is named by some table."""
    problems = [f"{where} {k}: unknown path {name!r}" for k, v in table.items()
                if isinstance(v, list) for name in v if name not in BY_NAME]
    problems += [f"{where} {k}: a read path with no cells" for k, v in table.items()
                 if isinstance(v, list) and not v]
    return problems


def test_every_http_operation_is_classified() -> None:
    doc = create_app(None).openapi()  # type: ignore[arg-type]
    ops = {(m.upper(), p) for p, methods in doc["paths"].items() for m in methods
           if m in ("get", "put", "post", "delete", "patch")}
    both = set(HTTP_OPS) & set(HTTP_NO_RECORDS)
    missing = sorted(ops - set(HTTP_OPS) - set(HTTP_NO_RECORDS))
    stale = sorted((set(HTTP_OPS) | set(HTTP_NO_RECORDS)) - ops)
    assert not missing, ("operations neither in HTTP_OPS (a read path: add its cells) nor in "
                         f"HTTP_NO_RECORDS (say why it returns no record): {missing}")
    assert not stale, f"classified operations the API no longer has: {stale}"
    assert not both, f"in both tables: {sorted(both)}"
    assert not _classified(HTTP_OPS, "HTTP"), _classified(HTTP_OPS, "HTTP")


def test_every_mcp_tool_is_classified(world: World) -> None:
    tools = world.mcp.tools()
    missing, stale = sorted(tools - set(MCP_TOOLS)), sorted(set(MCP_TOOLS) - tools)
    assert not missing, f"MCP tools not in MCP_TOOLS (a read path, or why not): {missing}"
    assert not stale, f"MCP_TOOLS names tools the server no longer has: {stale}"
    assert not _classified(MCP_TOOLS, "MCP"), _classified(MCP_TOOLS, "MCP")


def test_every_chat_command_is_classified() -> None:
    missing = sorted(set(PREFIXES) - set(COMMANDS))
    stale = sorted(set(COMMANDS) - set(PREFIXES))
    assert not missing, f"chat commands not in COMMANDS: {missing}"
    assert not stale, f"COMMANDS names commands the parser no longer has: {stale}"
    assert not _classified(COMMANDS, "command"), _classified(COMMANDS, "command")


def test_every_library_method_is_classified() -> None:
    names = _library_names()
    missing, stale = sorted(names - set(LIBRARY)), sorted(set(LIBRARY) - names)
    assert not missing, ("public MemoryVault methods not in LIBRARY (a read path with its "
                         f"cells, or why it is not one): {missing}")
    assert not stale, f"LIBRARY names methods the facade no longer has: {stale}"
    assert not _classified(LIBRARY, "library"), _classified(LIBRARY, "library")


def test_every_path_belongs_to_a_table() -> None:
    named = {n for t in (HTTP_OPS, MCP_TOOLS, COMMANDS, LIBRARY) for v in t.values()
             if isinstance(v, list) for n in v}
    assert set(BY_NAME) == named, sorted(set(BY_NAME) ^ named)


# -- the matrix --------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize("path", list(BY_NAME))
def test_cell(world: World, path: str, caller: str) -> None:
    """One path × every record × one caller (the cells of this row)."""
    p, c = BY_NAME[path], world.callers[caller]
    reqs: Iterable[Req] = p.run(world, c)
    if not set(p.needs) <= c.perms:  # refused before any record is read: one request
        first = next(iter(reqs))
        reqs = [Req(world.recs, first.body, first.listing)]
    fails = check(p, c, world, reqs)
    assert not fails, f"{len(fails)} cell(s) wrong:\n" + "\n".join(fails)


# -- the reveal attacks ----------------------------------------------------------------------
IN, OUT = "atk-in", "atk-out"  # scopes
SI, SO = "atk-si", "atk-so"  # subjects
ATTACKERS: dict[str, tuple[str | None, str | None, str]] = {
    # attacker -> its scope limit, its subject limit, the record only outside its limits
    "owner@scope": (IN, None, "out_scope"),
    "owner@subject": (None, SI, "out_subject"),
}


@dataclass
class AttackWorld:
    vault: MemoryVault
    client: TestClient
    tenant: str
    recs: dict[str, Rec]
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def attack(vault: MemoryVault, echo: EchoModel) -> Iterator[AttackWorld]:
    """A tenant of its own: a record inside both attackers' limits, one only in another
    scope, one only of another subject (each with its own e-mail); the attackers' keys."""
    tenant = f"atk-{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(tenant)
    b = Builder(vault, {"main": tenant})
    recs = {"inside": b.memory("inside", IN, SI), "out_scope": b.memory("out_scope", OUT, SI),
            "out_subject": b.memory("out_subject", IN, SO)}
    tokens = {"owner": vault.create_key(tenant, "owner")[0]}
    for name, (scope, subject, _) in ATTACKERS.items():
        tokens[name] = vault.create_key(tenant, "owner", scope=scope, subject=subject)[0]
    with TestClient(create_app(vault)) as client:
        yield AttackWorld(vault, client, tenant, recs, tokens)


@pytest.mark.parametrize("attacker", list(ATTACKERS))
def test_reveal_attack(attack: AttackWorld, attacker: str) -> None:
    """A narrowed owner quotes the placeholder of a value that lives only outside its limits
    in (1) chat messages (and history), (2) a memory it writes within its limits, (3) a
    rectified text of its own record; then asks every reveal path. The clear value shows
    nowhere; the placeholder stays as it is (no error); values within its limits still
    reveal (the control), and an unlimited owner still reveals the outside value."""
    a = attack
    out, inside = a.recs[ATTACKERS[attacker][2]], a.recs["inside"]
    ph, clear = str(out.placeholder), str(out.email)
    h = {"Authorization": f"Bearer {a.tokens[attacker]}"}
    who = a.vault.authenticate(a.tokens[attacker])
    bodies: list[tuple[str, str]] = []
    fails: list[str] = []

    def http(label: str, method: str, url: str, *, ok: tuple[int, ...] = (200, 201),
             headers: dict[str, str] | None = None, **kw: Any) -> Any:
        r = a.client.request(method, url, headers={**h, **(headers or {})}, **kw)
        body = sse_text(r.text) if "stream" in label else r.text
        bodies.append((label, body))
        if r.status_code not in ok:
            fails.append(f"{label}: HTTP {r.status_code} {r.text[:300]}")
        return r

    def lib(label: str, fn: Callable[[], Any]) -> str:
        try:
            body = dump(fn())
        except MnemoError as exc:
            body = f"error: {exc}"
            fails.append(f"{label}: {exc}")
        bodies.append((label, body))
        return body

    quoting = f"what about {ph} and the lantern festival?"
    chat = {"scope": IN, "subject": SI, "k": 20, "reveal": True}
    # (1) chat messages quoting it (the model repeats the prompt, the message included)
    for url in ("/v1/chat", "/v1/chat/stream"):
        http(f"{url} quoting{' stream' if 'stream' in url else ''}", "POST", url,
             json={**chat, "message": quoting, "store": False})
    http("/v1/chat quoting in history", "POST", "/v1/chat", json={
        **chat, "message": QUERY, "store": False,
        "history": [{"role": "user", "content": f"earlier you mentioned {ph}"},
                    {"role": "assistant", "content": f"yes, {ph}"}]})
    completion = {"model": f"mnemovault:{IN}", "user": SI, "store": False,
                  "messages": [{"role": "user", "content": quoting}]}
    reveal_header = {"X-Mnemovault-Reveal": "true"}
    http("/v1/chat/completions quoting", "POST", "/v1/chat/completions", json=completion,
         headers=reveal_header)
    http("/v1/chat/completions quoting stream", "POST", "/v1/chat/completions",
         json={**completion, "stream": True}, headers=reveal_header)
    stored = http("/v1/chat quoting, stored", "POST", "/v1/chat",
                  json={**chat, "message": quoting}).json()["stored"]
    # (2) a memory it writes within its limits
    wrote = http("POST /v1/memories quoting", "POST", "/v1/memories", json={
        "content": f"note: ask {ph} about the lantern festival.", "scope": IN,
        "subject": SI}).json()["id"]
    # ... and one quoting a placeholder no value has (the oracle's other side)
    fake = "{email:p_" + uuid.uuid4().hex[:10] + "}"
    http("POST /v1/memories quoting a made-up placeholder", "POST", "/v1/memories", json={
        "content": f"note: ask {fake} about the lantern festival.", "scope": IN,
        "subject": SI})
    # (3) a rectify of one of its records
    own = http("POST /v1/memories (own)", "POST", "/v1/memories", json={
        "content": "note: the lantern festival lanterns are blue.", "scope": IN,
        "subject": SI}).json()["id"]
    http("PUT /v1/memories/{id}/content quoting", "PUT", f"/v1/memories/{own}/content",
         json={"content": f"note: the lantern festival lanterns are blue, ask {ph}."})
    lib("mv.subjects.rectify quoting", lambda: a.vault.subjects.rectify(
        own, f"note: the lantern festival lanterns are blue; {ph} knows.", principal=who))

    # every reveal path, after the attacks
    quoted = {}
    for mid in (stored, wrote, own):
        quoted[mid] = http(f"GET /v1/memories/{mid}?reveal", "GET", f"/v1/memories/{mid}",
                           params={"reveal": "true"}).text
        lib(f"mv.get {mid} reveal", lambda mid=mid: a.vault.get(mid, reveal=True,
                                                                principal=who))
    recall = http("POST /v1/recall reveal", "POST", "/v1/recall", json={
        "query": QUERY, "scope": IN, "k": 100, "reveal": True,
        "filters": {"include_archived": True}}).text
    lib("mv.recall reveal", lambda: a.vault.recall(QUERY, scope=IN, k=100, reveal=True,
                                                   principal=who))
    http("GET /v1/vault/{placeholder}?reveal", "GET", f"/v1/vault/{ph}",
         params={"reveal": "true"}, ok=(200, 404))
    lib("mv.vault_entry reveal", lambda: a.vault.vault_entry(ph, reveal=True, principal=who)
        if ph in dump(a.vault.vault_entries(limit=100, principal=who)) else {})
    http("GET /v1/vault", "GET", "/v1/vault", params={"limit": 100})
    lib("mv.placeholder_outputs reveal", lambda: a.vault.placeholder_outputs(
        [ph], reveal=True, principal=who))
    chats = [http("/v1/chat reveal", "POST", "/v1/chat",
                  json={**chat, "message": QUERY, "store": False}).text,
             http("/v1/chat/stream reveal stream", "POST", "/v1/chat/stream",
                  json={**chat, "message": QUERY, "store": False}).text,
             lib("mv.chat reveal", lambda: a.vault.chat(QUERY, scope=IN, subject=SI, k=20,
                                                        reveal=True, store=False,
                                                        principal=who))]
    http("/v1/chat/completions reveal", "POST", "/v1/chat/completions",  # k: chat_k
         json={**completion, "messages": [{"role": "user", "content": QUERY}]},
         headers=reveal_header)
    http("FORGET_PREVIEW: reveal", "POST", "/v1/chat", json={
        **chat, "store": False, "message": f"FORGET_PREVIEW: {stored} {wrote} {own}"})
    http("FORGET_PREVIEW: query reveal", "POST", "/v1/chat", json={
        **chat, "store": False, "message": f"FORGET_PREVIEW: {ph}"})
    export = http("GET /v1/subjects/{subject}/export?reveal", "GET",
                  f"/v1/subjects/{SI}/export", params={"scope": IN, "reveal": "true"}).text
    lib("mv.subjects.export reveal", lambda: a.vault.subjects.export(
        SI, scope=IN, reveal=True, principal=who))

    # quoting must not tell the key whether the outside value exists: a real placeholder
    # it quoted looks like a made-up one on every path that lists or looks up entries
    def looks(x: str) -> tuple[Any, ...]:
        one = a.client.get(f"/v1/vault/{x}", params={"reveal": "true"}, headers=h)
        listed = x in a.client.get("/v1/vault", params={"limit": 100}, headers=h).text
        exported = x in a.client.get(f"/v1/subjects/{SI}/export", headers=h,
                                     params={"scope": IN}).json()["vault_entries"].__repr__()
        return one.status_code, sorted(one.json()), listed, exported

    if looks(ph) != looks(fake):
        fails.append(f"existence oracle: quoted outside placeholder {looks(ph)} vs made-up "
                     f"placeholder {looks(fake)} (status, fields, in /v1/vault, in the "
                     "subject export's vault_entries)")
    for label, body in bodies:
        if clear in body:
            fails.append(f"{label}: the clear value of the outside placeholder shows "
                         f"({body[:300]!r})")
    for label, body in bodies:
        if "quoting" in label and "POST /v1/memories" not in label and "PUT" not in label \
                and "rectify" not in label and ph not in body:
            fails.append(f"{label}: the quoted placeholder did not stay as it is")
    for mid, body in quoted.items():
        if ph not in body:
            fails.append(f"GET /v1/memories/{mid}?reveal: the placeholder it quotes is gone")
    # the controls: a value within the limits still reveals, and the outside one exists
    for label, body in [("recall", recall), ("subject export", export),
                        *[(f"chat {n}", b) for n, b in enumerate(chats)]]:
        if str(inside.email) not in body:
            fails.append(f"control: {label} did not reveal the value within the limits")
    r = a.client.get(f"/v1/vault/{ph}", params={"reveal": "true"},
                     headers={"Authorization": f"Bearer {a.tokens['owner']}"})
    assert r.status_code == 200 and r.json().get("value") == clear, r.text
    assert not fails, f"{attacker}: {len(fails)} problem(s):\n" + "\n".join(fails)
