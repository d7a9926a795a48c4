"""The HTTP API (FastAPI). Interfaces parse and authorise, then call :class:`MemoryVault`."""

from mnemovault.api.app import create_app

__all__ = ["create_app"]
