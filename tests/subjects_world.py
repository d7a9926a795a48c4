"""Shared by the subject-rights tests: a tenant with two subjects in two scopes (email
subjects, key versions, a derived fact, an archived and a pending memory), and row counts
per table."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault


def tenant_tables(vault: MemoryVault) -> list[str]:
    """Every table with a ``tenant_id`` column (read as the owner)."""
    with owner_connection(vault.db.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND column_name = 'tenant_id' ORDER BY table_name").fetchall()
    return [r[0] for r in rows]


def counts(vault: MemoryVault, tenant: str) -> dict[str, int]:
    """Rows of ``tenant`` in every tenant table (as the owner: row-level security does
    not hide anything)."""
    out = {}
    with owner_connection(vault.db.url, autocommit=True) as conn:
        for t in tenant_tables(vault):
            row = conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = %s",
                               (tenant,)).fetchone()
            out[t] = int(row[0]) if row else 0
    return out


def memory_ids(vault: MemoryVault, tenant: str) -> set[uuid.UUID]:
    with vault.db.transaction(tenant) as conn:
        return {r["id"] for r in conn.execute("SELECT id FROM memories").fetchall()}


def audit_rows(vault: MemoryVault, tenant: str) -> list[bytes]:
    with vault.db.transaction(tenant) as conn:
        return [bytes(r["row_bytes"]) for r in
                conn.execute("SELECT row_bytes FROM audit_log ORDER BY seq").fetchall()]


@dataclass
class World:
    tenant: str
    ada: str  # the subject as written (an email address)
    bob: str
    ada_s: list[uuid.UUID] = field(default_factory=list)  # Ada's in scope s (+ derived)
    others: list[uuid.UUID] = field(default_factory=list)  # everything else
    marker: str = ""
    private: str = ""  # an email only Ada's memories in s use (shredded by her erase)


def build(vault: MemoryVault, tenant: str) -> World:
    """Ada (an email subject) and Bob in scopes ``s`` and ``t``: for Ada in ``s`` two
    versions of a key, an archived memory, a pending one, and a fact derived from one of
    hers (no subject of its own); Ada in ``t`` and Bob in ``s`` are not to be touched."""
    u = uuid.uuid4().hex[:8]
    who = vault.principal(tenant)
    w = World(tenant=tenant, ada=f"ada{u}@example.org", bob=f"bob{u}", marker=f"zq{u}",
              private=f"knee{u}@clinic.example")

    def mem(content: str, **kw: Any) -> uuid.UUID:
        return vault.remember(content, principal=who, **kw).id

    a1 = mem(f"{w.marker} Ada wrote from {w.ada} about her knee ({w.private})", scope="s",
             subject=w.ada)
    a2 = mem(f"{w.marker} Ada takes tea", scope="s", subject=w.ada, key="drink")
    a3 = mem(f"{w.marker} Ada takes coffee now", scope="s", subject=w.ada, key="drink")
    a4 = mem(f"{w.marker} Ada's old address note", scope="s", subject=w.ada)
    a5 = mem(f"{w.marker} Ada asked for a callback", scope="s", subject=w.ada)
    fact = mem(f"{w.marker} someone has a knee problem", scope="s", type="fact",
               derived_from=[a1])
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = %s", (a4,))
        conn.execute("UPDATE memories SET status = 'pending_review' WHERE id = %s", (a5,))
    w.ada_s = sorted([a1, a2, a3, a4, a5, fact])
    w.others = sorted([
        mem(f"Ada in another scope, {w.ada}", scope="t", subject=w.ada),
        mem(f"Bob ({w.bob}@example.net) likes chess", scope="s", subject=w.bob),
        mem("A note without a subject", scope="s"),
    ])
    return w
