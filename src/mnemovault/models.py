"""Typed inputs and outputs of the service. Validation errors name the field and the rule."""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from mnemovault.validation import MAX_NAME_CHARS, Timestamp, check_text, check_time, text_rule

MemoryType = Literal["episode", "fact", "procedure"]
Status = Literal["active", "pending_review", "superseded"]

MAX_CONTENT_CHARS = 100_000
MAX_TAG_CHARS = 64
MAX_TAGS = 32


def _check_text(value: str, *, max_len: int, allow_newlines: bool) -> str:
    return check_text(value, max_len=max_len, allow_newlines=allow_newlines)


def _name(value: str | None, max_len: int = MAX_NAME_CHARS) -> str | None:
    if value is None:
        return value
    value = _check_text(value, max_len=max_len, allow_newlines=False)
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _check_tags(tags: list[str]) -> list[str]:
    for t in tags:
        if not isinstance(t, str) or not t or len(t) > MAX_TAG_CHARS:
            raise ValueError(f"each tag must be 1-{MAX_TAG_CHARS} characters")
        _check_text(t, max_len=MAX_TAG_CHARS, allow_newlines=False)
    return tags


RESERVED_PROVENANCE = frozenset({"review", "captured_by"})
"""Provenance keys only the review gate writes (:mod:`mnemovault.store.review`: the
row's review state and the actor who captured a held row). A writer that could set them
could name another actor as the capturer and approve its own item."""

INJECTION_FLAGS = "injection_flags"
"""The provenance key of the injection sanitiser's label (its value: a list of family
names; :data:`mnemovault.guard.sanitise.FLAG_KEY` is this key): the one extra value that
may be a list."""


class Provenance(BaseModel):
    """Where a memory came from. Extra keys (e.g. ``dia_id``) are allowed if their values
    are strings, numbers, booleans or null; at most 32 keys; ``review`` and
    ``captured_by`` are reserved (:data:`RESERVED_PROVENANCE`)."""

    model_config = ConfigDict(extra="allow")

    source: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    agent: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    run_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    source_id: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)

    @field_validator("source", "agent", "run_id", "source_id")
    @classmethod
    def _fields(cls, v: str | None) -> str | None:
        return _name(v)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return _check_tags(tags)

    def model_post_init(self, __context: Any) -> None:
        extra = self.model_extra or {}
        if len(extra) + 5 > 37:
            raise ValueError("at most 32 extra keys")
        for k, v in extra.items():
            if k in RESERVED_PROVENANCE:
                raise ValueError(f"{k}: reserved: set by the review gate, never by a writer")
            if k == INJECTION_FLAGS and isinstance(v, list) and len(v) <= 16 and all(
                    isinstance(f, str) and len(f) <= 64 for f in v):
                continue  # the sanitiser's label (guard.sanitise.FLAG_KEY): family names
            if not isinstance(v, str | int | float | bool | type(None)):
                raise ValueError(f"{k}: extra values must be strings, numbers, booleans or null")
            if not 1 <= len(k) <= 64 or text_rule(k, max_len=64, allow_newlines=False):
                raise ValueError("extra keys must be 1-64 characters without control "
                                 "characters")
            if isinstance(v, str):
                try:
                    check_text(v, max_len=1000, allow_newlines=True)
                except ValueError as exc:
                    raise ValueError(f"{k}: {exc}") from None
            if isinstance(v, float) and not math.isfinite(v):  # JSON has no NaN or inf
                raise ValueError(f"{k}: must be a finite number")
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53:
                # beyond ±2^53 JSON readers (and the audit log's canonical form) lose digits
                raise ValueError(f"{k}: integers must be within ±2^53")


class Entity(BaseModel):
    """A personal value the caller names (``{"kind": "person", "value": "Ada Lovelace"}``):
    it goes into the vault and is recognised wherever it appears, now and later."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(pattern=r"^[a-z][a-z_]{0,31}$")
    value: str = Field(min_length=1, max_length=1000)

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        v = _check_text(v, max_len=1000, allow_newlines=False)
        if not v.strip():
            raise ValueError("must not be blank")
        return v


class MemoryInput(BaseModel):
    """One memory to remember."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1)
    scope: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    subject: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    type: MemoryType = "episode"
    key: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    provenance: Provenance = Field(default_factory=Provenance)
    created_at: Timestamp | None = None
    valid_from: Timestamp | None = Field(
        default=None, validation_alias=AliasChoices("valid_from", "occurred_at"))
    """When what it says became true in the world (its event time; also accepted as
    ``occurred_at``): where a keyed version starts on its key's timeline
    (:mod:`mnemovault.memories.valid_time`). Default: ``created_at``, else the time of the
    write. Not later than the write."""
    entities: list[Entity] = Field(default_factory=list, max_length=100)
    derived_from: list[uuid.UUID] = Field(default_factory=list, max_length=100)
    """Lineage: the memories (same tenant and scope) this one was derived from, e.g. the
    episodes a fact was distilled from. Forgetting any of them forgets this one too."""

    @model_validator(mode="before")
    @classmethod
    def _one_event_time(cls, data: Any) -> Any:
        if (isinstance(data, dict) and data.get("valid_from") is not None
                and data.get("occurred_at") is not None
                and data["valid_from"] != data["occurred_at"]):
            raise ValueError("valid_from: give valid_from or occurred_at (the same time), "
                             "not two different times")
        return data

    @field_validator("content")
    @classmethod
    def _content(cls, v: str) -> str:
        v = _check_text(v, max_len=MAX_CONTENT_CHARS, allow_newlines=True)
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("scope", "subject", "key")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _name(v)

    @field_validator("created_at", "valid_from")
    @classmethod
    def _time(cls, v: datetime | None) -> datetime | None:
        return check_time(v)


class Memory(BaseModel):
    """A stored memory (content as stored: pseudonymised once the PII vault is on)."""

    id: uuid.UUID
    scope: str
    subject: str | None
    type: MemoryType
    content: str
    key: str | None
    pinned: bool
    archived: bool
    status: Status
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    provenance: dict[str, Any]
    parent_id: uuid.UUID | None
    version: int
    valid_from: datetime | None = None
    """When this version became true (its event time: :mod:`mnemovault.memories.valid_time`)."""
    valid_to: datetime | None = None
    """When a later version replaced it (None: still true). ``[valid_from, valid_to)`` is
    what an ``as_of`` recall matches; an empty interval marks a version never current (a
    displaced or rejected review proposal)."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Memory:
        return cls(subject=row["subject_id"], **{k: v for k, v in row.items()
                                                  if k in cls.model_fields and k != "subject"})


class Receipt(BaseModel):
    """What remember returns: the id, the version it superseded, placeholders created, the
    audit sequence number of the row that recorded it, and the ``status`` it was stored with
    (``pending_review`` under the review gate: not recalled until approved; ``superseded``
    for a keyed statement dated before its key's current version: stored as a historical
    version, :mod:`mnemovault.memories.valid_time`), and its valid interval."""

    id: uuid.UUID
    scope: str
    version: int
    superseded: uuid.UUID | None = None
    placeholders: list[str] = Field(default_factory=list)
    audit_seq: int
    status: Literal["active", "pending_review", "superseded"] = "active"
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class RecallFilters(BaseModel):
    """Recall filters: a subject, memory types, tags (any of them), a creation time range
    ``[since, until)`` (bounded as every timestamp: :mod:`mnemovault.validation`), and
    whether archived memories count."""

    model_config = ConfigDict(extra="forbid")

    subject: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    types: list[MemoryType] | None = Field(default=None, max_length=3)
    tags: list[str] | None = Field(default=None, max_length=MAX_TAGS)
    since: Timestamp | None = None
    until: Timestamp | None = None
    include_archived: StrictBool = False

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: str | None) -> str | None:
        return _name(v)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _check_tags(v)

    @field_validator("since", "until")
    @classmethod
    def _time(cls, v: datetime | None) -> datetime | None:
        return check_time(v)


class Hit(BaseModel):
    """One recall result. ``score`` is the fused score (higher is better); ``similarity`` the
    cosine similarity in [-1, 1] (None if the record came from full text only); ``vector_rank``
    and ``text_rank`` its 1-based ranks in each list (None if absent)."""

    memory: Memory
    score: float
    similarity: float | None
    vector_rank: int | None
    text_rank: int | None


class Page(BaseModel):
    items: list[Memory]
    next_cursor: uuid.UUID | None


class ForgetResult(BaseModel):
    """What a forget deleted: every id (requested ids and their versions), the ids asked for
    that did not exist (or belong to another tenant: the two are not told apart), and the
    audit sequence number."""

    deleted: list[uuid.UUID]
    not_found: list[uuid.UUID]
    audit_seq: int | None
    derived: list[uuid.UUID] = Field(default_factory=list)
    """The subset of ``deleted`` that went by lineage (derived from a forgotten memory)."""
    shredded: list[str] = Field(default_factory=list)
    """Vault placeholders crypto-shredded: no remaining record used them, or the forget
    query named their value."""
    graph_nodes_removed: int = 0
    graph_edges_removed: int = 0


class PinResult(BaseModel):
    """What pin/unpin changed: ids now (un)pinned, ids not found (or not visible to the
    caller: the two are not told apart) and the audit sequence number (None: no change)."""

    changed: list[uuid.UUID]
    not_found: list[uuid.UUID]
    audit_seq: int | None


class RetentionResult(BaseModel):
    """One retention run over one tenant: memories archived (score below the threshold)
    and, when ``retention_delete_unused_days`` is set, forgotten (idle that long)."""

    tenant: str
    archived: list[uuid.UUID]
    deleted: list[uuid.UUID]
    dry_run: bool
    audit_seq: int | None
    error: dict[str, Any] | None = None
    """Set when this tenant's run failed (``code``, ``message``): nothing was changed."""


class WakeState(BaseModel):
    """An agent's waking state: ``pack`` is one fenced context pack (the rule, then each
    record fenced) holding ``records`` (pinned first, then the most used facts, then the
    most recent), within ``budget`` tokens (``tokens`` used, approximated as characters / 4
    rounded up); ``left_out`` counts candidates that did not fit."""

    scope: str
    subject: str | None
    budget: int
    tokens: int
    records: list[Memory]
    reasons: list[str]
    """Why each record is in the pack, aligned with ``records``: ``pinned``, ``fact`` or
    ``recent``."""
    left_out: int
    pack: str


class TimelinePage(BaseModel):
    """A page of a timeline, oldest first by creation time; pass ``next_cursor`` back as
    ``cursor`` for the next page (None: this was the last)."""

    items: list[Memory]
    next_cursor: str | None
