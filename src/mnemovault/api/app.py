"""FastAPI application: memories, recall, health.

Authentication: ``Authorization: Bearer mvk_…`` (see :mod:`mnemovault.auth`). Errors have
one JSON shape, ``{"error": {"code", "message", "field"?, "details"?}}``, mapped once from the
:mod:`mnemovault.errors` hierarchy; request validation errors name the field and the rule.
"""


import html
import json
import logging
import secrets
import uuid
from datetime import datetime
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemovault import __version__, telemetry
from mnemovault.api.admin import NDJSON_RESPONSE
from mnemovault.api.edge import UNMATCHED, Edge
from mnemovault.auth import Principal
from mnemovault.errors import (
    InternalError,
    MnemoError,
    NotFound,
    TooLarge,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from mnemovault.models import ForgetResult, Hit, Memory, MemoryInput, Page, RecallFilters, Receipt
from mnemovault.validation import Timestamp
from mnemovault.vault import MemoryVault

log = logging.getLogger(__name__)


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryInput] = Field(min_length=1, max_length=1000)


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=10_000)
    scope: str = Field(min_length=1, max_length=200)
    k: StrictInt = Field(default=10, ge=1, le=100)
    filters: RecallFilters = Field(default_factory=RecallFilters)
    reveal: StrictBool = False
    as_of: Timestamp | None = None
    """What was true at this time (ISO 8601) instead of now: each key's version valid then
    (:mod:`mnemovault.memories.valid_time`); also accepted as the ``as_of`` query
    parameter."""


class ListRequest(BaseModel):
    """``GET /v1/memories``'s parameters as a body."""

    model_config = ConfigDict(extra="forbid")

    scope: str | None = Field(default=None, min_length=1, max_length=200)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    limit: StrictInt = Field(default=50, ge=1, le=100)
    cursor: uuid.UUID | None = None
    include_superseded: StrictBool = False
    flagged: StrictBool = False


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


# -- /docs: one self-contained page (no CDN, no assets), rendered from the OpenAPI document
_DOCS_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:70em;padding:0 1em 4em;color:#222}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}
details.op{border:1px solid #ddd;border-radius:4px;margin:.4em 0;padding:.3em .6em}
summary{cursor:pointer}code,pre,textarea,input{font:13px ui-monospace,monospace}
pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}
.m{display:inline-block;min-width:4.5em;font-weight:bold;text-transform:uppercase}
.get{color:#06c}.post{color:#080}.delete{color:#b00}.put,.patch{color:#a60}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ddd;padding:2px 6px;
text-align:left;vertical-align:top}textarea{width:100%;min-height:6em}.doc{white-space:pre-wrap}
#key{width:40em}
"""

_DOCS_JS = """
const key = document.getElementById('key');
key.value = sessionStorage.getItem('mnemovault-key') || '';
key.addEventListener('change', () => sessionStorage.setItem('mnemovault-key', key.value));
for (const form of document.querySelectorAll('form.try')) {
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const out = form.querySelector('pre.out');
    let path = form.dataset.path;
    const query = new URLSearchParams();
    for (const input of form.querySelectorAll('input[data-in]')) {
      if (input.value === '') continue;
      if (input.dataset.in === 'path') {
        path = path.replace('{' + input.name + '}', encodeURIComponent(input.value));
      } else { query.append(input.name, input.value); }
    }
    const headers = {};
    if (key.value) headers['Authorization'] = 'Bearer ' + key.value.trim();
    const init = {method: form.dataset.method.toUpperCase(), headers};
    const body = form.querySelector('textarea');
    if (body) { headers['Content-Type'] = 'application/json'; init.body = body.value; }
    const qs = query.toString();
    out.textContent = '…';
    try {
      const r = await fetch(path + (qs ? '?' + qs : ''), init);
      out.textContent = r.status + ' ' + r.statusText + '\\n\\n' + await r.text();
    } catch (e) { out.textContent = String(e); }
  });
}
"""


def _schema_text(schema: dict[str, Any]) -> str:
    """A short, escaped description of a JSON schema: type, bounds, enum, referenced
    component (linked to its definition further down)."""
    if "$ref" in schema:
        name = html.escape(schema["$ref"].rsplit("/", 1)[-1])
        return f'<a href="#schema-{name}">{name}</a>'
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " | ".join(_schema_text(s) for s in schema[key])
    kind = str(schema.get("type", "any"))
    if kind == "array":
        kind = f"array of {_schema_text(schema.get('items', {}))}"
    else:
        kind = html.escape(kind)
    rules = [f"{label} {schema[k]}" for k, label in (
        ("minLength", "min length"), ("maxLength", "max length"), ("minimum", "≥"),
        ("maximum", "≤"), ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<"),
        ("minItems", "min items"), ("maxItems", "max items"), ("format", "format"),
        ("pattern", "pattern"), ("default", "default")) if k in schema]
    if "enum" in schema:
        rules.append("one of " + ", ".join(map(str, schema["enum"])))
    return kind + (f" <small>({html.escape('; '.join(rules))})</small>" if rules else "")


def _docs_operation(method: str, path: str, op: dict[str, Any]) -> str:
    e = html.escape
    params = [p for p in op.get("parameters", []) if p["name"].lower() != "authorization"]
    rows = "".join(
        f"<tr><td><code>{e(p['name'])}</code></td><td>{e(p['in'])}</td>"
        f"<td>{'yes' if p.get('required') else ''}</td>"
        f"<td>{_schema_text(p.get('schema', {}))}</td></tr>" for p in params)
    parts = [f'<details class="op"><summary><span class="m {e(method)}">{e(method)}</span>'
             f"<code>{e(path)}</code> {e(op.get('summary', ''))}</summary>"]
    if op.get("description"):
        parts.append(f'<div class="doc">{e(op["description"])}</div>')
    if rows:
        parts.append("<table><tr><th>parameter</th><th>in</th><th>required</th>"
                     f"<th>schema</th></tr>{rows}</table>")
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        parts.append(f"<p>JSON body: {_schema_text(body.get('schema', {}))}</p>")
    responses = "".join(
        f"<tr><td>{e(code)}</td><td>{e(r.get('description', ''))}</td><td>"
        + ", ".join(f"{e(ctype)}: {_schema_text(c.get('schema', {}))}"
                    for ctype, c in r.get("content", {}).items()) + "</td></tr>"
        for code, r in op.get("responses", {}).items())
    parts.append(f"<table><tr><th>status</th><th>meaning</th><th>body</th></tr>{responses}"
                 "</table>")
    inputs = "".join(
        f'<label><code>{e(p["name"])}</code> ({e(p["in"])}) '
        f'<input name="{e(p["name"])}" data-in="{e(p["in"])}"></label><br>' for p in params)
    textarea = "<textarea>{}</textarea>" if body is not None else ""
    parts.append(f'<form class="try" data-method="{e(method)}" data-path="{e(path)}">'
                 f'{inputs}{textarea}<button>Send</button><pre class="out"></pre></form>'
                 "</details>")
    return "".join(parts)


def docs_page(doc: dict[str, Any], nonce: str) -> str:
    """The API reference as one HTML page with inline style and script (``nonce`` for
    the Content-Security-Policy): every operation by tag (parameters, body, responses, a
    form to send it with a bearer key) and every schema. It loads nothing, so it works
    offline; the machine-readable document stays at ``/openapi.json``."""
    e = html.escape
    info = doc.get("info", {})
    by_tag: dict[str, list[str]] = {}
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            tag = (op.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append(_docs_operation(method, path, op))
    sections = "".join(f"<h2>{e(tag)}</h2>{''.join(ops)}" for tag, ops in by_tag.items())
    schemas = "".join(
        f'<details id="schema-{e(name)}"><summary><code>{e(name)}</code></summary>'
        f"<pre>{e(json.dumps(schema, indent=2, ensure_ascii=False))}</pre></details>"
        for name, schema in doc.get("components", {}).get("schemas", {}).items())
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(info.get('title', 'API'))} API</title>"
        f'<style nonce="{nonce}">{_DOCS_CSS}</style></head><body>'
        f"<h1>{e(info.get('title', 'API'))} <small>{e(info.get('version', ''))}</small></h1>"
        f"<p>{e(info.get('description', ''))} The OpenAPI document: "
        '<a href="/openapi.json">/openapi.json</a>.</p>'
        "<p>Every operation but <code>/health</code> needs "
        "<code>Authorization: Bearer mvk_…</code> (<code>mnemovault keys create</code>). "
        'Key for the forms below (kept in this tab only): <input id="key" '
        'autocomplete="off"></p>'
        f"{sections}<h2>schemas</h2>{schemas}"
        f'<script nonce="{nonce}">{_DOCS_JS}</script></body></html>')


def docs_csp(nonce: str) -> str:
    """The docs page's Content-Security-Policy: its own inline style and script, requests
    to this origin only, nothing loaded from anywhere."""
    return (f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src 'self' data:; form-action 'none'; base-uri 'none'; "
            "frame-ancestors 'none'")


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


def _declared_query(dependant: Any) -> frozenset[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared_query(sub)
    return frozenset(names)


def _declared_for(route: Any) -> frozenset[str]:
    """The route's query parameter names, worked out once and kept on the route."""
    names: frozenset[str] | None = getattr(route, "_mnemovault_query_names", None)
    if names is None:
        names = _declared_query(route.dependant)
        route._mnemovault_query_names = names
    return names


async def reject_unknown_query(request: Request) -> None:
    """Unknown query parameters are refused, as unknown body fields are (a typo must not
    be silently ignored). ``async``: it only reads the parsed query string, so it runs on
    the event loop (FastAPI sends a plain ``def`` dependency through the threadpool: a
    thread switch per request for nothing, issue 29)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    unknown = sorted(set(request.query_params) - _declared_for(route))
    if unknown:
        name = unknown[0] if len(unknown[0]) <= 64 else unknown[0][:64] + "…"
        raise ValidationError(f"{name}: unknown query parameter", field=name)
    repeated = sorted(k for k in set(request.query_params)
                      if len(request.query_params.getlist(k)) > 1)
    if repeated:  # no parameter here is a list: which value was meant is unknowable
        raise ValidationError(f"{repeated[0]}: given more than once", field=repeated[0])


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
    """Build the app around an open vault (the caller owns its lifecycle). Telemetry
    (:mod:`mnemovault.telemetry`) is set up from the ``OTEL_*`` variables: off unless
    they name an exporter."""
    telemetry.configure()
    telemetry.instrument()
    if vault is not None:  # (None: the OpenAPI document only)
        try:  # a database behind its erasure ledger is re-erased before serving
            vault.subjects.ensure_checked()
        except Unavailable:  # MemoryVault.open (every interface's start) ran it already
            log.warning("erasure ledger: the database did not answer; the start check "
                        "runs again on the next start")
    app = FastAPI(title="mnemovault", version=__version__,
                  description="Governed long-term memory for AI agents.",
                  dependencies=[Depends(reject_unknown_query)], responses=ERROR_RESPONSES,
                  docs_url=None, redoc_url=None,  # /docs below: FastAPI's pages use a CDN
                  **_no_native_telemetry())

    @app.exception_handler(MnemoError)
    async def mnemo_error(request: Request, exc: MnemoError) -> JSONResponse:
        return _error(exc, getattr(request.state, "request_id", None))

    @app.exception_handler(psycopg.Error)
    async def database_error(request: Request, exc: psycopg.Error) -> JSONResponse:
        # Never echo the driver's message: it can quote row values (SPEC section 12).
        log.error("database error %s on %s (request %s)", type(exc).__name__,
                  _route(request), getattr(request.state, "request_id", None))
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
        if exc.status_code == 413:
            limit = vault.settings.max_body_bytes
            return _error(TooLarge(f"body: larger than this endpoint's limit of {limit} bytes",
                                   field="body", limit_bytes=limit), rid,
                          headers={"Connection": "close"})
        if exc.status_code == 400:
            return _error(ValidationError("body: could not be parsed (it must be UTF-8 "
                                          "JSON, nested at most a few hundred levels)",
                                          field="body"), rid)
        err = MnemoError(f"http: {exc.status_code}")
        err.code = f"http_{exc.status_code}"
        return _error(err, rid, status=exc.status_code, headers=dict(exc.headers or {}))

    async def principal(request: Request,
                        authorization: Annotated[str | None, Header()] = None) -> Principal:
        # authenticated by the edge before the body was read (mnemovault.api.edge); async,
        # so reusing the edge's principal costs no trip through the threadpool (issue 29)
        who = getattr(request.state, "principal", None)
        if isinstance(who, Principal):
            return who
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated("authorization: missing 'Authorization: Bearer <key>' header")
        return await run_in_threadpool(vault.authenticate,
                                       authorization.split(" ", 1)[1].strip())

    Auth = Annotated[Principal, Depends(principal)]

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """The API reference (self-contained; see :func:`docs_page`); no authentication."""
        nonce = secrets.token_urlsafe(16)
        return HTMLResponse(docs_page(app.openapi(), nonce),
                            headers={"Content-Security-Policy": docs_csp(nonce)})

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
        flagged: bool = False,
    ) -> Page:
        """Memories oldest first; ``flagged=true``: only those the injection sanitiser
        flagged on import (``provenance.injection_flags``), for review."""
        return vault.list(scope=scope, subject=subject, limit=limit, cursor=cursor,
                          include_superseded=include_superseded, flagged=flagged,
                          principal=who)

    @app.post("/v1/memories/list", response_model=Page, tags=["memories"])
    def list_memories_body(body: ListRequest, who: Auth) -> Page:
        """``GET /v1/memories`` with its parameters in the body (a subject need not be in
        the URL)."""
        return vault.list(scope=body.scope, subject=body.subject, limit=body.limit,
                          cursor=body.cursor, include_superseded=body.include_superseded,
                          flagged=body.flagged, principal=who)

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
    def recall(body: RecallRequest, who: Auth, request: Request,
               as_of: Annotated[str | None, Query(max_length=64)] = None) -> RecallResponse:
        """The best memories for a query, now; ``as_of`` (body or query, ISO 8601): what
        was true at that time."""
        if as_of is not None and body.as_of is not None:
            raise ValidationError("as_of: give it in the body or the query, not both",
                                  field="as_of")
        hits = vault.recall(body.query, scope=body.scope, k=body.k, filters=body.filters,
                            principal=who, reveal=body.reveal, request_id=rid(request),
                            as_of=body.as_of if body.as_of is not None else as_of)
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

    from mnemovault.api.admin import audit_router, librarian_router, pii_router
    from mnemovault.api.agents import agents_router
    from mnemovault.api.chat import build_router as chat_router
    from mnemovault.api.keys import keys_router
    from mnemovault.api.openai_compat import openai_router
    from mnemovault.api.procedures import procedures_router
    from mnemovault.api.review import review_router
    from mnemovault.api.subjects import subjects_router
    from mnemovault.api.tenants import tenants_router
    from mnemovault.api.wake import wake_router
    from mnemovault.mcp import http_router as mcp_router

    app.include_router(audit_router(vault, principal))
    app.include_router(pii_router(vault, principal))
    app.include_router(librarian_router(vault, principal))
    app.include_router(keys_router(vault, principal))
    app.include_router(agents_router(vault))
    app.include_router(wake_router(vault, principal))
    app.include_router(chat_router(vault, principal))
    app.include_router(openai_router(vault, principal))
    app.include_router(procedures_router(vault, principal))
    app.include_router(review_router(vault, principal))
    app.include_router(subjects_router(vault, principal))
    app.include_router(tenants_router(vault, principal))
    app.include_router(mcp_router(vault))  # /mcp: MCP over streamable HTTP
    if vault is not None and vault.settings.console:  # /console: the web console
        from mnemovault.console import console_router

        console = console_router(vault)
        app.include_router(console)
        app.state.console_sessions = console.sessions  # type: ignore[attr-defined]
    app.add_middleware(Defects)  # inside the edge, outside FastAPI's exception handlers
    # outermost: request id, route template, body limit and authentication before FastAPI
    # reads a byte of the body (mnemovault.api.edge)
    app.add_middleware(Edge, vault=vault, routes=app.router.routes)
    return app


class Defects:
    """A plain ASGI middleware: every response carries ``x-request-id`` (the edge's safe
    id, else a fresh UUID), and an exception no handler mapped (a defect) is answered with
    the envelope's 500, never a bare 500 or a trace; the log names its type, the method,
    the route template and the request id, never its message.

    (It was an ``@app.middleware("http")`` function: Starlette runs those through
    ``BaseHTTPMiddleware``, which moves every request and response through a task group
    and memory streams; under 32 clients that machinery was ~9% of the server's Python
    time, issue 29.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        # the edge (mnemovault.api.edge) set a safe request id; a client's unsafe one is gone
        rid = state.get("request_id") or str(uuid.uuid4())
        state["request_id"] = rid
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message)["x-request-id"] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # a defect: the envelope, never a bare 500 or a trace
            log.error("unexpected %s on %s %s (request %s)", type(exc).__name__,
                      scope.get("method"), state.get("route") or UNMATCHED, rid)
            if started:  # too late for an answer of its own: the server drops the connection
                raise
            response = _error(InternalError("internal: an unexpected error; nothing was "
                                            "changed"), rid)
            await response(scope, receive, send_with_id)


def _no_native_telemetry() -> dict[str, Any]:
    """FastAPI >= 0.160 records its own spans, metrics and logs once a global OpenTelemetry
    provider is set, with raw paths, query strings and exception messages (where subjects
    and request text can be): off; mnemovault.telemetry records what may be recorded."""
    import inspect

    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    return {}


def _route(request: Request) -> str:
    """The request's route template (set by the edge), for logs: never the raw path, which
    can hold a subject."""
    return str(getattr(request.state, "route", None) or UNMATCHED)
