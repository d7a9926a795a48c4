"""Lineage: which memories a memory was derived from (``memory_lineage``).

A fact distilled from episodes carries information from each of them, so the forget path
removes it when any source goes (:mod:`mnemovault.governance.forget`). Sources must be in
the same tenant and scope as the derived memory, so a forget never reaches outside the
scope it was asked in.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from mnemovault.errors import ValidationError
from mnemovault.store import graph as store
from mnemovault.store.db import tenant_of


def check_sources(conn: psycopg.Connection[Any],
                  items: Sequence[tuple[str, Sequence[uuid.UUID]]]) -> None:
    """Check that every ``(scope, derived_from)`` names existing memories of that scope, and
    hold a key-share lock on them until commit (a concurrent forget then waits, and fails
    with a foreign-key conflict rather than leaving an orphan fact).

    Raises:
        ValidationError: ``items.<i>.derived_from.<j>`` names no memory of the scope
            (another tenant's or scope's memory is not told apart from a missing one).
    """
    wanted = sorted({s for _, ids in items for s in ids})
    if not wanted:
        return
    scope_of = store.lock_memory_scopes(conn, tenant_of(conn), wanted)
    for i, (scope, ids) in enumerate(items):
        for j, source in enumerate(ids):
            if scope_of.get(source) != scope:
                name = f"items.{i}.derived_from.{j}"
                raise ValidationError(f"{name}: no memory with this id in this scope",
                                      field=name)


def record(conn: psycopg.Connection[Any], tenant: str,
           pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Insert ``(memory_id, source_id)`` lineage rows (duplicates ignored)."""
    if not pairs:
        return
    store.insert_lineage(conn, tenant, pairs)


def sources(conn: psycopg.Connection[Any], memory_id: uuid.UUID) -> list[uuid.UUID]:
    """The memories ``memory_id`` was derived from, by id."""
    return store.lineage_sources(conn, tenant_of(conn), memory_id)


def delete(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]) -> int:
    """Remove the lineage rows of the derived memories ``ids`` (before they are deleted)."""
    return store.delete_lineage(conn, tenant_of(conn), ids)
