"""``mnemovault.integrations.llamaindex.MnemovaultMemoryBlock`` against the real
``llama-index-core`` (extra ``mnemovault[llamaindex]``; skipped without it): the block's
``aput``/``aget`` directly, and inside LlamaIndex's own ``Memory``, whose short-term buffer
flushes ejected messages into the block (a whitespace tokenizer, so nothing is fetched)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core.memory",
                    reason="the llamaindex extra is not installed: pip install "
                           "'mnemovault[llamaindex]'")

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import BaseMemoryBlock, Memory

from mnemovault import AsyncMemoryVault, MemoryVault
from mnemovault.chat.context import RULE
from mnemovault.integrations.llamaindex import MnemovaultMemoryBlock


def test_block_puts_through_the_write_path_and_gets_a_fenced_pack(vault: MemoryVault,
                                                                  tenant: str) -> None:
    block = MnemovaultMemoryBlock(vault, scope="jo", subject="jo",
                                  principal=vault.principal(tenant), k=3)
    assert isinstance(block, BaseMemoryBlock)

    async def main() -> tuple[str, str]:
        await block.aput([ChatMessage(role="user", content="I'm Jo; I keep koi in a pond. "
                                                             "Mail jo.w@example.org"),
                          ChatMessage(role="assistant", content="Noted, Jo."),
                          ChatMessage(role="user", content="")])
        got = await block.aget([ChatMessage(role="user", content="what fish does Jo keep?")])
        return got, await block.aget([])

    pack, empty = asyncio.run(main())
    assert pack.startswith(RULE) and "koi" in pack and "<<<RECORD" in pack
    assert "jo.w@example.org" not in pack and "{email:p_" in pack
    assert empty == ""
    page = vault.list(scope="jo", principal=vault.principal(tenant))
    assert sorted(m.content.split(":")[0] for m in page.items) == ["assistant", "user"]
    assert all(m.provenance["source"] == "tool:llamaindex" for m in page.items)


def test_inside_llamaindex_memory(vault: MemoryVault, tenant: str) -> None:
    block = MnemovaultMemoryBlock(AsyncMemoryVault(vault), scope="kim",
                                  principal=vault.principal(tenant))
    memory = Memory.from_defaults(session_id="kim", token_limit=60, token_flush_size=20,
                                  chat_history_token_ratio=0.5, memory_blocks=[block],
                                  tokenizer_fn=str.split,
                                  async_database_uri="sqlite+aiosqlite:///:memory:")

    async def main() -> list[ChatMessage]:
        for i in range(12):
            await memory.aput(ChatMessage(
                role="user", content=f"message {i}: Kim's allotment has {i} rows of beans"))
        return await memory.aget()

    msgs = asyncio.run(main())
    flushed = vault.list(scope="kim", limit=100, principal=vault.principal(tenant)).items
    assert flushed, "the short-term memory flushed nothing into the block"
    assert any("message 0:" in m.content for m in flushed)
    text = "\n".join(str(m.content) for m in msgs)
    assert RULE in text and "<<<RECORD" in text  # the block's pack is in the prompt
