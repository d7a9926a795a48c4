"""``AsyncMemoryVault``: :class:`~mnemovault.vault.MemoryVault` for asyncio and trio code.

The same public methods and sections, each a coroutine that runs the synchronous facade
method in a worker thread (:func:`anyio.to_thread.run_sync`) under one bounded
:class:`anyio.CapacityLimiter` per vault, so there is exactly one implementation of every
rule (the capability modules the synchronous facade calls)::

    async with await AsyncMemoryVault.open() as mv:
        await mv.remember("Alice prefers tea", scope="alice")
        hits = await mv.recall("what does Alice drink?", scope="alice", k=3)
        er = await mv.subjects.erase("alice", scope="alice")      # sections too
        async for event in await mv.chat_stream("hi", scope="alice"):
            ...

Why threads rather than an async store underneath (issue 24; ``bench/async_vault.py``
measures it): every operation is a few short SQL statements around CPU work that holds
the GIL either way (embedding, pseudonymisation, hashing the audit row), and the
connection pool already bounds the database side. An async driver would save the thread
hop (tens of microseconds) against operations of milliseconds, and would need a second
copy of every store function and transaction. The limiter defaults to the pool's size
(``settings.pool_max_size``): more threads than connections would only queue on the pool.

Wrap an open vault (``AsyncMemoryVault(vault)``) or open one (``await
AsyncMemoryVault.open(...)``, the arguments of :meth:`MemoryVault.open`). ``mv.sync`` is
the underlying :class:`MemoryVault` (for code that is synchronous anyway, and for the
framework adapters, which accept either).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast

import anyio
import anyio.to_thread

from mnemovault.chat.models import ChatEvent, ChatResult, ChatStream
from mnemovault.config import Settings
from mnemovault.vault import MemoryVault

P = ParamSpec("P")
R = TypeVar("R")

SECTIONS = ("lexical", "librarian", "pii_watch", "procedures", "review", "tenants",
            "subjects")
"""The facade's sections, reached as ``mv.<name>.<method>`` (each method a coroutine)."""


class _Bridge(Generic[P, R]):
    """An async facade method: ``await mv.name(...)`` runs ``MemoryVault.name`` in a
    worker thread under the vault's limiter (the signature and docstring are its)."""

    def __init__(self, fn: Callable[Concatenate[MemoryVault, P], R]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: AsyncMemoryVault | None,
                objtype: type | None = None) -> Callable[P, Awaitable[R]]:
        if obj is None:
            return cast(Callable[P, Awaitable[R]], self)
        bound = cast(Callable[P, R], getattr(obj.sync, self.name))

        @functools.wraps(bound)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await obj.run(bound, *args, **kwargs)

        return call


class AsyncSection:
    """A facade section (``mv.subjects``...) whose methods are coroutines."""

    def __init__(self, vault: AsyncMemoryVault, name: str) -> None:
        self._vault, self._name = vault, name
        self._section = getattr(vault.sync, name)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._section, name)
        if name.startswith("_") or not callable(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._vault.run(attr, *args, **kwargs)

        return call

    def __dir__(self) -> list[str]:
        return [n for n in dir(self._section) if not n.startswith("_")]


class AsyncChatStream:
    """:class:`~mnemovault.chat.models.ChatStream` for ``async for``: :attr:`meta` is known
    (the command handled, the records retrieved); each event is produced in the vault's
    worker threads (the model call and the storing of the exchange included)."""

    def __init__(self, vault: AsyncMemoryVault, stream: ChatStream) -> None:
        self._vault, self._stream = vault, stream
        self.meta = stream.meta

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        events: Iterator[ChatEvent] = iter(self._stream)
        done = object()
        while True:
            e = await self._vault.run(next, events, done)
            if e is done:
                return
            yield cast(ChatEvent, e)

    async def collect(self) -> ChatResult:
        """The turn run to the end, whole (:meth:`ChatStream.collect`)."""
        return await self._vault.run(self._stream.collect)


class AsyncMemoryVault:
    """The async facade; see the module docstring. Every method of
    :class:`~mnemovault.vault.MemoryVault` is here with the same arguments, awaited."""

    def __init__(self, vault: MemoryVault, *, max_threads: int | None = None) -> None:
        self.sync = vault
        self.limiter = anyio.CapacityLimiter(max_threads or vault.settings.pool_max_size)
        for name in SECTIONS:
            setattr(self, name, AsyncSection(self, name))

    lexical: AsyncSection
    pii_watch: AsyncSection
    librarian: AsyncSection
    procedures: AsyncSection
    review: AsyncSection
    tenants: AsyncSection
    subjects: AsyncSection

    async def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` in a worker thread under this vault's limiter."""
        return await anyio.to_thread.run_sync(
            functools.partial(fn, *args, **kwargs), limiter=self.limiter)

    # -- lifecycle ------------------------------------------------------------------------
    @classmethod
    async def open(cls, settings: Settings | None = None, *, max_threads: int | None = None,
                   **kwargs: Any) -> AsyncMemoryVault:
        """:meth:`MemoryVault.open` in a worker thread (it may start the embedded database
        and load the embedder)."""
        vault = await anyio.to_thread.run_sync(
            functools.partial(MemoryVault.open, settings, **kwargs))
        return cls(vault, max_threads=max_threads)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.sync.close)

    async def __aenter__(self) -> AsyncMemoryVault:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def settings(self) -> Settings:
        return self.sync.settings

    def principal(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`MemoryVault.principal` (no I/O: not a coroutine)."""
        return self.sync.principal(*args, **kwargs)

    # -- chat ---------------------------------------------------------------------------
    async def chat_stream(self, message: str, **kwargs: Any) -> AsyncChatStream:
        """:meth:`MemoryVault.chat_stream`: everything up to the model runs now (bad input
        and missing permissions raise here); ``async for`` the result for its events."""
        stream = await self.run(self.sync.chat_stream, message, **kwargs)
        return AsyncChatStream(self, stream)

    # -- every other method: the synchronous facade's, in a worker thread ----------------
    ensure_tenant = _Bridge(MemoryVault.ensure_tenant)
    create_key = _Bridge(MemoryVault.create_key)
    authenticate = _Bridge(MemoryVault.authenticate)
    list_keys = _Bridge(MemoryVault.list_keys)
    get_key = _Bridge(MemoryVault.get_key)
    revoke_key = _Bridge(MemoryVault.revoke_key)
    register_agent = _Bridge(MemoryVault.register_agent)
    remember = _Bridge(MemoryVault.remember)
    remember_many = _Bridge(MemoryVault.remember_many)
    recall = _Bridge(MemoryVault.recall)
    get = _Bridge(MemoryVault.get)
    list = _Bridge(MemoryVault.list)
    stored_source_ids = _Bridge(MemoryVault.stored_source_ids)
    wake = _Bridge(MemoryVault.wake)
    timeline = _Bridge(MemoryVault.timeline)
    forget_preview = _Bridge(MemoryVault.forget_preview)
    forget = _Bridge(MemoryVault.forget)
    delete = _Bridge(MemoryVault.delete)
    pin = _Bridge(MemoryVault.pin)
    unpin = _Bridge(MemoryVault.unpin)
    run_retention = _Bridge(MemoryVault.run_retention)
    run_retention_all = _Bridge(MemoryVault.run_retention_all)
    chat = _Bridge(MemoryVault.chat)
    redact = _Bridge(MemoryVault.redact)
    placeholder_outputs = _Bridge(MemoryVault.placeholder_outputs)
    vault_entries = _Bridge(MemoryVault.vault_entries)
    vault_entry = _Bridge(MemoryVault.vault_entry)
    shred = _Bridge(MemoryVault.shred)
    vault_export = _Bridge(MemoryVault.vault_export)
    rotate_kek = _Bridge(MemoryVault.rotate_kek)
    health = _Bridge(MemoryVault.health)

    @property
    def audit(self) -> AsyncAudit:
        """The audit service (``mv.audit``), each method a coroutine."""
        return AsyncAudit(self)


class AsyncAudit:
    """``mv.audit`` of the async facade: the audit service's methods as coroutines (the
    principal first, as on :class:`~mnemovault.audit.service.AuditService`); ``export``
    yields the JSON Lines chunks asynchronously."""

    def __init__(self, vault: AsyncMemoryVault) -> None:
        self._vault = vault

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._vault.sync.audit, name)
        if name.startswith("_") or not callable(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._vault.run(attr, *args, **kwargs)

        return call

    async def export(self, *args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        chunks = await self._vault.run(self._vault.sync.audit.export, *args, **kwargs)
        done = object()
        while True:
            c = await self._vault.run(next, chunks, done)
            if c is done:
                return
            yield c


__all__ = ["AsyncAudit", "AsyncChatStream", "AsyncMemoryVault", "AsyncSection"]
