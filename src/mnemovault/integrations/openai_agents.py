"""An OpenAI Agents SDK session over mnemovault: ``MnemovaultSession(vault, session_id,
...)`` implements the SDK's ``Session`` protocol (extra ``mnemovault[openai-agents]``)::

    from agents import Agent, Runner
    from mnemovault import MemoryVault
    from mnemovault.integrations.openai_agents import MnemovaultSession

    session = MnemovaultSession(MemoryVault.open(), "conv-42", subject="ada")
    await Runner.run(Agent(name="helper"), "Hi, I'm Ada", session=session)
    await session.clear_session()        # a governed erase; the signed receipt:
    session.last_receipt                 # verify with `mnemovault receipt verify`

How a session is kept. Its scope is ``scope_of(session_id)`` (a keyword argument; default
:func:`default_scope`: ``"agents-session:<session_id>"``), in the tenant of ``principal``
(default: the local operator), optionally about one ``subject``. Each item is one memory
(type ``episode``) whose content is the item as canonical JSON, written by
:meth:`MemoryVault.remember_many` (``add_items`` is one transaction and one audit row): the
capture guard, the injection sanitiser (items are replayed to a model, so they are treated
as tool-supplied text, like the MCP ``remember`` tool's) and pseudonymisation (an e-mail
address in a message comes back as its placeholder, ``{email:p_0123456789}``). Items are
read back oldest first (:meth:`MemoryVault.list`; ``get_items(limit)`` the latest
``limit``). ``pop_item`` is :meth:`MemoryVault.forget` of the newest item.

``clear_session`` is :meth:`SubjectsSection.erase_scope` of the session's scope: every item,
everything derived from them, and the personal values only they used, crypto-shredded, in
one transaction with its audit row and an entry in the erasure ledger. The signed erasure
receipt is kept as :attr:`MnemovaultSession.last_receipt` (the receipt's JSON form, a dict;
``mnemovault receipt verify`` checks it offline).

One person can be shredded alone. The SDK's own ``EncryptedSession`` derives each
session's key from one master key, so destroying one user's data means destroying that
master key and every session with it. Here each personal value has its own data key in the
vault: clearing one session destroys the keys of the values only that session used, and the
other sessions (other users) still read theirs (``tests/test_integration_openai_agents.py``
shows it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from mnemovault.aio import AsyncMemoryVault
from mnemovault.auth import Principal
from mnemovault.integrations import AnyVault, missing_extra, sync_vault
from mnemovault.models import Memory

try:
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise missing_extra("openai-agents", "openai-agents", exc) from exc

SOURCE = "tool:openai-agents"
"""The provenance ``source`` of the items (a tool source: sanitised as agent-supplied)."""


def default_scope(session_id: str) -> str:
    """``"agents-session:<session_id>"``."""
    return f"agents-session:{session_id}"


class MnemovaultSession(SessionABC):
    """The SDK's ``Session`` over mnemovault; see the module docstring."""

    def __init__(self, vault: AnyVault, session_id: str, *, subject: str | None = None,
                 principal: Principal | None = None,
                 scope_of: Callable[[str], str] = default_scope,
                 session_settings: SessionSettings | None = None) -> None:
        self.vault = sync_vault(vault)
        self._async = vault if isinstance(vault, AsyncMemoryVault) else None
        self.session_id = session_id
        self.session_settings = session_settings
        self.scope = scope_of(session_id)
        self.subject = subject
        self.principal = principal or self.vault.principal()
        self.last_receipt: dict[str, Any] | None = None
        """The signed receipt of the last :meth:`clear_session` (None before one)."""

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._async is not None:
            return await self._async.run(fn, *args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _memories(self) -> list[Memory]:
        out: list[Memory] = []
        cursor = None
        while True:
            page = self.vault.list(scope=self.scope, subject=self.subject, limit=100,
                                   cursor=cursor, principal=self.principal)
            out += [m for m in page.items if m.provenance.get("source") == SOURCE
                    and m.status == "active"]
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    @staticmethod
    def _item(m: Memory) -> Any:
        try:
            return json.loads(m.content)
        except ValueError:  # the sanitiser rewrote it: the text as stored
            return {"role": "user", "content": m.content}

    async def get_items(self, limit: int | None = None) -> list[Any]:
        n = resolve_session_limit(limit, self.session_settings)
        items = [self._item(m) for m in await self._run(self._memories)]
        return items if n is None else (items[-n:] if n > 0 else [])

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        batch = [{"content": json.dumps(i, ensure_ascii=False, sort_keys=True),
                  "scope": self.scope, "subject": self.subject, "type": "episode",
                  "provenance": {"source": SOURCE, "run_id": self.session_id}}
                 for i in items]
        await self._run(self.vault.remember_many, batch, principal=self.principal)

    async def pop_item(self) -> Any | None:
        def pop() -> Any | None:
            ms = self._memories()
            if not ms:
                return None
            self.vault.forget([ms[-1].id], principal=self.principal,
                              trigger="openai-agents")
            return self._item(ms[-1])

        return await self._run(pop)

    async def clear_session(self) -> None:
        er = await self._run(self.vault.subjects.erase_scope, self.scope,
                             principal=self.principal, trigger="openai-agents")
        self.last_receipt = er.receipt


__all__ = ["MnemovaultSession", "default_scope"]
