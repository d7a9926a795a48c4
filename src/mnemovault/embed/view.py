"""An embedder that reads a *view* of each text: the texts pass through a function first.

The runtime wraps every embedder in one (:class:`mnemovault.runtime.Runtime`), so whatever
asks for vectors (memories, the recall query, rectify, procedures) embeds the same view of
its text and none can forget to. The function is the caller's (the runtime's: each
placeholder cut to its kind word, :func:`mnemovault.pii.vault.embedding_view`); this port
knows nothing of what it does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mnemovault.embed.base import Embedder

if TYPE_CHECKING:
    from mnemovault.embed.base import Vectors


class ViewEmbedder:
    """Embeds ``transform(text)`` for each text with ``inner``. ``view`` names the view (it
    is recorded in the database next to the model). ``model`` and ``dimension`` are the
    inner embedder's; other public attributes (``load``, ``loaded``, ``batch_size``…) are
    delegated to it."""

    def __init__(self, inner: Embedder, view: str,
                 transform: Callable[[str], str] | None = None) -> None:
        self.inner = inner
        self.model = inner.model
        self.view = view
        self._transform = transform

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def view_of(self, text: str) -> str:
        """What :meth:`embed` hands the inner embedder for ``text``."""
        return text if self._transform is None else self._transform(text)

    def embed(self, texts: list[str]) -> Vectors:
        if self._transform is not None:
            texts = [self._transform(t) for t in texts]
        return self.inner.embed(texts)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never dunders or private names (copy, pickle, probes)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"ViewEmbedder({self.inner!r}, view={self.view!r})"
