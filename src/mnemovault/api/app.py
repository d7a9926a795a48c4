"""FastAPI application: memories, recall, health.

Authentication: ``Authorization: Bearer mvk_…`` (see :mod:`mnemovault.auth`). Errors have
one JSON shape, ``{"error": {"code", "message", "field"?, "details"?}}``, mapped once from the
:mod:`mnemovault.errors` hierarchy; request validation errors name the field and the rule.
"""


import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from mnemovault import __version__
from mnemovault.api.admin import NDJSON_RESPONSE
from mnemovault.auth import Principal
from mnemovault.errors import (
    InternalError,
    MnemoError,
    NotFound,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from mnemovault.models import ForgetResult, Hit, Memory, MemoryInput, Page, RecallFilters, Receipt
from mnemovault.vault import MemoryVault

log = logging.getLogger(__name__)


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryInput] = Field(min_length=1, max_length=1000)


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=10_000)
    scope: str = Field(min_length=1, max_length=200)
    k: int = Field(default=10, ge=1, le=100)
    filters: RecallFilters = Field(default_factory=RecallFilters)
    reveal: bool = False


class VaultEntry(BaseModel):
    placeholder: str
    kind: str
    created_at: datetime
    shredded_at: datetime | None = None
    value: str | None = None


class RecallResponse(BaseModel):
    hits: list[Hit]


class DeleteResponse(ForgetResult):
    pass


class ErrorBody(BaseModel):
    """One error: ``code`` (stable kind, :mod:`mnemovault.errors`), ``message`` (names the
    field and the rule), ``field`` (when one field is at fault), ``details`` (for example
    ``permission`` on a 403, ``errors`` listing every invalid field on a 422)."""

    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None


class ErrorEnvelope(BaseModel):
    """Every error response: ``{"error": {...}, "request_id"?}``."""

    error: ErrorBody
    request_id: str | None = None


# documented on every operation (and so FastAPI's own 422 shape, which this app never
# sends, is not): each 4xx and 5xx answer is the envelope
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorEnvelope, "description": "Client error, in the error envelope"},
    "5XX": {"model": ErrorEnvelope, "description": "Server error, in the error envelope"},
}


Name = Annotated[str | None, Query(min_length=1, max_length=200)]
Placeholder = Annotated[str, Path(min_length=1, max_length=64)]


def _error(exc: MnemoError, request_id: str | None, *, status: int | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": exc.to_dict()}
    if request_id:
        body["request_id"] = request_id
    if exc.status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body, status_code=status or exc.status, headers=headers)


def _declared_query(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return names


def reject_unknown_query(request: Request) -> None:
    """Unknown query parameters are refused, as unknown body fields are (a typo must not
    be silently ignored)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    unknown = sorted(set(request.query_params) - _declared_query(dependant))
    if unknown:
        name = unknown[0] if len(unknown[0]) <= 64 else unknown[0][:64] + "…"
        raise ValidationError(f"{name}: unknown query parameter", field=name)


def _body_rule(e: dict[str, Any]) -> tuple[str, str]:
    """(field, rule) of one request validation error; a JSON syntax error names the body
    and the character offset, not the offset as a field."""
    if e.get("type") == "json_invalid":
        pos = e["loc"][1] if len(e["loc"]) > 1 else "?"
        return "body", f"not valid JSON (at character {pos})"
    loc = [str(p) for p in e["loc"]]
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]  # where it came from, not part of the field's name
    return ".".join(loc) or "body", str(e["msg"]).removeprefix("Value error, ")


def create_app(vault: MemoryVault) -> FastAPI:
    """Build the app around an open vault (the caller owns its lifecycle)."""
    app = FastAPI(title="mnemovault", version=__version__,
                  description="Governed long-term memory for AI agents.",
                  dependencies=[Depends(reject_unknown_query)], responses=ERROR_RESPONSES)

    @app.middleware("http")
    async def request_id_mw(request: Request, call_next: Callable[[Request], Any]) -> Any:
        rid = request.headers.get("x-request-id") or str(uuid.uuid4())
        if len(rid) > 128:
            rid = str(uuid.uuid4())
        request.state.request_id = rid
        try:
            response = await call_next(request)
        except Exception as exc:  # a defect: the envelope, never a bare 500 or a trace
            log.error("unexpected %s on %s %s (request %s)", type(exc).__name__,
                      request.method, request.url.path, rid)
            response = _error(InternalError("internal: an unexpected error; nothing was "
                                            "changed"), rid)
        response.headers["x-request-id"] = rid
        return response

    @app.exception_handler(MnemoError)
    async def mnemo_error(request: Request, exc: MnemoError) -> JSONResponse:
        return _error(exc, getattr(request.state, "request_id", None))

    @app.exception_handler(psycopg.Error)
    async def database_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        # Never echo the driver's message: it can quote row values (SPEC section 12).
        log.error("database error %s on %s (request %s)", type(exc).__name__,
                  request.url.path, getattr(request.state, "request_id", None))
        return _error(Unavailable("database: the operation failed; nothing was changed"),
                      getattr(request.state, "request_id", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [dict(zip(("field", "rule"), _body_rule(e), strict=True))
                  for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "rule": "invalid"}
        err = ValidationError(f"{first['field']}: {first['rule']}", field=first["field"],
                              errors=errors)
        return _error(err, getattr(request.state, "request_id", None))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Errors Starlette raises before a route runs, in the same envelope: an unknown
        route (404), a method the route lacks (405), a body that is not UTF-8 JSON or is
        nested too deeply (FastAPI's 400, reported as a validation error)."""
        rid = getattr(request.state, "request_id", None)
        if exc.status_code == 404:
            return _error(NotFound("path: no such endpoint", field="path"), rid)
        if exc.status_code == 405:
            err = MnemoError("method: not allowed on this endpoint", field="method")
            err.code = "method_not_allowed"
            return _error(err, rid, status=405, headers=dict(exc.headers or {}))
        if exc.status_code == 400:
            return _error(ValidationError("body: could not be parsed (it must be UTF-8 "
                                          "JSON, nested at most a few hundred levels)",
                                          field="body"), rid)
        err = MnemoError(f"http: {exc.status_code}")
        err.code = f"http_{exc.status_code}"
        return _error(err, rid, status=exc.status_code, headers=dict(exc.headers or {}))

    def principal(request: Request,
                  authorization: Annotated[str | None, Header()] = None) -> Principal:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        return vault.authenticate(authorization.split(" ", 1)[1].strip())

    Auth = Annotated[Principal, Depends(principal)]

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, Any]:
        """Liveness and database reachability; no authentication."""
        return vault.health()

    @app.post("/v1/memories", status_code=201, response_model=Receipt, tags=["memories"])
    def create_memory(body: MemoryInput, who: Auth, request: Request) -> Receipt:
        return vault.remember_many([body], principal=who, request_id=rid(request))[0]

    @app.post("/v1/memories/batch", status_code=201, response_model=list[Receipt],
              tags=["memories"])
    def create_memories(body: BatchCreate, who: Auth, request: Request) -> list[Receipt]:
        return vault.remember_many(body.items, principal=who, request_id=rid(request))

    @app.get("/v1/memories", response_model=Page, tags=["memories"])
    def list_memories(
        who: Auth,
        scope: Name = None,
        subject: Name = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 50,
        cursor: uuid.UUID | None = None,
        include_superseded: bool = False,
    ) -> Page:
        return vault.list(scope=scope, subject=subject, limit=limit, cursor=cursor,
                          include_superseded=include_superseded, principal=who)

    @app.get("/v1/memories/{memory_id}", response_model=Memory, tags=["memories"])
    def get_memory(memory_id: uuid.UUID, who: Auth, request: Request,
                   reveal: bool = False) -> Memory:
        """``reveal=true`` shows original personal values (permission ``pii:reveal``)."""
        return vault.get(memory_id, principal=who, reveal=reveal, request_id=rid(request))

    @app.delete("/v1/memories/{memory_id}", response_model=DeleteResponse, tags=["memories"])
    def delete_memory(memory_id: uuid.UUID, who: Auth, request: Request) -> DeleteResponse:
        """Forget one memory and all its versions (the governed forget path)."""
        res = vault.delete([memory_id], principal=who, trigger="api", request_id=rid(request))
        if not res.deleted:
            raise NotFound("memory_id: no memory with this id", field="memory_id")
        return DeleteResponse(**res.model_dump())

    @app.post("/v1/recall", response_model=RecallResponse, tags=["recall"])
    def recall(body: RecallRequest, who: Auth, request: Request) -> RecallResponse:
        hits = vault.recall(body.query, scope=body.scope, k=body.k, filters=body.filters,
                            principal=who, reveal=body.reveal, request_id=rid(request))
        return RecallResponse(hits=hits)

    @app.get("/v1/vault", tags=["vault"])
    def vault_list(who: Auth, limit: Annotated[int, Query(ge=1, le=100)] = 50,
                   cursor: Annotated[str | None, Query(max_length=64)] = None
                   ) -> list[VaultEntry]:
        """Vault entries, metadata only; ``cursor`` = last placeholder seen."""
        return [VaultEntry(**r) for r in
                vault.vault_entries(limit=limit, cursor=cursor, principal=who)]

    @app.get("/v1/vault/export", tags=["vault"], response_class=Response,
             responses={200: NDJSON_RESPONSE})
    def vault_export(who: Auth, request: Request) -> Response:
        """Every live entry with its value, as JSON Lines (owner only)."""
        rows = vault.vault_export(principal=who, request_id=rid(request))
        body = "".join(VaultEntry(**r).model_dump_json() + "\n" for r in rows)
        return Response(body, media_type="application/x-ndjson")

    @app.get("/v1/vault/{placeholder}", tags=["vault"])
    def vault_get(placeholder: Placeholder, who: Auth, request: Request,
                  reveal: bool = False) -> VaultEntry:
        """One entry; the value only with ``reveal=true`` and ``pii:reveal`` (audited)."""
        return VaultEntry(**vault.vault_entry(placeholder, reveal=reveal, principal=who,
                                              request_id=rid(request)))

    @app.delete("/v1/vault/{placeholder}", tags=["vault"])
    def vault_shred(placeholder: Placeholder, who: Auth, request: Request) -> dict[str, Any]:
        """Crypto-shred one value (permission ``subject:erase``): renders ``[erased]``
        everywhere from now on."""
        done = vault.shred([placeholder], principal=who, request_id=rid(request))
        if not done:
            raise NotFound("placeholder: no live vault entry", field="placeholder")
        return {"shredded": done}

    from mnemovault.api.admin import audit_router
    from mnemovault.api.chat import build_router as chat_router
    from mnemovault.api.keys import keys_router

    app.include_router(audit_router(vault, principal))
    app.include_router(keys_router(vault, principal))
    app.include_router(chat_router(vault, principal))
    return app
