"""An embedder that is made on its first :meth:`~LazyEmbedder.embed` call.

Opening the service needs the embedder's ``model`` and ``dimension`` (the database records
both and refuses any other), not its weights: loading all-MiniLM-L6-v2 imports torch and
sentence-transformers, which took 5-30 s a command, so every command paid it, including
those that never embed (``list``, ``vault list``, ``keys create``, ``audit export``).
:class:`LazyEmbedder` answers ``model`` and (when it is known up front) ``dimension`` at
once and builds the real embedder only when something is embedded: remember, import,
recall, chat, forget by query. When it is built, its model and dimension are checked
against what was assumed, so a wrong assumption fails loudly instead of storing vectors of
the wrong size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mnemovault.embed.base import Embedder
from mnemovault.errors import ConfigError

if TYPE_CHECKING:
    from mnemovault.embed.base import Vectors


class LazyEmbedder:
    """Stands in for the embedder ``factory`` makes, until it is needed.

    ``model`` must be the name the made embedder reports. ``dimension`` may be given when it
    is known without the model (the local default: 384; ``MNEMOVAULT_EMBED_DIMENSIONS`` for
    an OpenAI-compatible endpoint); without it, reading :attr:`dimension` makes the
    embedder (for a remote endpoint: one probe call). Thread-safe: the embedder is made
    once. Other public attributes (``batch_size``…) come from the made embedder.

    Raises (from :meth:`embed`, :meth:`load` or :attr:`dimension`):
        ConfigError: the made embedder reports another model or dimension than assumed,
            or cannot be made (a missing package).
        Unavailable: a remote endpoint could not be reached.
    """

    def __init__(self, factory: Callable[[], Embedder], *, model: str,
                 dimension: int | None = None) -> None:
        self.model = model
        self._factory = factory
        self._dimension = dimension
        self._inner: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the real embedder has been made (its model loaded)."""
        return self._inner is not None

    def load(self) -> Embedder:
        """Make the real embedder now (``serve`` does, so the first request is not slow);
        later calls return the same one."""
        with self._lock:
            if self._inner is None:
                inner = self._factory()
                if inner.model != self.model:
                    raise ConfigError(f"embedder: expected model {self.model!r}, "
                                      f"the embedder reports {inner.model!r}")
                real = inner.dimension
                if self._dimension is not None and real != self._dimension:
                    raise ConfigError(
                        f"embedder: model {self.model!r} gives dimension {real}, "
                        f"not the {self._dimension} assumed; set MNEMOVAULT_EMBED_DIMENSIONS "
                        "to match the model")
                self._dimension = real
                self._inner = inner
            return self._inner

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self.load()
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:  # nothing to embed: no reason to load a model
            import numpy as np

            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.load().embed(texts)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise ConfigError(f"embedder: model {self.model!r} returned vectors of shape "
                              f"{vectors.shape}, not (n, {self.dimension})")
        return vectors

    def __getattr__(self, name: str) -> Any:
        # only called for attributes this class lacks: delegate public ones (never dunders
        # or private names, so copy, pickle and hasattr probes do not load a model)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"LazyEmbedder(model={self.model!r}, dimension={self._dimension}, {state})"
