"""Cross-tenant operator work on Citus with an owner that is not a superuser: the schema's
owner is handed to a ``NOSUPERUSER`` login for the test (the tables, their shards, the
functions and the signing key on every node), ``distribute`` runs as it, and the KEK
rotation runs on its connection one tenant at a time: each tenant's secret, DEKs and audit
row in one transaction on its shard (no two-phase commit), a failure keeping the tenants
before it and a re-run finishing the rest. Ownership goes back afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mnemovault.store import citus
from mnemovault.store import pii as pii_store
from mnemovault.vault import MemoryVault
from tests.citus.test_citus import _node_url, _prepared, _workers

pytestmark = pytest.mark.citus

OPERATOR = "mv_test_owner"


def _owned(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """(kind, name) of the schema's own tables and functions (not an extension's)."""
    rows = conn.execute(
        "SELECT 'TABLE', c.oid::regclass::text FROM pg_class c "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') "
        "AND NOT c.relispartition AND NOT EXISTS (SELECT 1 FROM pg_depend d "
        "  WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype = 'e') "
        "UNION ALL SELECT 'FUNCTION', p.oid::regprocedure::text FROM pg_proc p "
        "WHERE p.pronamespace = current_schema()::regnamespace AND NOT EXISTS (SELECT 1 "
        "  FROM pg_depend d WHERE d.objid = p.oid AND d.classid = 'pg_proc'::regclass "
        "  AND d.deptype = 'e') ORDER BY 1, 2").fetchall()
    return [(r[0], r[1]) for r in rows]


def _hand_over(url: str, role: str) -> None:
    """Make ``role`` the owner of the schema's objects on the coordinator (Citus passes it
    on to the shards and the distributed functions) and of the plain tables on every
    worker (the signing key's copy)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for kind, name in _owned(conn):
            conn.execute(sql.SQL("ALTER {} {} OWNER TO {}").format(
                sql.SQL(kind), sql.SQL(name), sql.Identifier(role)))
    for host, port in _workers(url):
        with psycopg.connect(_node_url(url, host, port), autocommit=True) as w:
            w.execute(sql.SQL("ALTER TABLE mv_tenant_key OWNER TO {}").format(
                sql.Identifier(role)))


@pytest.fixture
def operator_url(vault: MemoryVault) -> Iterator[str]:
    url = vault.db.url
    with psycopg.connect(url, autocommit=True) as conn:
        (owner,) = conn.execute("SELECT current_user").fetchone()
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                        (OPERATOR,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER").format(
                sql.Identifier(OPERATOR)))  # Citus creates it on the workers too
    for host, port in [*_workers(url), (None, None)]:
        node = url if host is None else _node_url(url, host, port)
        with psycopg.connect(node, autocommit=True) as conn:
            conn.execute("SET citus.enable_ddl_propagation = off")
            conn.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(
                sql.Identifier(OPERATOR)))
    _hand_over(url, OPERATOR)
    params: dict[str, Any] = dict(conninfo_to_dict(url))
    params["user"] = OPERATOR
    params.pop("password", None)
    try:
        yield make_conninfo(**params)
    finally:
        _hand_over(url, owner)


def _dek_versions(url: str, tenants: list[str]) -> dict[str, set[int]]:
    with psycopg.connect(url) as conn:
        out: dict[str, set[int]] = {t: set() for t in tenants}
        for t, v in conn.execute("SELECT tenant_id, kek_version FROM pii_deks "
                                 "WHERE tenant_id = ANY(%s)", (tenants,)):
            out[t].add(int(v))
    return out


def test_kek_rotation_one_tenant_at_a_time_as_a_non_superuser_owner(
        vault: MemoryVault, tenant: str, operator_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tenants = [tenant, f"{tenant}-b", f"{tenant}-c"]
    su = vault.db.url  # the superuser's, for the checks
    ids = {}
    for i, t in enumerate(tenants):
        ids[t] = vault.remember(f"write to person{i}.{t}@example.org", scope="s",
                                principal=vault.principal(t)).id
    with psycopg.connect(operator_url) as conn:
        row = conn.execute("SELECT current_user, rolsuper FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
    assert row == (OPERATOR, False)
    # the upgrade's Citus step as that owner on a distributed schema: nothing to do, no error
    assert citus.distribute(operator_url, vault.db.app_role) == {
        "distributed": [], "reference": [], "functions": [], "policies": [], "triggers": [],
        "replica_identity": []}

    seen: list[tuple[str, bool]] = []
    real_tenants = pii_store.tenants_not_under

    def spy(conn: Any, version: int) -> list[str]:
        r = conn.execute("SELECT current_user AS u, rolsuper AS s FROM pg_roles "
                         "WHERE rolname = current_user").fetchone()
        seen.append((r["u"], r["s"]))
        return real_tenants(conn, version)

    monkeypatch.setattr(pii_store, "tenants_not_under", spy)
    monkeypatch.setattr(vault.db, "url", operator_url)  # the operator path's connection
    # a failure on the second tenant: the first stays rewrapped, the rest untouched
    real_rewrap = pii_store.rewrap_dek

    def failing(conn: Any, t: str, *args: Any) -> None:
        if t == tenants[1]:
            raise RuntimeError("injected failure in the second tenant")
        real_rewrap(conn, t, *args)

    monkeypatch.setattr(pii_store, "rewrap_dek", failing)
    before = _dek_versions(su, tenants)
    assert all(len(v) == 1 for v in before.values())
    monkeypatch.setattr(pii_store, "tenants_not_under", lambda conn, v: [
        t for t in spy(conn, v) if t in tenants])  # only ours: the failing order is known
    with pytest.raises(RuntimeError, match="injected"):
        vault.rotate_kek()
    mid = _dek_versions(su, tenants)
    assert mid[tenants[0]] == {vault.keyring.current}, "the first tenant's rotation did not commit"
    assert mid[tenants[1]] == before[tenants[1]] and mid[tenants[2]] == before[tenants[2]]
    monkeypatch.setattr(pii_store, "rewrap_dek", real_rewrap)
    monkeypatch.setattr(pii_store, "tenants_not_under", spy)

    prepared = _prepared(su, recover=True)
    res = vault.rotate_kek()
    monkeypatch.undo()
    assert seen and set(seen) == {(OPERATOR, False)}
    assert res["tenants"] >= 3 and res["rewrapped"] >= 3
    after = _dek_versions(su, tenants)
    assert all(v == {res["kek_version"]} for v in after.values()), after
    assert _prepared(su) == prepared, "a tenant's rotation used two-phase commit"
    for t in tenants:
        who = vault.principal(t)
        assert "@example.org" in vault.get(ids[t], principal=who, reveal=True).content
        with vault.db.transaction(t) as conn:
            ops = [r["operation"] for r in conn.execute(
                "SELECT operation FROM audit_log WHERE tenant_id = %s ORDER BY seq", (t,))]
        assert ops.count("KEK_ROTATE") == (2 if t == tenants[0] else 1), ops
        assert vault.audit.verify(who).ok
