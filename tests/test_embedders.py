"""Embedders: the local default and the OpenAI-compatible client."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from mnemovault.embed.openai import OpenAIEmbedder
from mnemovault.errors import Unavailable
from mnemovault.vault import MemoryVault


def test_local_embedder_gives_unit_vectors_that_track_meaning(vault: MemoryVault) -> None:
    e = vault.embedder
    assert e.model == "sentence-transformers/all-MiniLM-L6-v2" and e.dimension == 384
    v = e.embed(["a cat sat on the mat", "a kitten rested on the rug", "quarterly tax filing"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def _endpoint(seen: list[dict]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"path": request.url.path, "auth": request.headers.get("authorization"),
                     **body})
        if body["model"] == "broken":
            return httpx.Response(500, json={"error": "boom"})
        data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                for i, t in reversed(list(enumerate(body["input"])))]
        return httpx.Response(200, json={"data": data, "model": body["model"]})

    return httpx.MockTransport(handler)


def test_openai_compatible_embedder_batches_orders_and_normalises() -> None:
    seen: list[dict] = []
    e = OpenAIEmbedder(model="text-embedding-3-small", base_url="http://llm.local/v1",
                       api_key="sk-test", batch_size=2, transport=_endpoint(seen))
    v = e.embed(["a", "bbb", "cc"])
    assert v.shape == (3, 3)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0)
    assert v[1][0] > v[2][0] > v[0][0]  # order restored from "index" despite reversed data
    assert [len(s["input"]) for s in seen] == [2, 1]
    assert seen[0]["path"] == "/v1/embeddings" and seen[0]["auth"] == "Bearer sk-test"
    assert e.dimension == 3


def test_openai_embedder_failure_is_unavailable() -> None:
    e = OpenAIEmbedder(model="broken", base_url="http://llm.local/v1", transport=_endpoint([]))
    with pytest.raises(Unavailable):
        e.embed(["x"])


def test_the_traced_local_model_gives_the_eager_vectors() -> None:
    """Issue 29: from its TRACE_AFTER_CALLS-th call the local embedder runs the model traced
    (no GIL between operations); its vectors are the eager model's, for one text, a
    batch of mixed lengths and a text longer than the model reads."""
    from mnemovault.embed import local

    eager = local.LocalEmbedder(trace=False)
    traced = local.LocalEmbedder(trace=True)
    texts = ["hello", "Ada Lovelace wrote the first program for the engine",
             "word " * 400, "x"]
    for _ in range(local.TRACE_AFTER_CALLS - 1):
        traced.embed(["warm"])
    assert traced._traced is None
    for sample in (texts, texts[:1], texts[2:3]):
        got, want = traced.embed(sample), eager.embed(sample)
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.allclose(got, want, atol=1e-5)
    assert traced._traced  # in use (not False: tracing failed or differed)
    assert eager._traced is None
