"""mnemovault: governed long-term memory for AI agents.

The public surface is :data:`__all__` (a test asserts it): the service facade
:class:`MemoryVault` (and :class:`AsyncMemoryVault`, the same methods awaited), its
settings and principal, its typed inputs and outputs, and the error hierarchy (drawn in
:mod:`mnemovault.errors`). Everything else is an implementation module: importable, but
not a promise. Names load on first use, so ``import mnemovault`` stays light (no
database driver, no model).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from mnemovault.aio import AsyncMemoryVault
    from mnemovault.auth import Principal
    from mnemovault.chat.models import ChatEvent, ChatResult, ChatStream
    from mnemovault.config import Settings
    from mnemovault.errors import (
        ConfigError,
        Conflict,
        Forbidden,
        MnemoError,
        NotFound,
        Refused,
        Unauthenticated,
        Unavailable,
        ValidationError,
    )
    from mnemovault.models import (
        Entity,
        ForgetResult,
        Hit,
        Memory,
        MemoryInput,
        Page,
        PinResult,
        Provenance,
        RecallFilters,
        Receipt,
        RetentionResult,
    )
    from mnemovault.vault import MemoryVault

_WHERE = {
    "MemoryVault": "mnemovault.vault",
    "AsyncMemoryVault": "mnemovault.aio",
    "Settings": "mnemovault.config",
    "Principal": "mnemovault.auth",
    **dict.fromkeys(["Entity", "ForgetResult", "Hit", "Memory", "MemoryInput", "Page",
                     "PinResult", "Provenance", "RecallFilters", "Receipt",
                     "RetentionResult"], "mnemovault.models"),
    **dict.fromkeys(["ChatEvent", "ChatResult", "ChatStream"], "mnemovault.chat.models"),
    **dict.fromkeys(["MnemoError", "ValidationError", "NotFound", "Unauthenticated",
                     "Forbidden", "Conflict", "Refused", "Unavailable", "ConfigError"],
                    "mnemovault.errors"),
}

__all__ = [
    "AsyncMemoryVault",
    "ChatEvent",
    "ChatResult",
    "ChatStream",
    "ConfigError",
    "Conflict",
    "Entity",
    "Forbidden",
    "ForgetResult",
    "Hit",
    "Memory",
    "MemoryInput",
    "MemoryVault",
    "MnemoError",
    "NotFound",
    "Page",
    "PinResult",
    "Principal",
    "Provenance",
    "RecallFilters",
    "Receipt",
    "Refused",
    "RetentionResult",
    "Settings",
    "Unauthenticated",
    "Unavailable",
    "ValidationError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mnemovault' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
