"""The MCP server over streamable HTTP, at ``/mcp`` of the HTTP API.

:func:`http_router` returns a FastAPI router to include in the app: one ASGI route at
``/mcp`` and a lifespan that runs the SDK's session manager (FastAPI merges an included
router's lifespan into the app's; a fresh manager each time the app starts, since one can
run only once).

Every request is authenticated before the SDK sees it, like every other API request:
``Authorization: Bearer mvk_…`` goes through :meth:`MemoryVault.authenticate` (a revoked
key stops working at its next request); a missing or bad key is answered ``401`` in the
API's error envelope with ``WWW-Authenticate: Bearer``. The principal rides on the ASGI
scope to the tools (:func:`mnemovault.mcp.server.principal_from_request`), so a key keeps
its role's permissions and its scope and subject limits on every tool. It is also given
to the SDK as the request's authenticated user, so were sessions kept (they are not, see
below) one key could never use a session another key opened.

The SDK's transport security stays on: DNS-rebinding protection accepts only loopback
``Host`` headers (``127.0.0.1``, ``localhost``, ``[::1]``, any port) and, when a browser
sends one, loopback ``Origin`` headers (other hosts: ``421``, other origins: ``403``).
A deployment reached under another name passes ``allowed_hosts``/``allowed_origins``.

The transport is stateless with JSON responses: each POST is served on its own (no
session id to keep, any worker can answer), which suits an API authenticated per request;
the tools need no server-to-client requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from fastapi import APIRouter
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mnemovault.auth import Principal
from mnemovault.errors import MnemoError, Unauthenticated, Unavailable
from mnemovault.mcp.server import PRINCIPAL_SCOPE_KEY, build_server, principal_from_request

if TYPE_CHECKING:
    from mnemovault import MemoryVault

PATH = "/mcp"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def transport_security(allowed_hosts: Sequence[str] | None = None,
                       allowed_origins: Sequence[str] | None = None
                       ) -> TransportSecuritySettings:
    """DNS-rebinding protection on: loopback hosts and origins (any port), plus those
    given (``host:port``, ``host:*``; ``scheme://host:port``, ``scheme://host:*``)."""
    hosts = [h for base in LOOPBACK_HOSTS for h in (base, f"{base}:*")]
    origins = [f"{scheme}://{base}:*" for base in LOOPBACK_HOSTS for scheme in ("http", "https")]
    origins += [f"{scheme}://{base}" for base in LOOPBACK_HOSTS for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[*hosts, *(allowed_hosts or ())],
                                     allowed_origins=[*origins, *(allowed_origins or ())])


def _error(exc: MnemoError, scope: Scope) -> JSONResponse:
    body: dict[str, Any] = {"error": exc.to_dict()}
    state = scope.get("state")
    if isinstance(state, dict) and state.get("request_id"):
        body["request_id"] = state["request_id"]
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body, status_code=exc.status, headers=headers)


class Endpoint:
    """The ASGI app at ``/mcp``: authenticate, then hand over to the session manager."""

    def __init__(self, vault: MemoryVault) -> None:
        self.vault = vault
        self.manager: StreamableHTTPSessionManager | None = None

    async def _principal(self, scope: Scope) -> Principal:
        state = scope.get("state")
        who = state.get("principal") if isinstance(state, dict) else None
        if isinstance(who, Principal):  # authenticated by the edge (mnemovault.api.edge)
            return who
        header = Headers(scope=scope).get("authorization") or ""
        if not header.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        token = header.split(" ", 1)[1].strip()
        return await anyio.to_thread.run_sync(self.vault.authenticate, token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.manager
        if scope["type"] != "http":  # no websockets here
            return
        try:
            if manager is None:
                raise Unavailable("mcp: the MCP endpoint is not running (the app's lifespan "
                                  "has not started)")
            who = await self._principal(scope)
        except MnemoError as exc:
            await _error(exc, scope)(scope, receive, send)
            return
        user = AuthenticatedUser(AccessToken(
            token=f"key:{who.key_id}", client_id=who.key_id or "local",
            scopes=sorted(who.permissions), subject=who.tenant))
        scope = {**scope, "user": user, "auth": AuthCredentials(user.scopes),
                 PRINCIPAL_SCOPE_KEY: who}
        await manager.handle_request(scope, receive, send)


def http_router(vault: MemoryVault, *, allowed_hosts: Sequence[str] | None = None,
                allowed_origins: Sequence[str] | None = None) -> APIRouter:
    """A router with the MCP endpoint at ``/mcp`` (module docstring); include it in the
    app (``app.include_router(http_router(vault))``)."""
    server: MCPServer[Any] = build_server(vault, principal_from_request)
    endpoint = Endpoint(vault)
    security = transport_security(allowed_hosts, allowed_origins)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        server.streamable_http_app(streamable_http_path=PATH, stateless_http=True,
                                   json_response=True, transport_security=security)
        manager = server.session_manager  # the one streamable_http_app just made
        async with manager.run():
            endpoint.manager = manager
            try:
                yield
            finally:
                endpoint.manager = None

    router = APIRouter(lifespan=lifespan)
    router.add_route(PATH, endpoint, include_in_schema=False)  # type: ignore[arg-type]
    return router
