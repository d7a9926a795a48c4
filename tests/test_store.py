"""Schema, migrations, row-level security and the embedder identity check."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from mnemovault.config import Settings
from mnemovault.errors import ConfigError, Unavailable
from mnemovault.store.db import Database, app_login_url
from mnemovault.vault import MemoryVault
from tests.dbcheck import refused_by_database

TENANT_TABLES = ("tenants", "api_keys", "memories", "outbox", "audit_heads", "audit_log",
                 "pii_tenant_keys", "pii_values", "pii_deks", "audit_nodes",
                 "audit_checkpoints", "memory_lineage", "graph_nodes", "graph_node_support",
                 "graph_edges", "graph_edge_support")
HEAD = "0021_conversation_order"


def test_migrations_from_empty_reach_head(vault: MemoryVault) -> None:
    db = Database(vault.db.url)
    assert db.current_revision() == HEAD
    with psycopg.connect(vault.db.url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert set(TENANT_TABLES) <= tables
        # every table with a tenant_id column, whoever added it, is a tenant table
        with_tenant = {r[0] for r in conn.execute(
            "SELECT c.table_name FROM information_schema.columns c "
            "JOIN information_schema.tables t USING (table_schema, table_name) "
            "WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id' "
            "AND t.table_type = 'BASE TABLE'")}
        assert set(TENANT_TABLES) <= with_tenant
        for table in sorted(with_tenant):
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
            "WHERE c.relname = ANY(%s) AND am.amname = 'btree'", (sorted(with_tenant),)
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
            "SELECT current_user AS who, session_user AS login, r.rolsuper, r.rolbypassrls "
            "FROM pg_roles r WHERE r.rolname = current_user").fetchone()
    assert row["who"] == row["login"] == "mnemovault_app"
    assert row["rolsuper"] is False and row["rolbypassrls"] is False


# -- the pool logs in as the application role: no SQL on its connections escapes RLS -----------
def _owner_of_memories(vault: MemoryVault) -> str:
    with psycopg.connect(vault.db.url) as conn:
        row = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'memories'"
                           ).fetchone()
    assert row is not None
    return str(row[0])


def _other_tenants_rows(conn: psycopg.Connection, other: str) -> int:
    return int(conn.execute("SELECT count(*) AS n FROM memories WHERE tenant_id = %s",
                            (other,)).fetchone()["n"])


def test_app_connection_logs_in_as_the_app_role(vault: MemoryVault, tenant: str) -> None:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute(
            "SELECT session_user AS login, current_user AS who, rolsuper, rolbypassrls "
            "FROM pg_roles WHERE rolname = current_user").fetchone()
    assert (row["login"], row["who"]) == ("mnemovault_app", "mnemovault_app")
    assert (row["rolsuper"], row["rolbypassrls"]) == (False, False)


def test_reset_role_does_not_escape_row_level_security(vault: MemoryVault, tenant: str) -> None:
    other = tenant + "-o"
    vault.ensure_tenant(other)
    vault.remember("another tenant's secret", scope="s", principal=vault.principal(other))
    with vault.db.transaction(tenant) as conn:
        conn.execute("RESET ROLE")  # allowed, and a no-op: the login role is the app role
        conn.execute("SET ROLE NONE")
        conn.execute("RESET SESSION AUTHORIZATION")
        who = conn.execute("SELECT current_user AS u, session_user AS s").fetchone()
        assert (who["u"], who["s"]) == ("mnemovault_app", "mnemovault_app")
        assert _other_tenants_rows(conn, other) == 0
    with psycopg.connect(vault.db.url) as conn:  # the row exists: the zero above is RLS
        assert conn.execute("SELECT count(*) FROM memories WHERE tenant_id = %s",
                            (other,)).fetchone() == (1,)


@pytest.mark.parametrize("statement", [
    "SET ROLE {owner}", "SET ROLE postgres", "SET LOCAL ROLE {owner}",
    "SET SESSION AUTHORIZATION {owner}", "SET SESSION AUTHORIZATION postgres",
    "ALTER ROLE mnemovault_app BYPASSRLS", "ALTER TABLE memories DISABLE ROW LEVEL SECURITY",
])
def test_app_connection_cannot_become_a_privileged_role(vault: MemoryVault, tenant: str,
                                                        statement: str) -> None:
    other = tenant + "-p"
    vault.ensure_tenant(other)
    vault.remember("another tenant's secret", scope="s", principal=vault.principal(other))
    owner = _owner_of_memories(vault)
    stmt = sql.SQL(statement).format(owner=sql.Identifier(owner))
    with refused_by_database(psycopg.errors.InsufficientPrivilege), \
            vault.db.transaction(tenant) as conn:
        conn.execute(stmt)
    # however it was tried, the next transaction on the pool is still confined
    with vault.db.transaction(tenant) as conn:
        assert _other_tenants_rows(conn, other) == 0
        assert conn.execute("SELECT current_user AS u").fetchone()["u"] == "mnemovault_app"


def test_app_login_url_replaces_user_and_never_reuses_the_owner_password() -> None:
    d = conninfo_to_dict(app_login_url(
        "postgresql://owner:s3cret@db.example:5433/mv?sslmode=require", "mnemovault_app"))
    assert d == {"user": "mnemovault_app", "host": "db.example", "port": "5433",
                 "dbname": "mv", "sslmode": "require"}
    d = conninfo_to_dict(app_login_url("host=/run/pg user=postgres password=x dbname=mv",
                                       "mnemovault_app", "app-pw"))
    assert d == {"user": "mnemovault_app", "password": "app-pw", "host": "/run/pg",
                 "dbname": "mv"}


def test_app_settings_reach_the_database(vault: MemoryVault) -> None:
    s = Settings(database_url="postgresql://o:p@h/mv", app_password="pw")  # type: ignore[arg-type]
    db = Database.from_settings(s)
    assert conninfo_to_dict(db.app_url)["password"] == "pw"
    assert db.url == "postgresql://o:p@h/mv"
    s = Settings(database_url="postgresql://o:p@h/mv",
                 app_database_url="postgresql://app:q@h2/mv")
    assert Database.from_settings(s).app_url == "postgresql://app:q@h2/mv"


def test_a_privileged_app_login_is_refused(vault: MemoryVault) -> None:
    db = Database(vault.db.url, app_url=vault.db.url)  # the superuser as "app" login
    with pytest.raises(ConfigError, match="superuser"):
        db.open()
    assert db._pool is None


@pytest.fixture
def scratch_db(vault: MemoryVault) -> Iterator[tuple[str, str]]:
    """A database of its own and an app role name of its own (roles are server-wide, so
    the session's ``mnemovault_app`` must not change): (owner URL, role)."""
    name, role = f"mv_login_{uuid.uuid4().hex[:8]}", f"mv_app_{uuid.uuid4().hex[:8]}"
    base = vault.db.url
    url = re.sub(r"/mnemovault\?", f"/{name}?", base)
    assert url != base
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url, role
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_schema_from_before_the_login_role_is_migrated_to_it(
        scratch_db: tuple[str, str]) -> None:
    from alembic import command

    url, role = scratch_db
    db = Database(url, app_role=role)
    command.upgrade(db.alembic_config(3), "0003_lineage")  # the pool used SET ROLE then
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                            (role,)).fetchone() == (False,)
    with pytest.raises(Unavailable, match="db upgrade"):
        db.open()
    assert db.upgrade(3) == ("0003_lineage", HEAD)
    db.open()
    try:
        with db.unscoped() as conn:
            row = conn.execute("SELECT session_user AS s, current_user AS u").fetchone()
        assert row["s"] == row["u"] == role
    finally:
        db.close()


def test_an_app_login_that_owns_the_tables_is_refused(scratch_db: tuple[str, str]) -> None:
    url, role = scratch_db
    db = Database(url, app_role=role)
    db.upgrade(3)
    db.open()  # as migrated: fine
    db.close()
    with psycopg.connect(url, autocommit=True) as conn:  # an owner is exempt from RLS
        conn.execute(sql.SQL("ALTER TABLE memories OWNER TO {}").format(sql.Identifier(role)))
    with pytest.raises(ConfigError, match="owner"):
        db.open()


def test_app_password_is_stored_as_a_scram_verifier(scratch_db: tuple[str, str]) -> None:
    url, role = scratch_db
    db = Database(url, app_role=role, app_password="correct horse battery")
    assert conninfo_to_dict(db.app_url)["password"] == "correct horse battery"
    db.upgrade(3)  # the embedded server trusts its socket, so this login works already
    db.set_app_password("correct horse battery")
    with psycopg.connect(url) as conn:
        (stored,) = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s",
                                 (role,)).fetchone()
    assert stored.startswith("SCRAM-SHA-256$") and "horse" not in stored


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


def test_sql_on_an_app_connection_cannot_switch_tenant(vault: MemoryVault,
                                                       tenant: str) -> None:
    """The tenant setting is signed for its backend (migration 0005): setting another
    tenant's name, or replaying a token signed for another backend, shows no rows."""
    other = tenant + "-victim"
    vault.ensure_tenant(other)
    vault.remember("the victim's secret", scope="s", principal=vault.principal(other))
    with vault.db.transaction(other) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories").fetchone()["n"] == 1
        seen = conn.execute("SELECT current_setting('mnemovault.tenant_id') AS t"
                            ).fetchone()["t"]
    assert seen.startswith(other + ":")  # what pg_stat_activity could show of a backend
    with vault.db.transaction(tenant) as conn:
        pid = conn.info.backend_pid
        elsewhere = vault.db._signed(other, pid + 1)  # a token of another backend
        for forged in (other, elsewhere, f"{other}:{'0' * 64}"):
            conn.execute("SELECT set_config('mnemovault.tenant_id', %s, true)", (forged,))
            assert conn.execute("SELECT mv_current_tenant() AS t").fetchone()["t"] is None
            assert conn.execute("SELECT count(*) AS n FROM memories").fetchone()["n"] == 0
        # the genuine token for this backend still works (so the checks above can fail)
        conn.execute("SELECT set_config('mnemovault.tenant_id', %s, true)",
                     (vault.db._signed(other, pid),))
        assert conn.execute("SELECT count(*) AS n FROM memories").fetchone()["n"] == 1
    with refused_by_database(psycopg.errors.InsufficientPrivilege), \
            vault.db.transaction(tenant) as conn:
        conn.execute("SELECT key FROM mv_tenant_key")
