"""An OpenAI-compatible ``POST /v1/embeddings`` endpoint (OpenAI, Ollama, vLLM, LiteLLM…)."""

from __future__ import annotations

import httpx
import numpy as np

from mnemovault.embed.base import Vectors, normalise
from mnemovault.errors import Unavailable


class OpenAIEmbedder:
    """Calls ``{base_url}/embeddings`` with ``{"model", "input": [...]}`` in batches.

    Raises:
        Unavailable: the endpoint failed or returned a malformed body.
    """

    def __init__(self, *, model: str, base_url: str, api_key: str | None = None,
                 dimensions: int | None = None, batch_size: int = 64,
                 timeout_s: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        self._dimensions = dimensions
        self.batch_size = batch_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                    timeout=timeout_s, transport=transport)

    @property
    def dimension(self) -> int:
        if self._dimensions is None:
            self._dimensions = int(self._call(["dimension probe"]).shape[1])
        return self._dimensions

    def _call(self, texts: list[str]) -> Vectors:
        body: dict[str, object] = {"model": self.model, "input": texts}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        try:
            resp = self._client.post("/embeddings", json=body)
            resp.raise_for_status()
            data = sorted(resp.json()["data"], key=lambda d: d["index"])
            arr = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise Unavailable(f"embedder: endpoint call failed ({type(exc).__name__})") from exc
        if arr.ndim != 2 or arr.shape[0] != len(texts):
            raise Unavailable("embedder: endpoint returned the wrong number of vectors")
        return normalise(arr)

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [self._call(texts[i : i + self.batch_size])
                 for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts, axis=0)
