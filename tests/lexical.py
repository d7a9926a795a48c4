"""The keyed lexical terms in tests: what a query or a lexeme is as the database holds it
(:mod:`mnemovault.recall.terms`, migration 0014)."""

from __future__ import annotations

from typing import Any

import psycopg

from mnemovault.recall import terms
from mnemovault.store.db import tenant_of
from mnemovault.vault import MemoryVault


def key(vault: MemoryVault, conn: psycopg.Connection[Any]) -> bytes:
    """The term key of the connection's tenant (created on first use)."""
    k = terms.tenant_key(vault.rt.pii, conn, tenant_of(conn))
    assert k is not None
    return k


def q(vault: MemoryVault, conn: psycopg.Connection[Any], text: str) -> list[str]:
    """The query terms of ``text`` (what recall passes to store.search)."""
    return terms.query(key(vault, conn), text)


def lx(vault: MemoryVault, conn: psycopg.Connection[Any], lexeme: str) -> str:
    """The keyed hash of one lexeme (stemmed already, as ``to_tsvector`` gives it)."""
    return terms.hash_lexeme(key(vault, conn), lexeme)


def doc(vault: MemoryVault, conn: psycopg.Connection[Any], text: str) -> tuple[str, int]:
    """``memories.tsv`` and ``tsv_length`` of ``text`` (what a write path stores)."""
    return terms.document(key(vault, conn), text)
