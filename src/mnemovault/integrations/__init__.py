"""Framework adapters: mnemovault as the memory of agent frameworks, each an optional
extra that pulls the framework's own package (issue 24).

* :mod:`.langgraph`: ``MnemovaultStore``, a LangGraph ``BaseStore`` (``mnemovault[langgraph]``);
* :mod:`.openai_agents`: ``MnemovaultSession``, an OpenAI Agents SDK session
  (``mnemovault[openai-agents]``);
* :mod:`.llamaindex`: ``MnemovaultMemoryBlock``, a LlamaIndex memory block
  (``mnemovault[llamaindex]``).

Each takes a :class:`~mnemovault.vault.MemoryVault` or an
:class:`~mnemovault.aio.AsyncMemoryVault` first and calls only its public methods, so every
write passes the one write path (capture guard, injection sanitiser, pseudonymisation,
audit row) and every read the visibility rule, with the principal it was given.
"""

from __future__ import annotations

from typing import Any

from mnemovault.aio import AsyncMemoryVault
from mnemovault.vault import MemoryVault

AnyVault = MemoryVault | AsyncMemoryVault


def sync_vault(vault: Any) -> MemoryVault:
    """The synchronous facade behind ``vault`` (either kind).

    Raises:
        TypeError: ``vault`` is neither.
    """
    if isinstance(vault, AsyncMemoryVault):
        return vault.sync
    if isinstance(vault, MemoryVault):
        return vault
    raise TypeError(f"vault: expected a MemoryVault or an AsyncMemoryVault, not "
                    f"{type(vault).__name__}")


def missing_extra(framework: str, extra: str, exc: ImportError) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(f"mnemovault.integrations: {framework} is not installed; install the "
                       f"extra: pip install 'mnemovault[{extra}]' ({exc})")
