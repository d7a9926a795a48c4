"""Chat inputs and outputs: the request (one shape for ``POST /v1/chat`` and
``POST /v1/chat/stream``), the events a turn produces, and the collected result."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator
from pydantic import ValidationError as PydanticValidationError

from mnemovault.errors import MnemoError
from mnemovault.validation import check_text, validation_error_from_pydantic

MAX_MESSAGE_CHARS = 10_000
MAX_HISTORY = 50

Status = Literal["answered", "done", "refused", "invalid"]
"""``answered``: a chat answer (``DO_NOT_STORE`` included); ``done``: a command did what it
was asked; ``refused``: a command was refused by policy (nothing changed); ``invalid``: a
command's argument was malformed (nothing changed)."""


def _check_text(v: str) -> str:
    check_text(v, max_len=MAX_MESSAGE_CHARS)
    if not v.strip():
        raise ValueError("must not be blank")
    return v


class HistoryTurn(BaseModel):
    """An earlier turn of the conversation, given for context (never stored)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)

    @field_validator("content")
    @classmethod
    def _content(cls, v: str) -> str:
        return _check_text(v)


class ChatRequest(BaseModel):
    """One chat turn. The tenant comes from the API key; ``scope`` is searched and the
    exchange stored there; ``subject`` filters recall and is stored with the exchange;
    ``k`` records are retrieved (default ``MNEMOVAULT_CHAT_K``); ``reveal`` asks for
    personal values in the answer (permission ``pii:reveal``); ``store=false`` keeps the
    exchange out of memory (as ``DO_NOT_STORE:`` does)."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    scope: str = Field(min_length=1, max_length=200)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    history: list[HistoryTurn] = Field(default_factory=list, max_length=MAX_HISTORY)
    k: StrictInt | None = Field(default=None, ge=1, le=20)
    reveal: StrictBool = False
    store: StrictBool = True

    @field_validator("message")
    @classmethod
    def _message(cls, v: str) -> str:
        return _check_text(v)

    @field_validator("scope", "subject")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        if v is not None:
            _check_text(v)
            if any(ord(c) < 32 for c in v):
                raise ValueError("must not contain control characters")
        return v

    @classmethod
    def parse(cls, *, message: str, scope: str, subject: str | None = None,
              history: Sequence[dict[str, str]] | None = None, k: int | None = None,
              reveal: bool = False, store: bool = True) -> ChatRequest:
        """Validate library arguments.

        Raises:
            ValidationError: names the field (``message``, ``history.0.role``, ``k``…).
        """
        try:
            return cls.model_validate({"message": message, "scope": scope, "subject": subject,
                                       "history": list(history or []), "k": k,
                                       "reveal": reveal, "store": store})
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc) from None


class RecordRef(BaseModel):
    """A record that was put in the context pack."""

    id: uuid.UUID
    type: str
    date: str


class ChatResult(BaseModel):
    """A whole chat turn (``POST /v1/chat``; the stream's events, collected).

    ``reply``: the answer, or the command's report; placeholders unless revealed.
    ``command``: the in-band command (``FORGET_PREVIEW`` …) or None for plain chat.
    ``result``: the command's data (ids deleted, preview rows, candidates…).
    ``records``: what was retrieved into the context pack. ``stored``: the id of the
    episode the exchange was stored as, if it was. ``note``: e.g. that nothing was stored.
    """

    reply: str
    status: Status
    command: str | None = None
    result: dict[str, Any] | None = None
    records: list[RecordRef] = Field(default_factory=list)
    stored: uuid.UUID | None = None
    note: str | None = None
    provider: str | None = None


@dataclass(frozen=True)
class ChatEvent:
    """One event of a streamed turn: ``meta`` (command, status, records, provider), then
    ``token`` events (``{"text": …}``), then ``done`` (command, status, result, stored,
    note). The SSE endpoint sends each as ``event: <name>`` / ``data: <json>``."""

    event: Literal["meta", "token", "done"]
    data: dict[str, Any]


class ChatStream:
    """A prepared chat turn: :attr:`meta` is known (command handled, records retrieved);
    iterating yields :class:`ChatEvent` objects, running the model and storing the
    exchange as it goes. Iterate once."""

    def __init__(self, meta: dict[str, Any], events: Callable[[], Iterator[ChatEvent]]) -> None:
        self.meta = meta
        self._events = events

    def __iter__(self) -> Iterator[ChatEvent]:
        yield ChatEvent("meta", self.meta)
        yield from self._events()

    def collect(self) -> ChatResult:
        """Run the turn to the end and return it whole.

        Raises:
            MnemoError: whatever the model or the store raised (nothing half-stored).
        """
        parts: list[str] = []
        done: dict[str, Any] = {}
        for e in self:
            if e.event == "token":
                parts.append(e.data["text"])
            elif e.event == "done":
                done = e.data
        if not done:
            raise MnemoError("chat: the turn ended without a result")
        return ChatResult(reply="".join(parts), status=done["status"],
                          command=done.get("command"), result=done.get("result"),
                          records=self.meta.get("records", []), stored=done.get("stored"),
                          note=done.get("note"), provider=self.meta.get("provider"))
