"""The chat-model port: what a provider is given (:class:`ChatPrompt`) and what it must do
(:class:`ChatProvider`: stream the answer as text chunks)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ContextRecord:
    """One retrieved record as a model sees it: pseudonymised content (placeholders, and
    ``[erased]`` for shredded values), its id, type and creation date (``YYYY-MM-DD``)."""

    id: uuid.UUID
    type: str
    date: str
    content: str


@dataclass(frozen=True)
class ChatPrompt:
    """Everything a provider may use. ``messages`` is the OpenAI chat shape (a system
    message holding the instructions, the rule and the fenced context pack, then the
    history, then the user's message); ``question`` is the user's message alone and
    ``records`` the retrieved records, for providers that work without a model. All text is
    pseudonymised: personal values appear only as placeholders."""

    messages: list[dict[str, str]]
    question: str
    records: list[ContextRecord] = field(default_factory=list)


@runtime_checkable
class ChatProvider(Protocol):
    """A chat model. ``stream`` yields the answer in chunks (any size, possibly splitting a
    placeholder: the caller reassembles them).

    Raises (from ``stream``):
        Unavailable: the model could not be reached or answered with an error.
    """

    name: str

    def stream(self, prompt: ChatPrompt) -> Iterator[str]: ...
