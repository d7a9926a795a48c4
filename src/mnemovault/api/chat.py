"""HTTP routes for chat and governance: ``POST /v1/chat``, ``POST /v1/chat/stream``
(Server-Sent Events), pin/unpin, forget preview and forget.

Both chat endpoints take the same body (:class:`~mnemovault.chat.models.ChatRequest`) and
run the same turn (:meth:`MemoryVault.chat_stream`): the JSON one collects the events the
stream one sends. Everything up to the model (command, recall, permissions) runs before
the response starts, so errors there get their usual status code on both endpoints; a
failure while streaming (the model unreachable) is sent as an ``error`` event.

SSE events (``text/event-stream``), each ``event: <name>`` then ``data: <json>``:
``meta`` {command, status, records, provider}; ``token`` {text} (repeated); ``done``
{command, status, result, stored, note}; or ``error`` {error: {code, message}}.
"""

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.chat.models import ChatRequest, ChatResult, ChatStream
from mnemovault.errors import MnemoError, NotFound, Unauthenticated, Unavailable
from mnemovault.governance.retention import Scheduler
from mnemovault.models import ForgetResult, PinResult
from mnemovault.vault import MemoryVault

log = logging.getLogger(__name__)


class ForgetPreviewRequest(BaseModel):
    """Give ``ids``, or a ``query`` (with ``scope``)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[uuid.UUID] | None = Field(default=None, min_length=1, max_length=1000)
    query: str | None = Field(default=None, min_length=1, max_length=10_000)
    scope: str | None = Field(default=None, min_length=1, max_length=200)


class ForgetRequest(ForgetPreviewRequest):
    """``ids``: forget exactly these. ``query`` alone: refused (409, with candidate ids)
    unless ``ALLOW_SEMANTIC_FORGET=true``. ``scope`` limits the ids to one scope."""


class PreviewItem(BaseModel):
    id: uuid.UUID
    type: str
    archived: bool
    status: str
    reason: str
    excerpt: str | None = Field(
        description="the first 180 characters as stored; null when the caller may not see "
                    "the record (withheld says why), which a forget would still delete")
    withheld: str | None = Field(
        default=None, description="why the text is withheld: pending_review or "
                                  "outside_limits (null when it is shown)")


class ForgetPreviewResponse(BaseModel):
    items: list[PreviewItem]


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def _sse_events(stream: ChatStream, request_id: str) -> Iterator[str]:
    try:
        for e in stream:
            yield _sse(e.event, e.data)
    except MnemoError as exc:
        yield _sse("error", {"error": exc.to_dict(), "request_id": request_id})
    except psycopg.Error as exc:
        log.error("database error %s in a chat stream (request %s)", type(exc).__name__,
                  request_id)
        err = Unavailable("database: the operation failed; nothing was changed")
        yield _sse("error", {"error": err.to_dict(), "request_id": request_id})


def build_router(vault: MemoryVault,
                 principal: PrincipalDependency | None = None) -> APIRouter:
    """The chat and governance routes around an open vault; ``principal`` is the app's
    authentication dependency (a bearer-key one is built if not given). With
    ``MNEMOVAULT_RETENTION_INTERVAL_HOURS`` > 0 the app also runs the retention job for every
    tenant on that schedule while it serves, and with ``MNEMOVAULT_LIBRARIAN_INTERVAL_HOURS``
    > 0 the librarian likewise (one run per tenant at a time: its advisory lock)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        schedules = [
            Scheduler(vault.run_retention_all, vault.settings.retention_interval_hours),
            Scheduler(vault.librarian.run_all, vault.settings.librarian_interval_hours,
                      name="librarian")]
        for s in schedules:
            s.start()
        try:
            yield
        finally:
            for s in schedules:
                s.stop()

    router = APIRouter(lifespan=lifespan)

    def bearer(authorization: Annotated[str | None, Header()] = None) -> Principal:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        return vault.authenticate(authorization.split(" ", 1)[1].strip())

    Auth = Annotated[Principal, Depends(principal or bearer)]

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    def open_turn(body: ChatRequest, who: Principal, request: Request) -> ChatStream:
        return vault.chat_stream(body.message, scope=body.scope, subject=body.subject,
                                 history=[t.model_dump() for t in body.history], k=body.k,
                                 reveal=body.reveal, store=body.store, principal=who,
                                 request_id=rid(request))

    @router.post("/v1/chat", response_model=ChatResult, tags=["chat"])
    def chat(body: ChatRequest, who: Auth, request: Request) -> ChatResult:
        """One chat turn: in-band command check (``DO_NOT_STORE:``, ``FORGET_PREVIEW:``,
        ``FORGET_CONFIRM:``, ``FORGET:``, ``PIN:``, ``UNPIN:``), recall, fenced context,
        the model, de-anonymisation (``reveal``, permission ``pii:reveal``), and the
        exchange stored as an episode unless ``store`` is false."""
        return open_turn(body, who, request).collect()

    @router.post("/v1/chat/stream", tags=["chat"],
                 responses={200: {"content": {"text/event-stream": {}}}})
    def chat_stream(body: ChatRequest, who: Auth, request: Request) -> StreamingResponse:
        """The same turn as ``POST /v1/chat``, streamed as Server-Sent Events: ``meta``,
        ``token``…, ``done`` (or ``error``)."""
        stream = open_turn(body, who, request)
        return StreamingResponse(_sse_events(stream, rid(request)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    @router.post("/v1/memories/{memory_id}/pin", response_model=PinResult,
                 tags=["governance"])
    def pin(memory_id: uuid.UUID, who: Auth, request: Request) -> PinResult:
        """Exempt a memory from retention (and bring it back from the archive)."""
        res = vault.pin([memory_id], principal=who, request_id=rid(request))
        if not res.changed:
            raise NotFound("memory_id: no memory with this id", field="memory_id")
        return res

    @router.post("/v1/memories/{memory_id}/unpin", response_model=PinResult,
                 tags=["governance"])
    def unpin(memory_id: uuid.UUID, who: Auth, request: Request) -> PinResult:
        """Return a memory to normal retention."""
        res = vault.unpin([memory_id], principal=who, request_id=rid(request))
        if not res.changed:
            raise NotFound("memory_id: no memory with this id", field="memory_id")
        return res

    @router.post("/v1/forget/preview", response_model=ForgetPreviewResponse,
                 tags=["governance"])
    def forget_preview(body: ForgetPreviewRequest, who: Auth) -> ForgetPreviewResponse:
        """What a forget would delete (versions and derived memories included, archived
        ones flagged); deletes nothing."""
        rows = vault.forget_preview(body.ids, query=body.query, scope=body.scope,
                                    principal=who)
        return ForgetPreviewResponse(items=[PreviewItem(**r) for r in rows])

    @router.post("/v1/forget", response_model=ForgetResult, tags=["governance"])
    def forget(body: ForgetRequest, who: Auth, request: Request) -> ForgetResult:
        """The forget lifecycle: memories, versions, derived facts, orphan graph, unused
        vault values, one audit row."""
        return vault.forget(body.ids, query=body.query, scope=body.scope, principal=who,
                            trigger="api", request_id=rid(request))

    return router
