"""Typed results of the subject-rights operations."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, Field


class Erasure(BaseModel):
    """What an erase did: ``receipt`` is the signed erasure receipt
    (:mod:`mnemovault.subjects.receipt`: verify it offline with ``mnemovault receipt
    verify``); ``deleted`` every memory id removed (the subject's, their versions and what
    was derived from them), ``shredded`` the vault placeholders crypto-shredded."""

    receipt: dict[str, Any]
    deleted: list[uuid.UUID] = Field(default_factory=list)
    shredded: list[str] = Field(default_factory=list)
    scrub: dict[str, Any] | None = None
    """With ``scrub=True``: what the scrub after the erase did (tables, WAL, ``complete``)."""


class Rectified(BaseModel):
    """A rectification: the memory's ``id`` and new ``version``; ``placeholders`` created
    by the new content, ``shredded`` the values only the old content used; ``audit_seq``
    of the ``RECTIFY`` row; ``status`` after it (``pending_review`` when the review gate
    holds the new content)."""

    id: uuid.UUID
    version: int
    status: str = "active"
    placeholders: list[str] = Field(default_factory=list)
    shredded: list[str] = Field(default_factory=list)
    audit_seq: int


class Reapplied(BaseModel):
    """One tenant's reapplication of the erasure ledger: ``entries`` read, memories
    ``removed`` again, placeholders ``shredded`` again, and ``to_rectify`` (memories a
    rectification had corrected whose old content the restore brought back: correct them
    again); ``audit_seq`` of the ``REAPPLY`` row (None: nothing to do)."""

    tenant: str
    entries: int
    removed: list[uuid.UUID] = Field(default_factory=list)
    shredded: list[str] = Field(default_factory=list)
    to_rectify: list[uuid.UUID] = Field(default_factory=list)
    audit_seq: int | None = None
