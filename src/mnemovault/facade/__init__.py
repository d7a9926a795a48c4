"""Sections of the :class:`~mnemovault.vault.MemoryVault` facade.

A capability with several operations gets a section, reached as an attribute of the
vault, so ``vault.py`` stays a thin table of contents::

    mv.subjects.erase("alice", scope="support")      # mnemovault.facade.subjects
    mv.tenants.delete("acme", confirm="DELETE-acme") # mnemovault.facade.tenants

A section is as thin as the facade: each method settles who is calling (``self._who``)
and delegates to the capability module in a line or two. No SQL, no rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

from mnemovault.auth import Principal
from mnemovault.runtime import Runtime


class Section:
    """Base of a facade section: the vault's runtime and its principal resolver."""

    def __init__(self, rt: Runtime, who: Callable[[Principal | None], Principal]) -> None:
        self.rt = rt
        self._who = who


class Closing:
    """The vault's ``close`` and context manager: its runtime (pool, embedded server, key
    store) is closed with it."""

    rt: Runtime

    def close(self) -> None:
        self.rt.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


S = TypeVar("S", bound=Section)


class section(Generic[S]):
    """A facade attribute that is a section: ``subjects = section(SubjectsSection)`` makes
    ``mv.subjects`` a :class:`Section` bound to the vault's runtime and principal."""

    def __init__(self, cls: type[S]) -> None:
        self.cls = cls

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> section[S]: ...
    @overload
    def __get__(self, obj: Any, objtype: type | None = None) -> S: ...

    def __get__(self, obj: Any, objtype: type | None = None) -> S | section[S]:
        if obj is None:  # on the class: the field itself (help(), introspection)
            return self
        return self.cls(obj.rt, obj._who)


T = TypeVar("T")


class part(Generic[T]):
    """A facade attribute that reads and writes the runtime's field of the same name
    (``MemoryVault.db``, ``.embedder``, ``.settings``...: a benchmark swaps the embedder or
    the settings, a test the chat provider)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> T:
        return cast(T, getattr(obj.rt, self.name))

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj.rt, self.name, value)
