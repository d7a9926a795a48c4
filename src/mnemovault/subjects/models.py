"""Typed results of the subject-rights operations."""

from __future__ import annotations

import uuid
from datetime import datetime
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
    holds the new content); ``history`` the version that now holds the stretch of valid
    time before the correction (:mod:`mnemovault.subjects.rectify`), ``valid_from`` when
    the corrected version holds from."""

    id: uuid.UUID
    version: int
    status: str = "active"
    history: uuid.UUID | None = None
    valid_from: datetime | None = None
    placeholders: list[str] = Field(default_factory=list)
    shredded: list[str] = Field(default_factory=list)
    audit_seq: int


class Reapplied(BaseModel):
    """One tenant's reapplication of the erasure ledger: ``entries`` read, memories
    ``removed`` again, placeholders ``shredded`` again, ``runs_removed`` (procedure runs
    of an erased subject on other owners' procedures, taken out of those procedures'
    counters again), and ``to_rectify`` (memories a rectification had corrected whose old
    content the restore brought back: correct them again); ``audit_seq`` of the
    ``REAPPLY`` row (None: nothing to do)."""

    tenant: str
    entries: int
    removed: list[uuid.UUID] = Field(default_factory=list)
    shredded: list[str] = Field(default_factory=list)
    runs_removed: list[uuid.UUID] = Field(default_factory=list)
    to_rectify: list[uuid.UUID] = Field(default_factory=list)
    audit_seq: int | None = None


class TenantCheck(BaseModel):
    """What a start found for one tenant's ledger file (:func:`mnemovault.subjects.ledger.
    check_on_start`) when the database was not level with it: ``state`` is ``behind`` (the
    file lists erasures the database lacks: a backup restore; they were re-erased, see
    ``reapplied``), ``file_behind`` (the database had rows the file lacked: written again),
    or ``no_tenant`` (the tenant is not in the database: nothing to re-erase). ``lost``:
    entries of the file the database lacks; ``unverified``: those of them not signed by
    this deployment's key (not re-erased: check them, then ``reapply-erasures``);
    ``problems``: what the file check found (line numbers and rules, no content)."""

    tenant: str
    state: str
    lost: int = 0
    unverified: int = 0
    written: int = 0
    reapplied: Reapplied | None = None
    problems: list[str] = Field(default_factory=list)


class StartCheck(BaseModel):
    """The comparison of the erasure ledger with the database at a start: the ledger
    ``dir``, the database's ledger ``database_id`` (None with ``MNEMOVAULT_LEDGER_DIR``),
    how many tenant files were ``checked``, the ``tenants`` that were not level (none in
    the usual case), legacy files ``migrated`` from ``<data dir>/ledger``, and ``ms``
    taken."""

    enabled: bool = True
    dir: str | None = None
    database_id: str | None = None
    checked: int = 0
    tenants: list[TenantCheck] = Field(default_factory=list)
    migrated: list[str] = Field(default_factory=list)
    ms: float = 0.0
