"""Optional re-ranking of recall's fused head (:class:`mnemovault.recall.ranking.Reranker`).

None by default. A deployer who has a cross-encoder on disk sets
``MNEMOVAULT_RECALL_RERANKER`` to its directory (a sentence-transformers ``CrossEncoder``
model, e.g. a copy of ms-marco-MiniLM-L-6-v2): it is loaded once per process with
``local_files_only``, so nothing is ever downloaded, and a path that does not hold a
model fails at the first recall with :class:`~mnemovault.errors.ConfigError`. Code may
also install any object with a ``rerank(query, texts)`` method with :func:`install`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemovault.errors import ConfigError
from mnemovault.recall.ranking import Reranker

_lock = threading.Lock()
_installed: Reranker | None = None
_loaded: dict[str, Reranker] = {}


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` loaded from a local directory."""

    def __init__(self, path: str | Path) -> None:
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # the local extra is not installed
            raise ConfigError("recall_reranker: needs sentence-transformers "
                              "(pip install 'mnemovault[local]')") from exc
        p = Path(path)
        if not p.is_dir():
            raise ConfigError(f"recall_reranker: no model directory at {p}")
        try:
            self.model: Any = CrossEncoder(str(p), local_files_only=True)
        except Exception as exc:
            raise ConfigError(f"recall_reranker: cannot load a cross-encoder from {p}: "
                              f"{type(exc).__name__}") from None

    def rerank(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        return [float(x) for x in self.model.predict([(query, t) for t in texts])]


def install(reranker: Reranker | None) -> None:
    """Use ``reranker`` for every recall of this process (``None``: back to the setting)."""
    global _installed
    with _lock:
        _installed = reranker


def configured(settings: Any) -> Reranker | None:
    """The installed re-ranker, else the one ``settings.recall_reranker`` names (loaded
    once), else None."""
    if _installed is not None:
        return _installed
    path = getattr(settings, "recall_reranker", None)
    if not path:
        return None
    key = str(path)
    with _lock:
        if key not in _loaded:
            _loaded[key] = CrossEncoderReranker(key)
        return _loaded[key]
