"""mnemovault: governed long-term memory for AI agents."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemovault.vault import MemoryVault

__all__ = ["MemoryVault", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "MemoryVault":
        from mnemovault.vault import MemoryVault

        return MemoryVault
    raise AttributeError(name)
