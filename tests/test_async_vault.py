"""``AsyncMemoryVault`` (issue 24 item 1): every public method and section method of
:class:`MemoryVault` is there as a coroutine, and the awaited calls do what the
synchronous facade does (they are its calls, in worker threads), concurrently."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import pytest

import mnemovault
from mnemovault import AsyncMemoryVault, MemoryVault
from mnemovault.aio import AsyncChatStream
from mnemovault.facade import part

NOT_COROUTINES = {"principal": "a local principal, no I/O", "close": "a coroutine (lifecycle)",
                  "open": "a coroutine classmethod"}


def _public_methods() -> tuple[list[str], dict[str, list[str]]]:
    methods, sections = [], {}
    for n in dir(MemoryVault):
        attr = inspect.getattr_static(MemoryVault, n)
        if n.startswith("_") or isinstance(attr, part):
            continue
        if hasattr(attr, "cls"):  # a facade section
            sections[n] = [m for m in dir(attr.cls) if not m.startswith("_")]
        else:
            methods.append(n)
    return methods, sections


def test_every_public_method_of_memory_vault_is_async(vault: MemoryVault) -> None:
    methods, sections = _public_methods()
    assert {"remember", "recall", "forget", "wake", "timeline", "chat", "chat_stream"} <= set(
        methods)
    assert set(sections) == {"lexical", "librarian", "pii_watch", "procedures", "review",
                             "tenants",
                             "subjects"}
    mv = AsyncMemoryVault(vault)
    missing = [n for n in methods if not hasattr(mv, n)]
    assert not missing, f"AsyncMemoryVault lacks MemoryVault's {missing}"
    not_async = [n for n in methods if n not in ("principal",)
                 and not inspect.iscoroutinefunction(getattr(mv, n))]
    assert not not_async, f"not coroutines: {not_async}"
    for name, names in sections.items():
        sec = getattr(mv, name)
        lacking = [m for m in names if not hasattr(sec, m)]
        assert not lacking, f"mv.{name} lacks {lacking}"
        callables = [m for m in names if callable(getattr(getattr(vault, name), m))]
        assert all(inspect.iscoroutinefunction(getattr(sec, m)) for m in callables), name
    assert "AsyncMemoryVault" in mnemovault.__all__


def test_round_trip_concurrently(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    mv = AsyncMemoryVault(vault)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        receipts: list[Any] = []

        async def write(i: int) -> None:
            receipts.append(await mv.remember(
                f"Note {i}: Lin (lin{i}@example.org) waters plant number {i}.",
                scope="lin", subject="lin", principal=who))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(write, i)
        out["receipts"] = receipts
        hits: list[Any] = []

        async def read() -> None:
            hits.append(await mv.recall("which plant does Lin water?", scope="lin", k=3,
                                        principal=who))

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(read)
        out["hits"] = hits
        out["timeline"] = await mv.timeline(scope="lin", limit=100, principal=who)
        out["wake"] = await mv.wake(scope="lin", subject="lin", principal=who)
        out["forget"] = await mv.forget([receipts[0].id], principal=who)
        out["page"] = await mv.subjects.list("lin", scope="lin", limit=100, principal=who)
        stream = await mv.chat_stream("what does Lin water?", scope="lin", store=False,
                                      principal=who)
        out["stream"] = stream
        out["events"] = [e async for e in stream]
        out["erase"] = await mv.subjects.erase("lin", scope="lin", principal=who)
        out["after"] = await mv.recall("plant", scope="lin", k=3, principal=who)
        out["audit"] = b"".join([c async for c in mv.audit.export(who)])
        return out

    out = anyio.run(main)
    assert len({r.id for r in out["receipts"]}) == 16
    assert all(r.placeholders for r in out["receipts"])  # the write path pseudonymised
    assert all(len(h) == 3 for h in out["hits"])
    assert len(out["timeline"].items) == 16
    assert out["wake"].records
    assert out["forget"].deleted == [out["receipts"][0].id]
    assert len(out["page"].items) == 15
    assert isinstance(out["stream"], AsyncChatStream) and out["events"][0].event == "meta"
    assert out["events"][-1].event == "done"
    assert len(out["erase"].deleted) == 15
    assert vault.subjects.verify_receipt(out["erase"].receipt)["tenant"] == tenant
    assert out["after"] == []
    assert out["audit"].count(b"\n") >= 3  # one REMEMBER row each ... FORGET, ERASE


def test_errors_are_the_facades(vault: MemoryVault, tenant: str) -> None:
    mv = AsyncMemoryVault(vault)
    member = vault.authenticate(vault.create_key(tenant, "member")[0])

    async def main() -> None:
        with pytest.raises(mnemovault.Forbidden, match="subject:erase"):
            await mv.subjects.erase("x", scope="x", principal=member)
        with pytest.raises(mnemovault.ValidationError):
            await mv.recall("", scope="x", principal=member)

    anyio.run(main)


def test_open_and_close_as_a_context_manager(settings: Any, vault: MemoryVault) -> None:
    async def main() -> dict[str, Any]:
        async with await AsyncMemoryVault.open(settings, max_threads=2) as mv:
            assert mv.limiter.total_tokens == 2
            return await mv.health()

    assert anyio.run(main)["status"] == "ok"
