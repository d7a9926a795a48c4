"""Chat providers (SPEC section 5): the built-in offline responder (default, no network) and
any OpenAI-compatible endpoint. Providers see placeholders only, never personal values."""

from __future__ import annotations

from mnemovault.config import Settings
from mnemovault.llm.base import ChatPrompt, ChatProvider, ContextRecord

__all__ = ["ChatPrompt", "ChatProvider", "ContextRecord", "make_provider"]


def make_provider(settings: Settings) -> ChatProvider:
    """The provider the settings name (``MNEMOVAULT_CHAT_PROVIDER``: offline or openai)."""
    if settings.chat_provider == "openai":
        from mnemovault.llm.openai import OpenAIChat

        return OpenAIChat(model=settings.chat_model, base_url=settings.chat_base_url,
                          api_key=settings.chat_api_key,
                          timeout_s=settings.chat_timeout_seconds,
                          temperature=settings.chat_temperature,
                          max_tokens=settings.chat_max_tokens)
    from mnemovault.llm.offline import OfflineResponder

    return OfflineResponder()
