"""The edge of the HTTP API: what every request meets before FastAPI reads or parses it.

:class:`Edge` is a plain ASGI middleware, outermost in the app (:func:`mnemovault.api.
create_app` adds it last). For each request, in this order:

1. **Request id.** ``X-Request-Id`` is kept only in a safe shape (:data:`REQUEST_ID_RE`: 1
   to 64 characters of ``A-Z a-z 0-9 . _ : -``); anything else is discarded and replaced
   by a fresh UUID, so a client's text never reaches the logs or the audit chain through
   it. The id is put on the scope (``request.state.request_id``) and on every response.
2. **Route.** The request is matched against the app's routes once, to know its template
   (``/v1/subjects/{subject}/erase``: what the logs and telemetry name, never the raw
   path or query string) and its policy (:class:`RoutePolicy`).
3. **Body limit.** A ``Content-Length`` over the route's limit is answered ``413`` at once,
   without reading a byte of the body. Otherwise the ``http.request`` chunks are counted
   as the app reads them; the chunk that crosses the limit is answered ``413`` (when no
   response has started) and the app is told the client left (``http.disconnect``), so
   nothing beyond the limit is ever buffered. The 413 carries ``Connection: close``: the
   server closes the connection rather than read the rest.
4. **Authentication.** A route that needs a key is authenticated here, from the
   ``Authorization`` header alone (:meth:`MemoryVault.authenticate`, in a worker thread),
   before its body is read: a request without a valid key is answered ``401`` having read
   nothing, whatever its size. The principal rides on the scope
   (``request.state.principal``) and the app's dependency reuses it.

5. **Rate limits** (:class:`Budgets`, the ``rate_limit_*`` settings, the ``limits``
   package): every request with a key spends from that key's budget of its class
   (:func:`budget_of`: ``write``, ``recall``, ``chat``, ``admin``); a request whose key
   fails spends from its client address's ``unauthenticated`` budget, and once that is
   spent such requests are answered 429 instead of 401 (a well-formed key is still looked
   up, by primary key: a valid key from the same address, behind the same proxy, keeps
   working); the routes that need no key spend from the address's ``public`` budget. Over a budget:
   ``429`` with ``Retry-After`` (whole seconds) and ``details.retry_after``. The counters
   are sliding-window counters in this process's memory: each server process counts on
   its own, so N processes behind a balancer admit up to N times each budget.

Errors are the API's envelope (``{"error": {...}, "request_id"}``).

**The access log** is written here, one line per request on the logger
``mnemovault.access`` (INFO): method, route template, status, milliseconds and request id,
e.g. ``POST /v1/subjects/{subject}/erase 200 41.2ms (request 5f0c…)``. Never the raw path
or query string (a subject can be in them), never the client's address or headers.
``mnemovault serve`` turns uvicorn's own access log off, which would print them.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.routing import compile_path, get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemovault import telemetry
from mnemovault.errors import ConfigError, MnemoError, RateLimited, TooLarge, Unauthenticated
from mnemovault.models import MAX_CONTENT_CHARS

if TYPE_CHECKING:
    from mnemovault.config import Settings
    from mnemovault.vault import MemoryVault

access_log = logging.getLogger("mnemovault.access")

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
"""The shape of an ``X-Request-Id`` that is kept; any other is replaced by a fresh id."""

UNMATCHED = "(unmatched)"
LOCAL_OPERATOR = "mnemovault.local_operator"
"""The ASGI scope key :mod:`mnemovault.api.local` sets (True) on a request that came over the
local socket from this user: such a request is the local operator's, without an API key.
Only the socket's listener sets it; nothing a client sends can."""
TENANT_HEADER = "x-mnemovault-tenant"
"""The route template of a request no route matches (logged instead of its path)."""

# -- the largest valid request of each class, from the models' limits -------------------
JSON_BYTES_PER_CHAR = 6  # a BMP character as a JSON escape (\\uXXXX), the widest common form
ITEM_OVERHEAD = 8192  # one memory's other fields: scope, subject, key (200 chars), 32 tags
# of 64, provenance, 100 entities, 100 ids, with their names and JSON punctuation
BATCH_ITEMS = 1000

CONTENT_LIMIT = MAX_CONTENT_CHARS * JSON_BYTES_PER_CHAR + 64 * 1024
"""One memory, rectified content or a procedure run's answer (100,000 characters; a run's
question adds 10,000), all escaped: about 664 KB (724 KB for a run); the default
``max_body_content_bytes`` (1 MiB) is a little over."""

BATCH_LIMIT = BATCH_ITEMS * (MAX_CONTENT_CHARS + ITEM_OVERHEAD)
"""1,000 items of 100,000 one-byte characters with their other fields: the default
``max_body_batch_bytes`` (108,192,000 bytes). A batch of that many characters in a
multi-byte script is over it: send it in smaller batches, or raise the setting."""

PUBLIC = frozenset({"/health", "/docs", "/openapi.json", "/v1/agents/register"})
"""Templates that need no key (every other matched route is authenticated at the edge)."""

CONSOLE = "/console"
"""The web console's prefix (:mod:`mnemovault.console`): public at the edge, since the
console authenticates each request itself, from its session cookie, with the same
:meth:`MemoryVault.authenticate` (the session holds the key it was opened with)."""

DELETED_TENANT_OK = frozenset({"/v1/admin/tenants/{tenant_id}/delete/cancel"})
"""Templates whose key may belong to a soft-deleted tenant (cancelling the deletion)."""

CONTENT = frozenset({("POST", "/v1/memories"), ("POST", "/console/subjects/rectify"),
                     ("PUT", "/v1/memories/{memory_id}/content"),
                     ("POST", "/v1/procedures/{procedure_id}/runs"),
                     ("POST", "/v1/runs/{run_id}/evaluate"), ("POST", "/mcp")})
LARGE = frozenset({("POST", "/v1/chat"), ("POST", "/v1/chat/stream"),
                   ("POST", "/v1/chat/completions"), ("POST", "/v1/procedures"),
                   ("POST", "/v1/procedures/{procedure_id}/versions")})
BATCH = frozenset({("POST", "/v1/memories/batch")})


@dataclass(frozen=True)
class RoutePolicy:
    """What the edge applies to one route: its ``template``, the body limit in bytes,
    whether it needs a key (``public`` False) and whether a deleted tenant's key may pass."""

    template: str
    max_body: int
    public: bool = False
    deleted_ok: bool = False
    budget: str = "public"


CHAT_ROUTES = frozenset({"/v1/chat", "/v1/chat/stream", "/v1/chat/completions"})
ADMIN_PREFIXES = ("/v1/keys", "/v1/admin/", "/v1/review", "/v1/subjects/", "/v1/scopes/",
                  "/v1/vault", "/v1/agents")
ADMIN_ROUTES = frozenset({("PUT", "/v1/memories/{memory_id}/content"),
                          ("POST", "/v1/procedures/prune")})
READ_POSTS = frozenset({"/v1/recall", "/v1/procedures/recall", "/v1/forget/preview",
                        "/v1/wake", "/v1/timeline", "/v1/memories/list"})
BUDGETS = ("write", "recall", "chat", "admin", "unauthenticated", "public", "register",
           "agent")
REGISTER = "/v1/agents/register"
EXPIRE_EVERY = 10.0  # seconds between sweeps of expired rate counters


def budget_of(method: str, template: str) -> str:
    """The rate budget a keyed request spends from: ``chat`` (the chat routes and the OpenAI
    endpoint), ``admin`` (keys, audit, tenants, review, vault, subject rights), ``recall``
    (reads: GET, recall, previews, wake, timeline) or ``write`` (the rest, MCP included)."""
    if template in CHAT_ROUTES:
        return "chat"
    if template.startswith(ADMIN_PREFIXES) or (method, template) in ADMIN_ROUTES:
        return "admin"
    if method in ("GET", "HEAD") or template in READ_POSTS:
        return "recall"
    return "write"


class Budgets:
    """Rate budgets in this process's memory (module docstring): one sliding-window
    counter per (budget, key id or hashed client address).

    Raises:
        ConfigError: a ``rate_limit_*`` setting is not in the ``limits`` notation.
    """

    def __init__(self, settings: Settings) -> None:
        from limits import parse_many
        from limits.storage import MemoryStorage
        from limits.strategies import SlidingWindowCounterRateLimiter

        class Storage(MemoryStorage):
            """``limits``' memory storage without its expiry timer thread, which it starts
            anew from the request path whenever the last one has run (a thread start per
            request under load: bench/edge.py measured 0.63x throughput with it); expired
            counters are dropped here every :data:`EXPIRE_EVERY` seconds instead."""

            def _MemoryStorage__schedule_expiry(self) -> None:  # the name it calls
                return None

        self.storage = Storage()
        self.limiter = SlidingWindowCounterRateLimiter(self.storage)
        self._expired_at = time.monotonic()
        self.items: dict[str, list[Any]] = {}
        for name in BUDGETS:
            value = getattr(settings, f"rate_limit_{name}")
            try:
                self.items[name] = parse_many(value)
            except ValueError:
                raise ConfigError(f"rate_limit_{name}: not a rate limit (e.g. "
                                  "'600/minute')", field=f"rate_limit_{name}") from None

    def hit(self, budget: str, who: str) -> RateLimited | None:
        """Spend one from ``budget`` for ``who``; the error to answer when it is spent."""
        now = time.monotonic()
        if now - self._expired_at > EXPIRE_EVERY:
            self._expired_at = now
            self.storage._MemoryStorage__expire_events()  # type: ignore[attr-defined]
        for item in self.items[budget]:
            if not self.limiter.hit(item, budget, who):
                return self._over(budget, item, who)
        return None

    def check(self, budget: str, who: str) -> RateLimited | None:
        """Whether ``who`` has ``budget`` left, spending nothing."""
        for item in self.items[budget]:
            if not self.limiter.test(item, budget, who):
                return self._over(budget, item, who)
        return None

    def _over(self, budget: str, item: Any, who: str) -> RateLimited:
        reset = self.limiter.get_window_stats(item, budget, who).reset_time
        retry = max(1, math.ceil(reset - time.time()))
        return RateLimited(f"rate: over the {budget} budget of {item}; retry after {retry} s",
                           budget=budget, retry_after=retry)


def client_address(scope: Scope) -> str:
    """The client's address as a counter key: a hash, so no address sits in memory as
    written (uvicorn's ``--forwarded-allow-ips`` decides whether a proxy's header counts)."""
    client = scope.get("client")
    host = str(client[0]) if client else "unknown"
    return hashlib.blake2b(host.encode(), digest_size=12).hexdigest()


def body_limit(method: str, template: str, settings: Settings) -> int:
    """The body limit of a route in bytes (module docstring; the ``max_body_*`` settings)."""
    if (method, template) in BATCH:
        return settings.max_body_batch_bytes
    if (method, template) in LARGE:
        return settings.max_body_large_bytes
    if (method, template) in CONTENT:
        return settings.max_body_content_bytes
    return settings.max_body_bytes


def request_id(headers: Headers) -> str:
    """The client's ``X-Request-Id`` when it has the safe shape, else a fresh UUID (the
    original is dropped: never logged, never stored)."""
    given = headers.get("x-request-id")
    if given is not None and REQUEST_ID_RE.match(given):
        return given
    return str(uuid.uuid4())


def envelope(exc: MnemoError, rid: str | None, *,
             headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error envelope for ``exc`` (the same shape as the app's handlers)."""
    body: dict[str, Any] = {"error": exc.to_dict()}
    if rid:
        body["request_id"] = rid
    headers = dict(headers or {})
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=exc.status, headers=headers)


class Edge:
    """The ASGI middleware (module docstring). ``routes`` is the app's route list (read at
    the first request, when every router has been included)."""

    def __init__(self, app: ASGIApp, *, vault: MemoryVault, routes: Iterable[Any]) -> None:
        self.app = app
        self.vault = vault
        self._routes = routes
        self._table: list[tuple[re.Pattern[str], frozenset[str] | None,
                                RoutePolicy]] | None = None
        self._budgets: Budgets | None = None
        self._agents: Any = None

    @property
    def budgets(self) -> Budgets | None:
        """The rate budgets (None with ``rate_limits`` off), made at the first request."""
        if self._budgets is None and self.vault.settings.rate_limits:
            self._budgets = Budgets(self.vault.settings)
        return self._budgets

    # -- routes ---------------------------------------------------------------------------
    def _policies(self) -> list[tuple[re.Pattern[str], frozenset[str] | None, RoutePolicy]]:
        if self._table is None:
            table = []
            settings = self.vault.settings
            for path, methods in _flat(self._routes):
                regex, _, _ = compile_path(path)
                # one policy per route: a POST route's method decides its class
                method = "POST" if not methods or "POST" in methods else sorted(methods)[0]
                public = (path in PUBLIC or path == CONSOLE
                          or path.startswith(CONSOLE + "/"))
                table.append((regex, methods, RoutePolicy(
                    template=path, max_body=body_limit(method, path, settings),
                    public=public, deleted_ok=path in DELETED_TENANT_OK,
                    budget=("register" if path == REGISTER else "public") if public
                    else budget_of(method, path))))
            self._table = table
        return self._table

    def policy(self, scope: Scope) -> RoutePolicy:
        """The policy of the route ``scope`` asks for; an unmatched request (404, and 405
        for a method the route lacks: no key is needed to be told so) gets the default
        body limit and no authentication here."""
        path = get_route_path(scope)
        method = scope["method"]
        partial: RoutePolicy | None = None
        for regex, methods, policy in self._policies():
            if regex.match(path):
                if methods is None or method in methods:
                    return policy
                if partial is None:
                    partial = policy
        template = partial.template if partial is not None else UNMATCHED
        return RoutePolicy(template=template, max_body=self.vault.settings.max_body_bytes,
                           public=True)

    # -- the request ----------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        rid = request_id(headers)
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        policy = self.policy(scope)
        state["route"] = policy.template
        exchange = _Exchange(send, rid, policy.template)
        started = time.perf_counter()
        method = scope["method"]
        with telemetry.span("mnemovault.request", **{"http.request.method": method,
                                                     "http.route": policy.template}) as sp:
            try:
                await self._serve(scope, receive, exchange, headers, policy)
            finally:
                state.pop("principal", None)
                status = exchange.status or 500
                ms = (time.perf_counter() - started) * 1000
                sp.set_attribute("http.response.status_code", status)
                telemetry.request_done(method, policy.template, status, ms)
                access_log.info("%s %s %d %.1fms (request %s)", method, policy.template,
                                status, ms, rid)

    async def _serve(self, scope: Scope, receive: Receive, exchange: _Exchange,
                     headers: Headers, policy: RoutePolicy) -> None:
        too_large = TooLarge(f"body: larger than this endpoint's limit of {policy.max_body} "
                             "bytes", field="body", limit_bytes=policy.max_body)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > policy.max_body:
            await exchange.refuse(scope, receive, too_large, close=True)
            return
        budgets = self.budgets
        # unread body: closing costs less than reading (and discarding) the rest
        body_follows = length not in (None, "0") or "transfer-encoding" in headers
        over: RateLimited | None = None
        if policy.public:
            over = budgets.hit(policy.budget, client_address(scope)) if budgets else None
        else:
            try:
                who = (self._local_operator(headers) if scope.get(LOCAL_OPERATOR) is True
                       else await self._authenticate(headers, policy))
            except MnemoError as exc:
                if budgets is not None and isinstance(exc, Unauthenticated):
                    over = budgets.hit("unauthenticated", client_address(scope))
                if over is None:
                    await exchange.refuse(scope, receive, exc, close=body_follows)
                    return
            else:
                scope["state"]["principal"] = who
                if budgets is not None:
                    over = budgets.hit(policy.budget, str(who.key_id or "local"))
                if over is None:
                    try:
                        over = await self._agent(who, policy, budgets)
                    except MnemoError as exc:
                        await exchange.refuse(scope, receive, exc, close=body_follows)
                        return
        if over is not None:
            await exchange.refuse(scope, receive, over, close=body_follows,
                                  headers={"Retry-After": str(over.details["retry_after"])})
            return
        received = 0
        cut = False

        async def limited() -> Message:
            nonlocal received, cut
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > policy.max_body:
                    cut = True
                    if not exchange.started:
                        await exchange.refuse(scope, receive, too_large, close=True)
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, limited, exchange.send)

    async def _agent(self, who: Any, policy: RoutePolicy,
                     budgets: Budgets | None) -> RateLimited | None:
        """A self-registered key (:mod:`mnemovault.agents`): its own budget on every
        request, and its quota before a write or chat (raises ``Forbidden``)."""
        if self._agents is None:
            from mnemovault.agents import Agents

            self._agents = Agents(self.vault.rt)
        agents = self._agents
        known, agent_scope = agents.cached(who)
        if not known:
            agent_scope = await anyio.to_thread.run_sync(agents.scope_of, who)
        if agent_scope is None:
            return None
        if budgets is not None:
            over = budgets.hit("agent", str(who.key_id))
            if over is not None:
                return over
        if policy.budget in ("write", "chat"):
            await anyio.to_thread.run_sync(agents.check_quota, who, agent_scope)
        return None

    def _local_operator(self, headers: Headers) -> Any:
        """The local operator (owner of the tenant the ``x-mnemovault-tenant`` header names,
        else ``settings.tenant``), for a request that came over the local socket of
        ``mnemovault server`` (:mod:`mnemovault.api.local`, which alone sets
        :data:`LOCAL_OPERATOR` in the scope, after checking the peer's user id)."""
        from mnemovault.auth import Principal

        tenant = headers.get(TENANT_HEADER) or self.vault.settings.tenant
        return Principal.local(tenant)

    async def _authenticate(self, headers: Headers, policy: RoutePolicy) -> Any:
        header = headers.get("authorization") or ""
        if not header.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        token = header.split(" ", 1)[1].strip()
        if policy.deleted_ok:
            return await anyio.to_thread.run_sync(
                lambda: self.vault.tenants.authenticate(token, allow_deleted=True))
        return await anyio.to_thread.run_sync(self.vault.authenticate, token)


def _flat(routes: Iterable[Any]) -> list[tuple[str, frozenset[str] | None]]:
    """(path template, methods) of every route, in matching order: FastAPI >= 0.130 keeps
    included routers as lazy objects, which ``iter_route_contexts`` flattens."""
    try:
        from fastapi.routing import iter_route_contexts
        items: list[Any] = list(iter_route_contexts(list(routes)))
    except ImportError:  # older FastAPI: the routes are already flat
        items = list(routes)
    out = []
    for r in items:
        path = getattr(r, "path", None)
        if isinstance(path, str):
            methods = getattr(r, "methods", None)
            out.append((path, frozenset(methods) if methods else None))
    return out


class _Exchange:
    """The response side of one request: adds the request id to the response, remembers
    its status, and drops whatever the app sends after the edge has answered."""

    def __init__(self, send: Send, rid: str, route: str) -> None:
        self._send = send
        self.rid = rid
        self.route = route
        self.started = False
        self.answered = False  # by the edge: the app's own messages are dropped
        self.status = 0

    async def send(self, message: Message) -> None:
        if self.answered:
            return
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            MutableHeaders(scope=message)["x-request-id"] = self.rid
        await self._send(message)

    async def refuse(self, scope: Scope, receive: Receive, exc: MnemoError, *,
                     close: bool, headers: dict[str, str] | None = None) -> None:
        """Answer ``exc`` in the envelope (``Connection: close`` with ``close``) and
        ignore the app from now on."""
        telemetry.refused(exc.code, self.route, exc.details.get("budget"))
        if self.started:
            self.answered = True
            return
        extra = {**(headers or {}), **({"Connection": "close"} if close else {})}
        await envelope(exc, self.rid, headers=extra)(scope, receive, self.send)
        self.answered = True
