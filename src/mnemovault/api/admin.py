"""Admin endpoints: the audit log (permission ``audit:read``), the PII watch
(``subject:erase``, a key without limits) and the librarian (``memory:write`` +
``memory:forget``, an unlimited key)."""

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from mnemovault.auth import Principal, PrincipalDependency
from mnemovault.librarian import LibrarianResult
from mnemovault.vault import MemoryVault

# a JSON Lines body (one JSON object a line), documented as what it is
NDJSON_RESPONSE: dict[str, Any] = {
    "description": "JSON Lines, one object a line",
    "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
}


def audit_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/admin/audit", tags=["audit"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.get("/export", response_class=StreamingResponse,
                responses={200: NDJSON_RESPONSE})
    def export(who: Auth,
               start: Annotated[int | None, Query(alias="from", ge=1)] = None,
               end: Annotated[int | None, Query(alias="to", ge=1)] = None) -> StreamingResponse:
        """The tenant's chain as JSON Lines, rows ``from <= seq <= to`` (inclusive),
        streamed in sequence order. Verify with ``python -m mnemovault.audit.verify``
        (``--allow-partial`` for a range that does not start at 1)."""
        chunks: Iterator[bytes] = vault.audit.export(who, start, end)
        first = next(chunks, b"")  # errors (permission, range) surface before streaming

        def body() -> Iterator[bytes]:
            if first:
                yield first
            yield from chunks

        return StreamingResponse(body(), media_type="application/x-ndjson")

    @router.get("/checkpoint")
    def checkpoint(who: Auth) -> dict[str, Any]:
        """The latest signed checkpoint (C2SP signed note: origin, size, root; Ed25519)."""
        return vault.audit.checkpoint(who)

    @router.post("/checkpoint")
    def sign_checkpoint(who: Auth) -> dict[str, Any]:
        """Sign a checkpoint at the current tree size now."""
        return vault.audit.checkpoint(who, sign_now=True)

    @router.get("/proof/inclusion")
    def inclusion(who: Auth, seq: Annotated[int, Query(ge=1)],
                  size: Annotated[int, Query(ge=1)]) -> dict[str, Any]:
        """RFC 9162 inclusion proof of row ``seq`` in the tree of ``size`` rows."""
        return vault.audit.inclusion(who, seq, size)

    @router.get("/proof/consistency")
    def consistency(who: Auth, first: Annotated[int, Query(ge=1)],
                    second: Annotated[int, Query(ge=1)]) -> dict[str, Any]:
        """RFC 9162 consistency proof between tree sizes ``first`` and ``second``."""
        return vault.audit.consistency(who, first, second)

    return router


class WatchRequest(BaseModel):
    """``dry_run``: report, write nothing; ``full``: open every record of the tenant;
    ``batch``: records per transaction."""

    model_config = ConfigDict(extra="forbid")

    dry_run: StrictBool = False
    full: StrictBool = False
    batch: int = Field(default=200, ge=1, le=10_000)


class WatchReport(BaseModel):
    """What the run did: counts and memory ids, never a value (:class:`mnemovault.pii.
    watch.TenantReport`)."""

    tenant: str
    dry_run: bool
    full: bool
    run_id: str
    values: int
    values_done: int
    candidates: int
    opened: int
    rewritten: list[str]
    rewritten_count: int
    deferred: list[str]
    erased: int
    batches: int
    audit_seqs: list[int]
    ms: float


def pii_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/admin/pii", tags=["pii"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.post("/watch", response_model=WatchReport)
    def watch(who: Auth, request: Request, body: WatchRequest | None = None) -> Any:
        """Run the PII watch over the caller's tenant now (what the nightly schedule does):
        records stored before a value they hold became known are rewritten with its
        placeholder, re-embedded and re-indexed, one audited transaction per batch. A run of
        the same tenant under way answers 409."""
        b = body or WatchRequest()
        return vault.pii_watch.run(dry_run=b.dry_run, full=b.full, batch=b.batch, principal=who,
                               trigger="api",
                               request_id=str(request.state.request_id)).to_dict()

    return router


class LibrarianRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope: str | None = Field(default=None, description="only this scope (default: all)")
    dry_run: StrictBool = Field(default=False, description="plan and report, write nothing")


def librarian_router(vault: MemoryVault, principal: PrincipalDependency) -> APIRouter:
    router = APIRouter(prefix="/v1/admin/librarian", tags=["librarian"])
    Auth = Annotated[Principal, Depends(principal)]

    @router.post("/run", response_model=LibrarianResult)
    def run(body: LibrarianRun, who: Auth, request: Request) -> LibrarianResult:
        """One librarian run over the caller's tenant (:mod:`mnemovault.librarian`): merge
        near-duplicate episodes, distil facts with lineage to every source, fade facts
        nothing used. ``locked`` is true when another run of the tenant was under way
        (this one did nothing). Synchronous: it answers when the run is done."""
        return vault.librarian.run(scope=body.scope, dry_run=body.dry_run, principal=who,
                                   request_id=str(request.state.request_id))

    return router
