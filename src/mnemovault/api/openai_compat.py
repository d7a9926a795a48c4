"""The OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``
(SPEC section 5), so an OpenAI client (the official ``openai`` package, LangChain, a chat
UI…) pointed at ``<server>/v1`` with a mnemovault API key works unchanged.

A completion is one turn of the same chat flow as ``POST /v1/chat``
(:meth:`MemoryVault.chat_stream`), in-band commands included. The mapping:

- **message**: the last message, which must come from the user; **history**: the user and
  assistant messages before it (blank ones dropped, the most recent
  :data:`~mnemovault.chat.models.MAX_HISTORY` kept). Text content parts are joined with
  newlines; other parts (images, audio, files) are refused.
- **system / developer messages** are accepted and ignored: the model's instructions are
  mnemovault's own system prompt with the fenced context, first and alone, so a client's
  instructions can never sit beside (or override) the rule that records are data.
- **scope**: the model name ``mnemovault:<scope>`` (or ``mnemovault/<scope>``) or the header
  ``X-Mnemovault-Scope`` (both given and different: 422); with neither, the key's scope for
  a scope-limited key, else ``default`` (as the CLI). Model names other than
  ``mnemovault…`` are not found (404).
- **subject**: the ``user`` field or the header ``X-Mnemovault-Subject`` (both given and
  different: 422). **reveal**: the header ``X-Mnemovault-Reveal: true``.
- **storing**: as ``POST /v1/chat``, except that ``"store": false`` keeps the exchange out
  of memory, and so does an earlier user message of the conversation that began with
  ``DO_NOT_STORE:`` (a client resends the whole conversation each turn, so the model sees it
  again and its next answer may quote it).
- **refused** (422, naming the field): ``n`` other than 1, tools and function calling
  (``tools``, ``functions``, a ``tool_choice`` or ``function_call`` other than ``none``,
  ``tool``/``function`` messages, assistant ``tool_calls``), ``response_format`` other than
  text, audio output, ``logprobs: true``, ``web_search_options``. Unknown fields too, so a
  typo still fails.
- **ignored** (accepted, no effect; the server's chat provider settings decide):
  :data:`IGNORED_FIELDS`.

Responses: a ``chat.completion`` object, or with ``"stream": true`` Server-Sent Events of
``chat.completion.chunk`` objects (``data: {...}``; the first carries the role, the last
``finish_reason: "stop"``; a ``usage`` chunk with ``stream_options.include_usage``) and then
``data: [DONE]``. Both carry an extra ``mnemovault`` object (command, status, result,
records, stored, note, provider; on the last chunk when streaming). ``usage`` counts are
approximate: a quarter of the characters of the client's messages and of the reply (the
context pack is not counted). Errors are mnemovault's envelope, whose ``error.message`` and
``error.code`` the OpenAI clients read; a failure while streaming is sent as
``data: {"error": {...}}`` (the ``openai`` client raises ``APIError``).
"""

import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import psycopg
from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.chat.models import MAX_HISTORY, MAX_MESSAGE_CHARS, ChatStream, RecordRef
from mnemovault.errors import MnemoError, NotFound, Unavailable, ValidationError
from mnemovault.governance import commands
from mnemovault.models import MAX_CONTENT_CHARS
from mnemovault.validation import MAX_NAME_CHARS, name, text_rule
from mnemovault.vault import MemoryVault

log = logging.getLogger(__name__)

MODEL = "mnemovault"
SCOPE_HEADER = "X-Mnemovault-Scope"
SUBJECT_HEADER = "X-Mnemovault-Subject"
REVEAL_HEADER = "X-Mnemovault-Reveal"
DEFAULT_SCOPE = "default"
MAX_MESSAGES = 1000

IGNORED_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop",
                  "seed", "frequency_penalty", "presence_penalty", "logit_bias",
                  "top_logprobs", "parallel_tool_calls", "reasoning_effort", "verbosity",
                  "service_tier", "prediction", "metadata", "prompt_cache_key",
                  "prompt_cache_retention", "prompt_cache_options", "safety_identifier",
                  "moderation", "stream_options.include_obfuscation")
"""Accepted for compatibility and without effect: sampling and length are the server's
chat provider settings, and the rest concerns OpenAI's own service."""


def _approx_tokens(text: str) -> int:
    """A rough token count (a quarter of the characters, rounded up): no tokenizer is
    loaded, and the provider behind the flow may be none at all."""
    return (len(text) + 3) // 4


# -- request --------------------------------------------------------------------------------
class ChatMessage(BaseModel):
    """One message of the conversation, as OpenAI clients send it (an assistant message
    of an earlier response may be passed back as it came)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    refusal: str | None = None
    tool_calls: list[Any] | None = None
    function_call: Any = None
    tool_call_id: str | None = None
    audio: Any = None
    annotations: list[Any] | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, v: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        if isinstance(v, list):
            for n, part in enumerate(v):
                if part.get("type") != "text":
                    raise ValueError(f"part {n}: only text content parts are supported")
                if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
                    raise ValueError(f"part {n}: a text part is {{'type': 'text', 'text': str}}")
        return v

    def text(self) -> str:
        """The content as one string (text parts joined with newlines)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p["text"] for p in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatCompletionRequest(BaseModel):
    """The OpenAI chat-completions request. ``model`` is ``mnemovault`` or
    ``mnemovault:<scope>``; ``user`` names the subject; ``stream`` sends Server-Sent Events.
    Unsupported features are refused (422), sampling fields ignored (see the module)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    model: str = Field(min_length=1, max_length=MAX_NAME_CHARS + 16)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    store: bool | None = None
    # refused unless absent or harmless
    n: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    audio: Any = None
    modalities: list[str] | None = None
    logprobs: bool | None = None
    web_search_options: dict[str, Any] | None = None
    # accepted and ignored (IGNORED_FIELDS)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    top_logprobs: int | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    service_tier: str | None = None
    prediction: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    safety_identifier: str | None = None
    moderation: dict[str, Any] | None = None


def _refuse(field: str, rule: str) -> ValidationError:
    return ValidationError(f"{field}: {rule}", field=field)


def _check_supported(body: ChatCompletionRequest) -> None:
    """Refuse what this endpoint cannot honour (rather than answer as if it had)."""
    if body.n is not None and body.n != 1:
        raise _refuse("n", "only one choice is generated (n must be 1)")
    if body.tools or body.functions:
        field = "tools" if body.tools else "functions"
        raise _refuse(field, "tools and function calling are not supported")
    for field in ("tool_choice", "function_call"):
        value = getattr(body, field)
        if value is not None and value != "none":
            raise _refuse(field, "tools and function calling are not supported")
    fmt = body.response_format
    if fmt is not None and fmt.get("type") != "text":
        raise _refuse("response_format", "only text responses are supported")
    if body.audio is not None or (body.modalities and set(body.modalities) != {"text"}):
        raise _refuse("audio" if body.audio is not None else "modalities",
                      "only text output is supported")
    if body.logprobs:
        raise _refuse("logprobs", "log probabilities are not available")
    if body.web_search_options is not None:
        raise _refuse("web_search_options", "web search is not supported")
    for n, m in enumerate(body.messages):
        if m.role in ("tool", "function"):
            raise _refuse(f"messages.{n}.role", "tools and function calling are not supported")
        if m.tool_calls or m.function_call is not None:
            field = "tool_calls" if m.tool_calls else "function_call"
            raise _refuse(f"messages.{n}.{field}", "tools and function calling are not "
                          "supported")


def _turns(body: ChatCompletionRequest) -> tuple[str, list[dict[str, str]], bool]:
    """(message, history, sticky DO_NOT_STORE) from the client's messages."""
    last = len(body.messages) - 1
    for n, m in enumerate(body.messages):
        limit = MAX_MESSAGE_CHARS if m.role in ("user", "assistant") else MAX_CONTENT_CHARS
        rule = text_rule(m.text(), max_len=limit)
        if rule is not None:
            raise _refuse(f"messages.{n}.content", rule)
    final = body.messages[last]
    if final.role != "user":
        raise _refuse(f"messages.{last}.role", "the last message must be the user's")
    message = final.text()
    if not message.strip():
        raise _refuse(f"messages.{last}.content", "must not be blank")
    history = [{"role": m.role, "content": m.text()} for m in body.messages[:last]
               if m.role in ("user", "assistant") and m.text().strip()]
    unstored = any(h["role"] == "user" and (cmd := commands.parse(h["content"])) is not None
                   and cmd.name == "DO_NOT_STORE" for h in history)
    return message, history[-MAX_HISTORY:], unstored


def _scope_of(model: str, header: str | None, who: Principal) -> str:
    base, sep, rest = model.partition(":")
    if not sep:
        base, sep, rest = model.partition("/")
    if base != MODEL:
        raise NotFound(f"model: no model {model[:80]!r}; use {MODEL!r} or "
                       f"'{MODEL}:<scope>' (GET /v1/models)", field="model")
    from_model = name(rest, "model") if sep else None
    from_header = name(header, SCOPE_HEADER) if header is not None else None
    if from_model and from_header and from_model != from_header:
        raise _refuse("model", f"names scope {from_model!r} but {SCOPE_HEADER} names "
                      f"{from_header!r}")
    return from_model or from_header or who.scope or DEFAULT_SCOPE


def _subject_of(user: str | None, header: str | None) -> str | None:
    a = name(user, "user") if user is not None else None
    b = name(header, SUBJECT_HEADER) if header is not None else None
    if a and b and a != b:
        raise _refuse("user", f"names subject {a!r} but {SUBJECT_HEADER} names {b!r}")
    return a or b


# -- response -------------------------------------------------------------------------------
class Governance(BaseModel):
    """What mnemovault did with the turn: ``command`` (in-band, or None), ``status``,
    ``result`` (the command's data), ``records`` (the context pack), ``stored`` (the episode
    id, if the exchange was stored), ``note``, ``provider``."""

    command: str | None = None
    status: str
    result: dict[str, Any] | None = None
    records: list[RecordRef] = Field(default_factory=list)
    stored: uuid.UUID | None = None
    note: str | None = None
    provider: str | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class Usage(BaseModel):
    """Approximate counts (a quarter of the characters)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    mnemovault: Governance


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "mnemovault"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def _usage(body: ChatCompletionRequest, reply: str) -> Usage:
    prompt = sum(_approx_tokens(m.text()) for m in body.messages)
    completion = _approx_tokens(reply)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)


def _data(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, default=str)}\n\n"


def _chunks(stream: ChatStream, body: ChatCompletionRequest, cid: str, created: int,
            request_id: str) -> Iterator[str]:
    """The turn's events as ``chat.completion.chunk`` objects, then ``[DONE]``; an error
    while streaming as ``data: {"error": …}`` (and no ``[DONE]``)."""
    usage_asked = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(delta: dict[str, Any], finish: str | None = None,
              **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk",
                               "created": created, "model": body.model,
                               "system_fingerprint": None,
                               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": finish}]}
        if usage_asked:
            out["usage"] = None
        return {**out, **extra}

    parts: list[str] = []
    meta: dict[str, Any] = {}
    try:
        for e in stream:
            if e.event == "meta":
                meta = e.data
                yield _data(chunk({"role": "assistant", "content": ""}))
            elif e.event == "token":
                parts.append(e.data["text"])
                yield _data(chunk({"content": e.data["text"]}))
            elif e.event == "done":
                gov = Governance(command=e.data.get("command"), status=e.data["status"],
                                 result=e.data.get("result"), records=meta.get("records", []),
                                 stored=e.data.get("stored"), note=e.data.get("note"),
                                 provider=meta.get("provider"))
                yield _data(chunk({}, "stop", mnemovault=gov.model_dump(mode="json")))
    except MnemoError as exc:
        yield _data({"error": exc.to_dict(), "request_id": request_id})
        return
    except psycopg.Error as exc:
        log.error("database error %s in a chat completion stream (request %s)",
                  type(exc).__name__, request_id)
        err = Unavailable("database: the operation failed; nothing was changed")
        yield _data({"error": err.to_dict(), "request_id": request_id})
        return
    if usage_asked:
        yield _data({"id": cid, "object": "chat.completion.chunk", "created": created,
                     "model": body.model, "system_fingerprint": None, "choices": [],
                     "usage": _usage(body, "".join(parts)).model_dump()})
    yield "data: [DONE]\n\n"


# -- routes ---------------------------------------------------------------------------------
def openai_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    """``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /v1/models/{model}``;
    ``principal`` is the app's bearer-key dependency (any valid key may list models)."""
    router = APIRouter(tags=["openai"])
    Auth = Annotated[Principal, Depends(principal)]
    ScopeHeader = Annotated[str | None, Header(alias=SCOPE_HEADER, max_length=MAX_NAME_CHARS)]
    SubjectHeader = Annotated[str | None,
                              Header(alias=SUBJECT_HEADER, max_length=MAX_NAME_CHARS)]
    RevealHeader = Annotated[bool, Header(alias=REVEAL_HEADER)]

    def cards(who: Principal) -> list[ModelCard]:
        out = [ModelCard(id=MODEL)]
        if who.scope is not None:
            out.append(ModelCard(id=f"{MODEL}:{who.scope}"))
        return out

    @router.get("/v1/models", response_model=ModelList)
    def list_models(who: Auth) -> ModelList:
        """``mnemovault`` (the scope from ``X-Mnemovault-Scope``, else ``default``); any
        ``mnemovault:<scope>`` works too and selects that scope (a scope-limited key's own
        is listed)."""
        return ModelList(data=cards(who))

    @router.get("/v1/models/{model:path}", response_model=ModelCard)
    def get_model(model: Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS + 16)],
                  who: Auth) -> ModelCard:
        """One model: ``mnemovault`` or ``mnemovault:<scope>``."""
        _scope_of(model, None, who)
        return ModelCard(id=model)

    @router.post("/v1/chat/completions", response_model=ChatCompletion,
                 responses={200: {"content": {"text/event-stream": {}},
                                  "description": "A chat.completion, or with stream: true "
                                                 "chat.completion.chunk events then [DONE]"}})
    def chat_completions(body: ChatCompletionRequest, who: Auth, request: Request,
                         x_scope: ScopeHeader = None, x_subject: SubjectHeader = None,
                         x_reveal: RevealHeader = False) -> Any:
        """One turn of the chat flow (``POST /v1/chat``) in the OpenAI shape: the last
        message is the user's, earlier user and assistant messages are history, system
        messages are ignored; scope from the model name ``mnemovault:<scope>`` or
        ``X-Mnemovault-Scope``, subject from ``user`` or ``X-Mnemovault-Subject``."""
        _check_supported(body)
        scope = _scope_of(body.model, x_scope, who)
        subject = _subject_of(body.user, x_subject)
        message, history, unstored = _turns(body)
        request_id = str(request.state.request_id)
        stream = vault.chat_stream(message, scope=scope, subject=subject, history=history,
                                   reveal=x_reveal, store=body.store is not False
                                   and not unstored, principal=who, request_id=request_id)
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.stream:
            return StreamingResponse(_chunks(stream, body, cid, created, request_id),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache",
                                              "X-Accel-Buffering": "no"})
        res = stream.collect()
        gov = Governance(**res.model_dump(exclude={"reply"}))
        return ChatCompletion(id=cid, created=created, model=body.model,
                              choices=[Choice(message=AssistantMessage(content=res.reply))],
                              usage=_usage(body, res.reply), mnemovault=gov)

    return router
