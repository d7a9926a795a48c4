"""Wake and timeline over HTTP (permission ``memory:read``): ``GET /v1/wake`` is the
waking state an agent asks for when it starts work (one fenced context pack within a token
budget); ``GET /v1/timeline`` a subject's memories in time order, keyset paged.

``POST /v1/wake`` and ``POST /v1/timeline`` take the same parameters as a JSON body, so a
subject need not be in the URL (query strings end up in proxy and access logs)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.models import TimelinePage, WakeState
from mnemovault.validation import Timestamp
from mnemovault.vault import MemoryVault

Scope = Annotated[str, Query(min_length=1, max_length=200)]
Subject = Annotated[str | None, Query(min_length=1, max_length=200)]


class WakeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(min_length=1, max_length=200)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    budget: StrictInt = Field(default=1000, ge=100, le=32_000)


class TimelineBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(min_length=1, max_length=200)
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: StrictInt = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, min_length=1, max_length=200)


def wake_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(tags=["recall"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.get("/v1/wake", response_model=WakeState)
    def wake(who: Auth, scope: Scope, subject: Subject = None,
             budget: Annotated[int, Query(ge=100, le=32_000)] = 1000) -> WakeState:
        """Pinned records, the most used facts and the most recent records of ``subject``
        in ``scope``, as one fenced context pack within ``budget`` tokens (characters / 4)."""
        return vault.wake(scope=scope, subject=subject, budget=budget, principal=who)

    @router.get("/v1/timeline", response_model=TimelinePage)
    def timeline(who: Auth, scope: Scope, subject: Subject = None,
                 since: Timestamp | None = None, until: Timestamp | None = None,
                 limit: Annotated[int, Query(ge=1, le=100)] = 50,
                 cursor: Annotated[str | None, Query(min_length=1, max_length=200)] = None
                 ) -> TimelinePage:
        """``subject``'s memories in ``scope``, oldest first by creation time, in
        ``[since, until)``; pass ``next_cursor`` back as ``cursor``."""
        return vault.timeline(scope=scope, subject=subject, since=since, until=until,
                              limit=limit, cursor=cursor, principal=who)

    @router.post("/v1/wake", response_model=WakeState)
    def wake_body(body: WakeBody, who: Auth) -> WakeState:
        """``GET /v1/wake`` with its parameters in the body."""
        return vault.wake(scope=body.scope, subject=body.subject, budget=body.budget,
                          principal=who)

    @router.post("/v1/timeline", response_model=TimelinePage)
    def timeline_body(body: TimelineBody, who: Auth) -> TimelinePage:
        """``GET /v1/timeline`` with its parameters in the body."""
        return vault.timeline(scope=body.scope, subject=body.subject, since=body.since,
                              until=body.until, limit=body.limit, cursor=body.cursor,
                              principal=who)

    return router
