"""Data-subject rights over HTTP (SPEC section 10; :mod:`mnemovault.subjects`):

* ``POST /v1/subjects/{subject}/erase`` (``subject:erase``): erase every memory of the
  subject in the body's ``scope``, with everything that goes with it; the answer carries
  the signed erasure receipt (verify it offline with ``mnemovault receipt verify``).
* ``POST /v1/scopes/{scope}/erase`` (``subject:erase``): erase a whole scope; the body must
  repeat the scope as ``confirm``.
* ``GET /v1/subjects/{subject}/memories`` (``memory:read``): exactly what an erase would
  remove, oldest id first, keyset paged (``cursor`` = last id).
* ``GET /v1/subjects/{subject}/export`` (``subject:erase``; ``reveal=true`` also
  ``pii:reveal``, audited): the ``mnemovault-subject-export/1`` document
  (``docs/schemas/subject-export.schema.json``).
* ``PUT /v1/memories/{memory_id}/content`` (``subject:erase``): rectify a memory's content.

A subject (or scope) is given as written (an email address is fine: it is looked up by its
placeholder); one that contains ``/`` cannot be a path segment, use the library or CLI.

A subject never needs to be in a URL (where proxies and access logs keep it): the same
operations take it in the body, ``POST /v1/subjects/erase`` ``{subject, scope}``,
``POST /v1/subjects/memories`` ``{subject, scope, limit?, cursor?}`` and
``POST /v1/subjects/export`` ``{subject, scope, reveal?}``; and a path segment may be the
subject's placeholder (``{email:p_0123456789}``, percent-encoded) instead of its value.
"""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.errors import ValidationError
from mnemovault.models import MAX_CONTENT_CHARS, Page
from mnemovault.subjects.models import Erasure, Rectified
from mnemovault.vault import MemoryVault

SubjectPath = Annotated[str, Path(min_length=1, max_length=200)]
Scope = Annotated[str, Query(min_length=1, max_length=200)]


class EraseBody(BaseModel):
    """The scope to erase the subject from."""

    model_config = ConfigDict(extra="forbid")

    scope: str = Field(min_length=1, max_length=200)


class EraseScopeBody(BaseModel):
    """``confirm`` must repeat the scope: a whole scope goes."""

    model_config = ConfigDict(extra="forbid")

    confirm: str = Field(min_length=1, max_length=200)


class ContentBody(BaseModel):
    """The corrected content (pseudonymised and embedded like a write)."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)


class SubjectTarget(BaseModel):
    """A subject and the scope to act in, in the body rather than the URL."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=200)
    scope: str = Field(min_length=1, max_length=200)


class SubjectPageBody(SubjectTarget):
    limit: StrictInt = Field(default=50, ge=1, le=100)
    cursor: uuid.UUID | None = None


class SubjectExportBody(SubjectTarget):
    reveal: StrictBool = False


def subjects_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(tags=["subjects"])
    Auth = Annotated[Principal, Depends(principal)]

    def rid(request: Request) -> str:
        return str(request.state.request_id)

    @router.post("/v1/subjects/{subject}/erase", response_model=Erasure)
    def erase_subject(subject: SubjectPath, body: EraseBody, who: Auth,
                      request: Request) -> Erasure:
        """Erase ``subject``'s memories in ``scope`` (versions, derived facts, graph, vault
        values nothing else uses) in one transaction; 409 if a write for the subject is
        under way (retry). Repeating it is safe: it removes nothing more."""
        return vault.subjects.erase(subject, scope=body.scope, principal=who,
                                    request_id=rid(request))

    @router.post("/v1/subjects/erase", response_model=Erasure)
    def erase_subject_body(body: SubjectTarget, who: Auth, request: Request) -> Erasure:
        """``POST /v1/subjects/{subject}/erase`` with the subject in the body."""
        return vault.subjects.erase(body.subject, scope=body.scope, principal=who,
                                    request_id=rid(request))

    @router.post("/v1/subjects/memories", response_model=Page)
    def subject_memories_body(body: SubjectPageBody, who: Auth) -> Page:
        """``GET /v1/subjects/{subject}/memories`` with the subject in the body."""
        return vault.subjects.list(body.subject, scope=body.scope, limit=body.limit,
                                   cursor=body.cursor, principal=who)

    @router.post("/v1/subjects/export")
    def subject_export_body(body: SubjectExportBody, who: Auth,
                            request: Request) -> dict[str, Any]:
        """``GET /v1/subjects/{subject}/export`` with the subject in the body."""
        return vault.subjects.export(body.subject, scope=body.scope, reveal=body.reveal,
                                     principal=who, request_id=rid(request))

    @router.post("/v1/scopes/{scope}/erase", response_model=Erasure)
    def erase_scope(scope: SubjectPath, body: EraseScopeBody, who: Auth,
                    request: Request) -> Erasure:
        """Erase every memory of ``scope``; ``confirm`` must equal the scope."""
        if body.confirm != scope:
            raise ValidationError("confirm: must repeat the scope being erased",
                                  field="confirm")
        return vault.subjects.erase_scope(scope, principal=who, request_id=rid(request))

    @router.get("/v1/subjects/{subject}/memories", response_model=Page)
    def subject_memories(subject: SubjectPath, who: Auth, scope: Scope,
                         limit: Annotated[int, Query(ge=1, le=100)] = 50,
                         cursor: uuid.UUID | None = None) -> Page:
        """What an erase of ``subject`` in ``scope`` would remove (pending, archived and
        superseded included; never embeddings), oldest id first."""
        return vault.subjects.list(subject, scope=scope, limit=limit, cursor=cursor,
                                   principal=who)

    @router.get("/v1/subjects/{subject}/export")
    def subject_export(subject: SubjectPath, who: Auth, request: Request, scope: Scope,
                       reveal: bool = False) -> dict[str, Any]:
        """Everything about ``subject`` in ``scope`` as one JSON document
        (``mnemovault-subject-export/1``); ``reveal=true`` resolves placeholders
        (``pii:reveal``, audited)."""
        return vault.subjects.export(subject, scope=scope, reveal=reveal, principal=who,
                                     request_id=rid(request))

    @router.put("/v1/memories/{memory_id}/content", response_model=Rectified)
    def rectify(memory_id: uuid.UUID, body: ContentBody, who: Auth,
                request: Request) -> Rectified:
        """Rectify: replace the memory's content in place (new version; the old text is
        not kept; values only it used are shredded)."""
        return vault.subjects.rectify(memory_id, body.content, principal=who,
                                      request_id=rid(request))

    return router
