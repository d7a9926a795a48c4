"""The review queue over HTTP (permission ``review:approve``; SPEC section 8): ``GET
/v1/review`` lists the memories and procedures held by the review gate
(``REQUIRE_REVIEW=true``), oldest first, keyset paged; ``POST /v1/review/{id}/approve``
makes one active (and supersedes the version it replaces), ``POST
/v1/review/{id}/reject`` deletes it (or keeps a rejected version as history). Each decision
is audited with the reviewer's key id and the optional comment; an item that is not
pending answers 409; approving an item the same key captured answers 403 (``details.rule
= "separation_of_duties"``) unless ``REVIEW_SELF_APPROVAL=true``."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.governance.review import MAX_COMMENT_CHARS, ReviewDecision
from mnemovault.models import Page
from mnemovault.vault import MemoryVault


class ReviewNote(BaseModel):
    """An optional comment for the audit row (pseudonymised; checked by the capture
    guard)."""

    model_config = ConfigDict(extra="forbid")

    comment: str | None = Field(default=None, min_length=1, max_length=MAX_COMMENT_CHARS)


def review_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/review", tags=["review"])
    Auth = Annotated[Principal, Depends(principal)]
    Note = Annotated[ReviewNote | None, Body()]

    @router.get("", response_model=Page)
    def review_queue(who: Auth,
                     scope: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
                     limit: Annotated[int, Query(ge=1, le=100)] = 50,
                     cursor: uuid.UUID | None = None) -> Page:
        """Items pending review, oldest first; ``cursor`` = the last id of the previous
        page (``next_cursor``)."""
        return vault.review.list(scope=scope, limit=limit, cursor=cursor, principal=who)

    @router.post("/{memory_id}/approve", response_model=ReviewDecision)
    def review_approve(memory_id: uuid.UUID, who: Auth, request: Request,
                       body: Note = None) -> ReviewDecision:
        """Approve a pending item: it is recalled from now on, in place of the version it
        replaces. Another key than the one that captured it (403 otherwise)."""
        return vault.review.approve(memory_id, comment=body.comment if body else None,
                                    principal=who, request_id=str(request.state.request_id))

    @router.post("/{memory_id}/reject", response_model=ReviewDecision)
    def review_reject(memory_id: uuid.UUID, who: Auth, request: Request,
                      body: Note = None) -> ReviewDecision:
        """Reject a pending item: deleted through the forget path (a rejected version is
        kept as superseded history; the approved version stays current)."""
        return vault.review.reject(memory_id, comment=body.comment if body else None,
                                   principal=who, request_id=str(request.state.request_id))

    return router
