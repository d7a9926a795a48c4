"""Any OpenAI-compatible ``POST /v1/chat/completions`` endpoint, streamed (OpenAI, Ollama,
vLLM, llama.cpp server, LiteLLM…), over httpx.

Streaming follows the OpenAI Server-Sent Events shape: ``data: {json}`` lines whose
``choices[0].delta.content`` carries the next piece of text, ended by ``data: [DONE]``. A
server that ignores ``"stream": true`` and answers with one JSON body is accepted too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from mnemovault.errors import Unavailable
from mnemovault.llm.base import ChatPrompt


class OpenAIChat:
    """``MNEMOVAULT_CHAT_PROVIDER=openai``: ``base_url`` (e.g. ``http://localhost:11434/v1``
    for Ollama), ``model``, optional ``api_key`` (sent as a bearer token).

    Raises (from :meth:`stream`):
        Unavailable: connection failure, an HTTP error status or a malformed body. The
            message names the status, never the body (it may quote the prompt).
    """

    name = "openai"

    def __init__(self, *, model: str, base_url: str, api_key: str | None = None,
                 timeout_s: float = 60.0, temperature: float = 0.2,
                 max_tokens: int | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                    timeout=timeout_s, transport=transport)

    def _body(self, prompt: ChatPrompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": prompt.messages,
                                "stream": True, "temperature": self.temperature}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def stream(self, prompt: ChatPrompt) -> Iterator[str]:
        try:
            with self._client.stream("POST", "/chat/completions",
                                     json=self._body(prompt)) as resp:
                if resp.status_code >= 400:
                    raise Unavailable(f"chat model: the endpoint answered HTTP "
                                      f"{resp.status_code}")
                if resp.headers.get("content-type", "").startswith("application/json"):
                    resp.read()
                    yield _message_content(resp.json())
                    return
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    text = _delta_content(json.loads(data))
                    if text:
                        yield text
        except httpx.HTTPError as exc:
            raise Unavailable(f"chat model: endpoint call failed ({type(exc).__name__})"
                              ) from exc
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise Unavailable(f"chat model: malformed response ({type(exc).__name__})"
                              ) from exc

    def close(self) -> None:
        self._client.close()


def _delta_content(obj: dict[str, Any]) -> str:
    if "error" in obj:
        raise Unavailable("chat model: the endpoint reported an error mid-stream")
    choices = obj.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    return str(delta.get("content") or "")


def _message_content(obj: dict[str, Any]) -> str:
    return str(obj["choices"][0]["message"]["content"] or "")
