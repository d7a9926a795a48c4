"""Tenant delete (SPEC section 10, issue 10 item 7): the typed confirmation, soft delete
(keys fail at once), cancel during the grace period, and the scheduled hard delete after
it (clock injected): no row of the tenant left in any table, one system audit row with
its id, counts and last checkpoint, another tenant untouched, one purge at a time."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.errors import Forbidden, NotFound, Refused, Unauthenticated
from mnemovault.store.tenants import PURGE_LOCK, SYSTEM_TENANT
from mnemovault.vault import MemoryVault

DAY = timedelta(days=1)


def _tables(vault: MemoryVault) -> list[str]:
    """Every table of the schema with a tenant_id column (read here independently of the
    code under test)."""
    with psycopg.connect(vault.db.url) as conn:
        return sorted(r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = "
            "'tenant_id' AND table_schema = current_schema()"))


def _counts(vault: MemoryVault, tenant: str) -> dict[str, int]:
    """Rows of ``tenant`` in every such table (as the owner: no row-level security)."""
    out = {}
    with psycopg.connect(vault.db.url) as conn:
        for t in _tables(vault):
            (n,) = conn.execute(f'SELECT count(*) FROM "{t}" WHERE tenant_id = %s',
                                (tenant,)).fetchone()
            out[t] = int(n)
    return out


def _populate(vault: MemoryVault, tenant: str) -> None:
    """Rows in many tables: memories with vault values, a derived fact (lineage, graph),
    a forgotten memory, keys, an export job and its outbox event, audit rows and a
    signed checkpoint."""
    who = Principal.local(tenant)
    a = vault.remember(f"Write to ana.{tenant}@example.org about the roses.", scope="s",
                       subject="ana", principal=who,
                       entities=[{"kind": "person", "value": "Ana Lima"}])
    b = vault.remember("Ana Lima prefers tulips over roses.", scope="s", subject="ana",
                       principal=who)
    vault.remember("Ana Lima likes flowers.", scope="s", type="fact",
                   derived_from=[a.id, b.id], principal=who)
    gone = vault.remember("A note to forget.", scope="s", principal=who)
    vault.forget([gone.id], principal=who)
    vault.create_key(tenant, "member")
    vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    vault.audit.checkpoint(who, sign_now=True)


def _system_rows(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    return [r for r in vault.tenants.purge_log(limit=100_000)
            if r["details"]["tenant_id"] == tenant]


# -- confirmation and permissions -------------------------------------------------------------
def test_wrong_confirmation_is_refused_and_says_what_to_type(vault: MemoryVault,
                                                             tenant: str) -> None:
    for wrong in (None, "", "yes", f"delete-{tenant}", f"DELETE-{tenant} ", "DELETE-other"):
        with pytest.raises(Refused) as exc:
            vault.tenants.delete(tenant, confirm=wrong)
        assert f"type exactly DELETE-{tenant}" in exc.value.message
        assert exc.value.field == "confirm"
    assert vault.tenants.status(tenant)["deleted"] is False


def test_delete_needs_admin_delete_and_the_own_tenant(vault: MemoryVault, tenant: str) -> None:
    admin = Principal.local(tenant, "admin")
    with pytest.raises(Forbidden) as exc:
        vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", principal=admin)
    assert exc.value.details["permission"] == "admin:delete"
    other = f"{tenant}-x"
    vault.ensure_tenant(other)
    with pytest.raises(NotFound):
        vault.tenants.delete(other, confirm=f"DELETE-{other}",
                             principal=Principal.local(tenant))
    assert vault.tenants.status(other)["deleted"] is False
    assert vault.tenants.status(tenant)["deleted"] is False


# -- soft delete: keys fail at once; cancel ---------------------------------------------------
def test_keys_fail_at_once_after_soft_delete_and_cancel_restores_them(
        vault: MemoryVault, tenant: str) -> None:
    tokens = {role: vault.create_key(tenant, role)[0] for role in ("owner", "admin", "member")}
    client = TestClient(create_app(vault))

    def h(role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[role]}"}

    assert client.get("/v1/memories", headers=h("member")).status_code == 200
    wrong = client.post(f"/v1/admin/tenants/{tenant}/delete", headers=h("owner"),
                        json={"confirm": "yes"})
    assert wrong.status_code == 409 and f"DELETE-{tenant}" in wrong.json()["error"]["message"]
    assert client.post(f"/v1/admin/tenants/{tenant}/delete", headers=h("admin"),
                       json={"confirm": f"DELETE-{tenant}"}).status_code == 403
    r = client.post(f"/v1/admin/tenants/{tenant}/delete", headers=h("owner"),
                    json={"confirm": f"DELETE-{tenant}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["deleted"] is True and body["already_deleted"] is False
    after = datetime.fromisoformat(body["delete_after"])
    deleted = datetime.fromisoformat(body["deleted_at"])
    assert after - deleted == timedelta(days=vault.settings.delete_retention_days)

    for role in tokens:  # every key, every interface: at once
        assert client.get("/v1/memories", headers=h(role)).status_code == 401, role
        with pytest.raises(Unauthenticated):
            vault.authenticate(tokens[role])
    # only an admin:delete key may still reach the cancel route
    for role in ("admin", "member"):
        assert client.post(f"/v1/admin/tenants/{tenant}/delete/cancel",
                           headers=h(role)).status_code == 401, role
    r = client.post(f"/v1/admin/tenants/{tenant}/delete/cancel", headers=h("owner"))
    assert r.status_code == 200, r.text
    assert r.json()["cancelled"] is True and r.json()["deleted"] is False
    for role in tokens:
        assert client.get("/v1/memories", headers=h(role)).status_code == 200, role
    again = client.post(f"/v1/admin/tenants/{tenant}/delete/cancel", headers=h("owner"))
    assert again.status_code == 200 and again.json()["cancelled"] is False
    ops = [r["operation"] for r in _audit_ops(vault, tenant)]
    assert ops.count("TENANT_DELETE") == 1 and ops.count("TENANT_DELETE_CANCEL") == 1


def _audit_ops(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    import orjson

    lines = b"".join(vault.audit.export(Principal.local(tenant))).splitlines()
    return [orjson.loads(line) for line in lines]


def test_second_delete_keeps_the_first_times(vault: MemoryVault, tenant: str) -> None:
    t0 = datetime.now(UTC)
    first = vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    second = vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0 + DAY)
    assert second["already_deleted"] is True and second["audit_seq"] is None
    assert second["delete_after"] == first["delete_after"]


def test_cancel_after_the_grace_period_is_refused(vault: MemoryVault, tenant: str) -> None:
    t0 = datetime.now(UTC)
    state = vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    with pytest.raises(Refused):
        vault.tenants.cancel_delete(tenant, now=state["delete_after"] + timedelta(seconds=1))
    assert vault.tenants.status(tenant)["deleted"] is True
    assert vault.tenants.cancel_delete(tenant, now=t0 + DAY)["cancelled"] is True


# -- the hard delete ------------------------------------------------------------------------
def test_purge_after_the_grace_period_leaves_only_the_system_row(
        vault: MemoryVault, tenant: str, settings: Any) -> None:
    other = f"{tenant}-keep"
    vault.ensure_tenant(other)
    _populate(vault, tenant)
    _populate(vault, other)
    other_token, _ = vault.create_key(other, "member")
    before, other_before = _counts(vault, tenant), _counts(vault, other)
    for table in ("memories", "pii_values", "api_keys", "audit_log", "audit_checkpoints",
                  "memory_lineage", "outbox", "tenant_exports"):
        assert before[table] > 0, table  # the test covers these tables for real
    mirror = Path(settings.data_dir) / "audit" / f"{tenant}.jsonl"
    assert mirror.exists()

    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    early = vault.tenants.purge_expired(now=t0 + 29 * DAY)
    assert tenant not in [p["tenant"] for p in early["purged"]]
    assert _counts(vault, tenant)["memories"] == before["memories"]

    chain = _counts(vault, tenant)["audit_log"]  # the TENANT_DELETE row came on top
    result = vault.tenants.purge_expired(now=t0 + 31 * DAY)
    assert result["ran"] is True and not result["errors"]
    (mine,) = [p for p in result["purged"] if p["tenant"] == tenant]

    after = _counts(vault, tenant)
    assert after == dict.fromkeys(after, 0), {t: n for t, n in after.items() if n}
    assert not mirror.exists()
    # exactly one system row names the tenant, with the counts and its chain's last checkpoint
    (row,) = _system_rows(vault, tenant)
    assert row["tenant_id"] == SYSTEM_TENANT and row["operation"] == "TENANT_PURGE"
    d = row["details"]
    assert d["counts"]["audit_log"] == chain
    for table, n in before.items():
        if table not in ("audit_log", "audit_checkpoints", "audit_nodes", "audit_heads"):
            assert d["counts"].get(table, 0) == n, table
    assert d["rows"] == sum(d["counts"].values()) and mine["rows"] == d["rows"]
    assert d["chain"]["seq"] == chain
    assert d["chain"]["checkpoint"]["size"] == chain  # signed at the final size
    assert f"mnemovault/audit/{tenant}\n{chain}\n" in d["chain"]["checkpoint"]["note"]
    with psycopg.connect(vault.db.url) as conn:
        (n,) = conn.execute("SELECT count(*) FROM audit_log WHERE tenant_id = %s AND "
                            "convert_from(row_bytes, 'UTF8') LIKE %s",
                            (SYSTEM_TENANT, f'%"tenant_id":"{tenant}"%')).fetchone()
    assert n == 1
    # the other tenant: untouched, its key still works
    assert _counts(vault, other) == other_before
    assert vault.authenticate(other_token).tenant == other
    # purging again finds nothing of it
    again = vault.tenants.purge_expired(now=t0 + 40 * DAY)
    assert tenant not in [p["tenant"] for p in again["purged"]]
    assert len(_system_rows(vault, tenant)) == 1


def test_purge_finds_tables_by_catalog(vault: MemoryVault) -> None:
    """The purge order covers every tenant_id table the catalog shows, children first."""
    from mnemovault.store import tenants as store

    with store.purge_connection(vault.db.url) as conn:
        assert conn is not None
        order = store.tenant_tables(conn)
    assert sorted(order) == _tables(vault)
    assert order[-1] == "tenants"
    assert order.index("api_keys") < order.index("tenants")
    with psycopg.connect(vault.db.url) as conn:
        fks = conn.execute(
            "SELECT c.relname, p.relname FROM pg_constraint k JOIN pg_class c ON "
            "c.oid = k.conrelid JOIN pg_class p ON p.oid = k.confrelid WHERE k.contype = 'f'"
        ).fetchall()
    for child, parent in fks:
        if child in order and parent in order and child != parent:
            assert order.index(child) < order.index(parent), (child, parent)


def test_a_purge_holding_the_lock_makes_another_skip(vault: MemoryVault, tenant: str) -> None:
    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    with psycopg.connect(vault.db.url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (PURGE_LOCK,))
        skipped = vault.tenants.purge_expired(now=t0 + 31 * DAY)
        holder.execute("SELECT pg_advisory_unlock(%s)", (PURGE_LOCK,))
    assert skipped == {"ran": False, "now": t0 + 31 * DAY, "purged": [], "errors": []}
    assert _counts(vault, tenant)["tenants"] == 1
    done = vault.tenants.purge_expired(now=t0 + 31 * DAY)
    assert tenant in [p["tenant"] for p in done["purged"]]


def test_two_concurrent_purges_do_the_work_once(vault: MemoryVault) -> None:
    t0 = datetime.now(UTC)
    mine = [f"race-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    for t in mine:
        vault.ensure_tenant(t)
        vault.remember("Something to purge.", scope="s", principal=Principal.local(t))
        vault.tenants.delete(t, confirm=f"DELETE-{t}", now=t0)
    barrier = threading.Barrier(2)
    results: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            results.append(vault.tenants.purge_expired(now=t0 + 31 * DAY))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not failures and len(results) == 2
    purged = [p["tenant"] for r in results for p in r["purged"] if p["tenant"] in mine]
    assert sorted(purged) == sorted(mine)  # each tenant purged by exactly one run
    for t in mine:
        assert len(_system_rows(vault, t)) == 1
        assert sum(_counts(vault, t).values()) == 0


# -- the CLI --------------------------------------------------------------------------------
def test_cli_delete_cancel_status_and_purge(vault: MemoryVault, tenant: str,
                                            settings: Any) -> None:
    import json

    from typer.testing import CliRunner

    from mnemovault.cli import app

    runner = CliRunner()

    def cli(*args: str, stdin: str | None = None) -> Any:
        return runner.invoke(app, ["--data-dir", str(settings.data_dir), *args], input=stdin)

    refused = cli("tenant", "delete", tenant, "--confirm", "yes", "--json")
    assert refused.exit_code == 5 and f"DELETE-{tenant}" in refused.output
    declined = cli("tenant", "delete", tenant)  # no input at the prompt: nothing done
    assert declined.exit_code == 5
    assert vault.tenants.status(tenant)["deleted"] is False
    typed = cli("tenant", "delete", tenant, stdin=f"DELETE-{tenant}\n")
    assert typed.exit_code == 0, typed.output
    status = cli("tenant", "status", tenant, "--json")
    assert status.exit_code == 0 and json.loads(status.stdout)["deleted"] is True
    cancel = cli("tenant", "cancel-delete", tenant, "--json")
    assert cancel.exit_code == 0 and json.loads(cancel.stdout)["cancelled"] is True
    assert vault.tenants.status(tenant)["deleted"] is False

    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    purge = cli("tenant", "purge", "--now", (t0 + 31 * DAY).isoformat(), "--json")
    assert purge.exit_code == 0, purge.output
    assert tenant in [p["tenant"] for p in json.loads(purge.stdout)["purged"]]
    assert sum(_counts(vault, tenant).values()) == 0
    assert cli("tenant", "status", tenant).exit_code == 3  # gone


def test_the_schedule_purges_an_expired_tenant(vault: MemoryVault, tenant: str) -> None:
    import time

    from mnemovault.tenants.schedule import Background

    long_ago = datetime.now(UTC) - 31 * DAY  # deleted 31 days ago: expired by the real clock
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=long_ago)
    bg = Background(vault.rt, poll_seconds=60, purge_interval_hours=6,
                    purge_delay_seconds=0.0)
    with bg:
        deadline = time.monotonic() + 60
        while not _system_rows(vault, tenant):
            assert time.monotonic() < deadline, "the scheduled purge did not run"
            time.sleep(0.1)
    assert bg.runs["purge"] == 1  # once at start, the next one 6 hours later
    assert sum(_counts(vault, tenant).values()) == 0


class _Killed(BaseException):
    """Stands for the process dying (nothing after it runs, no except clause catches it)."""


def test_a_purge_killed_after_its_commit_is_finished_by_the_next_run(
        vault: MemoryVault, tenant: str, settings: Any, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """Issue 29 item 6: the tenant's audit mirror and ledger files, its record in the purge
    file and the system chain's mirror line are done by the next purge run."""
    from mnemovault.subjects import ledger as ledger_mod
    from mnemovault.tenants import lifecycle

    _populate(vault, tenant)
    mirror = Path(settings.data_dir) / "audit" / f"{tenant}.jsonl"
    system_mirror = Path(settings.data_dir) / "audit" / f"{SYSTEM_TENANT}.jsonl"
    ledger_file = ledger_mod.ledger_dir(vault.rt) / f"{tenant}.jsonl"
    assert mirror.exists() and ledger_file.exists()
    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)

    def die(rt: Any) -> None:
        raise _Killed

    monkeypatch.setattr(lifecycle, "_sync_system_mirror", die)
    with pytest.raises(_Killed):
        vault.tenants.purge_expired(now=t0 + 31 * DAY)
    monkeypatch.undo()
    # committed: the rows are gone and the system row is there; nothing after the commit ran
    assert _counts(vault, tenant)["memories"] == 0
    (row,) = _system_rows(vault, tenant)
    assert mirror.exists() and ledger_file.exists()
    assert tenant not in [e["tenant"] for e in ledger_mod.purges(vault.rt)]
    line = f'"seq":{row["seq"]},'
    assert not system_mirror.exists() or line not in system_mirror.read_text()

    result = vault.tenants.purge_expired(now=t0 + 32 * DAY)  # the next run
    assert tenant not in [p["tenant"] for p in result["purged"]]
    assert not mirror.exists() and not ledger_file.exists()
    recorded = [e for e in ledger_mod.purges(vault.rt) if e["tenant"] == tenant]
    assert [e["audit_seq"] for e in recorded] == [row["seq"]]
    assert line in system_mirror.read_text() and f'"tenant_id":"{tenant}"' in \
        system_mirror.read_text()
    assert lifecycle.finish_purges(vault.rt) == []  # once only
    assert len([e for e in ledger_mod.purges(vault.rt) if e["tenant"] == tenant]) == 1


@pytest.mark.parametrize("stop", ["before_the_system_row", "before_the_last_step"])
def test_a_purge_stopped_between_its_steps_is_resumed_by_the_next_run(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch, stop: str) -> None:
    """Issue 26: the purge commits on the tenant's node, then the system row on the system
    tenant's, then the rest (no two-phase commit under Citus); a run stopped after the
    first or the second commit is finished by the next run, from the details recorded on
    the tenant's shard: one system row, with the first count, and 0 rows of the tenant."""
    from mnemovault.store import tenants as store
    from mnemovault.tenants import lifecycle

    _populate(vault, tenant)
    before = _counts(vault, tenant)
    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    if stop == "before_the_system_row":
        def die(*args: Any, **kwargs: Any) -> int:
            raise _Killed
        monkeypatch.setattr(lifecycle.audit, "append", die)
    else:
        real, calls = store.tenant_tables, []

        def tables(conn: Any) -> list[str]:
            calls.append(1)
            if len(calls) == 2:  # the third step's
                raise _Killed
            return real(conn)
        monkeypatch.setattr(store, "tenant_tables", tables)
    with pytest.raises(_Killed):
        vault.tenants.purge_expired(now=t0 + 31 * DAY)
    monkeypatch.undo()
    mid = _counts(vault, tenant)
    assert mid["memories"] == 0 and mid["tenants"] == 1 and mid["outbox"] == 1, mid
    assert len(_system_rows(vault, tenant)) == (0 if stop == "before_the_system_row" else 1)
    assert vault.tenants.status(tenant)["deleted"] is True  # its keys stay refused

    result = vault.tenants.purge_expired(now=t0 + 32 * DAY)
    (mine,) = [p for p in result["purged"] if p["tenant"] == tenant]
    after = _counts(vault, tenant)
    assert after == dict.fromkeys(after, 0), {t: n for t, n in after.items() if n}
    (row,) = _system_rows(vault, tenant)
    assert row["seq"] == mine["audit_seq"]
    assert row["details"]["counts"]["memories"] == before["memories"]
    assert row["details"]["counts"]["tenants"] == 1
    again = vault.tenants.purge_expired(now=t0 + 40 * DAY)
    assert tenant not in [p["tenant"] for p in again["purged"]]
    assert len(_system_rows(vault, tenant)) == 1
