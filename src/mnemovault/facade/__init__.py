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

from mnemovault.auth import Principal
from mnemovault.runtime import Runtime


class Section:
    """Base of a facade section: the vault's runtime and its principal resolver."""

    def __init__(self, rt: Runtime, who: Callable[[Principal | None], Principal]) -> None:
        self.rt = rt
        self._who = who
