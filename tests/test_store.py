"""Schema, migrations, row-level security and the embedder identity check."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from mnemovault.config import Settings
from mnemovault.errors import ConfigError
from mnemovault.store.db import Database
from mnemovault.vault import MemoryVault
from tests.dbcheck import refused_by_database

TENANT_TABLES = ("tenants", "api_keys", "memories", "outbox", "audit_heads", "audit_log",
                 "pii_tenant_keys", "pii_values", "pii_deks", "audit_nodes",
                 "audit_checkpoints", "memory_lineage", "graph_nodes", "graph_node_support",
                 "graph_edges", "graph_edge_support")
HEAD = "0003_lineage"


def test_migrations_from_empty_reach_head(vault: MemoryVault) -> None:
    db = Database(vault.db.url)
    assert db.current_revision() == HEAD
    with psycopg.connect(vault.db.url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert set(TENANT_TABLES) <= tables
        for table in TENANT_TABLES:
            (rls,) = conn.execute(
                "SELECT relrowsecurity FROM pg_class WHERE relname = %s", (table,)).fetchone()
            assert rls, f"row-level security is off on {table}"
        exts = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        assert exts <= {"plpgsql", "vector"}
        # tenant_id leads every B-tree index of every tenant table
        rows = conn.execute(
            "SELECT c.relname, i.indexrelid::regclass::text, a.attname "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] "
            "WHERE c.relname = ANY(%s) AND am.amname = 'btree'", (list(TENANT_TABLES),)
        ).fetchall()
        assert rows
        for table, index, first in rows:
            assert first == "tenant_id", f"{index} on {table} starts with {first}"


def test_second_upgrade_is_a_no_op(vault: MemoryVault) -> None:
    before, after = Database(vault.db.url).upgrade(384)
    assert before == after == HEAD


def test_app_role_is_not_privileged(vault: MemoryVault) -> None:
    with vault.db.unscoped() as conn:
        row = conn.execute(
            "SELECT current_user AS who, r.rolsuper, r.rolbypassrls FROM pg_roles r "
            "WHERE r.rolname = current_user").fetchone()
    assert row["who"] == "mnemovault_app"
    assert row["rolsuper"] is False and row["rolbypassrls"] is False


def test_app_role_without_tenant_sees_no_rows(vault: MemoryVault, tenant: str) -> None:
    vault.remember("a row that exists", scope="s", principal=vault.principal(tenant))
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories").fetchone()["n"] == 1
    with vault.db.unscoped() as conn:
        for table in TENANT_TABLES:
            n = conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
            assert n == 0, f"{table} leaks {n} rows without a tenant"
    # the owner sees them, so the zero above is row-level security, not an empty table
    with psycopg.connect(vault.db.url) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] >= 1


def test_app_role_cannot_write_into_another_tenant(vault: MemoryVault, tenant: str) -> None:
    other = tenant + "-x"
    vault.ensure_tenant(other)
    with refused_by_database(psycopg.errors.InsufficientPrivilege), \
            vault.db.transaction(tenant) as conn:
        conn.execute("INSERT INTO outbox (tenant_id, kind) VALUES (%s, 'X')", (other,))


def test_audit_log_is_append_only_for_the_app(vault: MemoryVault, tenant: str) -> None:
    vault.remember("audited", scope="s", principal=vault.principal(tenant))
    with refused_by_database(psycopg.errors.InsufficientPrivilege), \
            vault.db.transaction(tenant) as conn:
        conn.execute("DELETE FROM audit_log")
    with refused_by_database(psycopg.errors.InsufficientPrivilege), \
            vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE audit_log SET operation = 'X'")


class _OtherEmbedder:
    model = "acme/other-embedder"

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 384), dtype=np.float32) / np.sqrt(384)


def test_opening_with_another_embedder_is_refused(settings: Settings,
                                                  vault: MemoryVault) -> None:
    with pytest.raises(ConfigError) as err:
        MemoryVault.open(settings, embedder=_OtherEmbedder())
    msg = str(err.value)
    assert "sentence-transformers/all-MiniLM-L6-v2" in msg
    assert "acme/other-embedder" in msg
