"""Self-registration over HTTP (:mod:`mnemovault.agents`): ``POST /v1/agents/register``
``{"name"}`` needs no key and answers like ``POST /v1/keys`` (the token once), plus the
agent's ``quota``. Off by default (403 until ``ALLOW_SELF_REGISTRATION=true``); limited per
client address by the edge (``rate_limit_register``)."""

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from mnemovault.api.keys import KeyCreated
from mnemovault.vault import MemoryVault


class AgentRegister(BaseModel):
    """The agent's name (shown to the tenant's owners in ``keys list``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)


class AgentRegistered(KeyCreated):
    """The new key (as ``POST /v1/keys`` answers; ``scope`` is the agent's own) and
    ``quota``, the memories its scope may hold."""

    quota: int


def agents_router(vault: MemoryVault) -> APIRouter:
    router = APIRouter(tags=["keys"])

    @router.post("/v1/agents/register", status_code=201, response_model=AgentRegistered)
    def register(body: AgentRegister, request: Request) -> AgentRegistered:
        """Register an agent: a ``service`` key limited to a new scope of its own, in the
        self-registration tenant; no key needed. 403 while self-registration is off."""
        return AgentRegistered(**vault.register_agent(
            body.name, request_id=str(request.state.request_id)))

    return router
