"""Erase a subject within a scope, or a whole scope (issue 10, item 1): exactly that
subject's rows go, in every table; nothing of another subject or scope; shredded values
render ``[erased]``; the audit log names the subject only by fingerprint; one side of a
write racing the erase fails with Conflict; a failure after any step, or SIGKILL in the
middle, leaves everything as it was; retrying is idempotent; contributors plug in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.cli import app as cli_app
from mnemovault.errors import Conflict, Forbidden, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.memories import write as write_mod
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault
from tests.subjects_world import audit_rows, build, counts, memory_ids


def _all_pages(vault: MemoryVault, tenant: str, subject: str, scope: str,
               limit: int = 2) -> list[uuid.UUID]:
    out: list[uuid.UUID] = []
    cursor = None
    while True:
        page = vault.subjects.list(subject, scope=scope, limit=limit, cursor=cursor,
                                   principal=vault.principal(tenant))
        out += [m.id for m in page.items]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def test_erase_removes_exactly_the_subjects_rows_in_every_table(
        vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    listed = _all_pages(vault, tenant, w.ada, "s")
    assert listed == w.ada_s  # oldest id first, pending and archived and derived included
    with vault.db.transaction(tenant) as conn:
        ph = conn.execute("SELECT subject_id FROM memories WHERE id = %s",
                          (w.ada_s[0],)).fetchone()["subject_id"]
    assert ph.startswith("{email:p_")  # the subject is stored as its placeholder
    before = counts(vault, tenant)
    everything = memory_ids(vault, tenant)

    er = vault.subjects.erase(w.ada, scope="s", principal=who)

    after = counts(vault, tenant)
    assert sorted(er.deleted) == listed  # the listing before == the set removed
    assert memory_ids(vault, tenant) == everything - set(listed)
    assert set(w.others) <= memory_ids(vault, tenant)
    diff = {t: before[t] - after[t] for t in before if before[t] != after[t]}
    assert diff.pop("memories") == len(listed)
    assert diff.pop("memory_lineage") == 1  # the fact's lineage row
    assert diff.pop("graph_node_support") > 0
    assert diff.pop("graph_nodes") >= 1  # the private email's node
    assert diff.pop("audit_log") == -1 and diff.pop("erasure_ledger") == -1  # one row each
    diff.pop("audit_heads", None)
    diff.pop("audit_nodes", None)  # Merkle nodes grow with the audit row
    diff.pop("graph_edge_support", None)
    diff.pop("graph_edges", None)
    assert diff.pop("pii_deks") == len(er.shredded)  # a shredded value's DEK goes
    diff.pop("lexical_df", None)  # term statistics over the remaining memories
    diff.pop("lexical_scope_stats", None)  # ... folded from their deltas by the erase
    diff.pop("lexical_stat_deltas", None)
    assert diff.pop("lexical_postings") > 0  # the erased memories' postings go ...
    with owner_connection(vault.db.url, autocommit=True) as conn:  # ... none outlives
        orphans = conn.execute(  # its memory
            "SELECT count(*) FROM lexical_postings p WHERE tenant_id = %s AND NOT "
            "EXISTS (SELECT 1 FROM memories m WHERE m.tenant_id = p.tenant_id AND "
            "m.id = p.memory_id)", (tenant,)).fetchone()
    assert orphans is not None and orphans[0] == 0
    assert diff == {}, diff  # no other table lost (or gained) a row
    assert er.receipt["counts"]["memories"] == len(listed)
    assert er.receipt["counts"]["derived"] == 1
    # the value only Ada's memories in s used is shredded and renders [erased]
    assert len(er.shredded) == 1
    assert vault.placeholder_outputs(er.shredded, principal=who) == {
        er.shredded[0]: "[erased]"}
    assert vault.vault_entry(er.shredded[0], principal=who)["shredded_at"] is not None
    # Ada's email is still used in scope t: kept, and her memory there readable
    other = vault.get(w.others[0], principal=who, reveal=True)
    assert w.ada in other.content
    assert _all_pages(vault, tenant, w.ada, "s") == []
    assert len(_all_pages(vault, tenant, w.ada, "t")) == 1


def test_the_audit_log_names_the_subject_only_by_fingerprint(
        vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    er = vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    rows = audit_rows(vault, tenant)
    erase_rows = [json.loads(r) for r in rows if b'"ERASE"' in r]
    assert len(erase_rows) == 1
    row = erase_rows[0]
    assert row["details"]["subject_fp"] == er.receipt["subject_fingerprint"]
    assert row["details"]["subject_fp"].startswith("hmac-sha256:")
    assert row["details"]["ids_root"] == er.receipt["removed_root"]
    assert row["seq"] == er.receipt["audit_seq"]
    with vault.db.transaction(tenant) as conn:
        stored = conn.execute("SELECT subject_id FROM memories WHERE id = %s",
                              (w.others[0],)).fetchone()["subject_id"]
    blob = b"\n".join(rows)
    for needle in (w.ada, w.private, w.marker, "knee"):
        assert needle.encode() not in blob, needle  # no value, no content, anywhere
    assert stored.encode() not in erase_rows[0]["details"].__repr__().encode()


def test_retrying_an_erase_is_idempotent(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    first = vault.subjects.erase(w.ada, scope="s", principal=who)
    state = counts(vault, tenant)
    again = vault.subjects.erase(w.ada, scope="s", principal=who)
    assert again.deleted == [] and again.shredded == []
    assert set(again.receipt["counts"].values()) == {0}
    assert again.receipt["audit_seq"] == first.receipt["audit_seq"] + 1
    now = counts(vault, tenant)
    assert now["audit_log"] == state["audit_log"] + 1  # the retry is recorded...
    assert {t: n for t, n in now.items() if not t.startswith("audit")} == {
        t: n for t, n in state.items() if not t.startswith("audit")}  # ...and changes nothing


def test_a_whole_scope_erase_leaves_other_scopes(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    in_t = set(_all_pages(vault, tenant, w.ada, "t"))
    er = vault.subjects.erase_scope("s", principal=who)
    assert er.receipt["subject_fingerprint"] is None
    assert memory_ids(vault, tenant) == in_t
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE scope = 's'"
                            ).fetchone()["n"] == 0


def test_other_tenants_and_lookups_by_placeholder(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    other = f"o{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(other)
    theirs = vault.remember(f"{w.ada} in another tenant", scope="s", subject=w.ada,
                            principal=vault.principal(other)).id
    page = vault.subjects.list(w.ada, scope="s", limit=100, principal=vault.principal(tenant))
    placeholder = page.items[0].subject
    assert placeholder is not None and placeholder.startswith("{email:")
    # the subject given as its placeholder finds the same rows as the original value
    er = vault.subjects.erase(placeholder, scope="s", principal=vault.principal(tenant))
    assert sorted(er.deleted) == w.ada_s
    assert theirs in memory_ids(vault, other)


def test_permissions_limits_and_validation(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    for role in ("member", "service"):
        with pytest.raises(Forbidden) as info:
            vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant, role))
        assert info.value.details["permission"] == "subject:erase"
    with pytest.raises(ValidationError) as v:
        vault.subjects.erase("  ", scope="s", principal=vault.principal(tenant))
    assert v.value.field == "subject"
    with pytest.raises(ValidationError) as v:
        vault.subjects.erase(w.ada, scope="", principal=vault.principal(tenant))
    assert v.value.field == "scope"
    token, _ = vault.create_key(tenant, "admin", subject=w.bob)
    limited = vault.authenticate(token)
    assert "subject:erase" in limited.permissions
    with pytest.raises(Forbidden):
        vault.subjects.erase(w.ada, scope="s", principal=limited)
    with pytest.raises(Forbidden):
        vault.subjects.erase_scope("s", principal=limited)
    assert set(w.ada_s) <= memory_ids(vault, tenant)
    assert len(vault.subjects.erase(w.bob, scope="s", principal=limited).deleted) == 1


@pytest.mark.parametrize("step", forget_mod.STEPS)
def test_a_failure_after_any_step_leaves_everything_as_before(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    w = build(vault, tenant)
    before = counts(vault, tenant)
    orig = getattr(forget_mod, f"_step_{step}")

    def broken(*args: Any, **kwargs: Any) -> Any:
        orig(*args, **kwargs)
        raise RuntimeError(f"injected failure after step {step}")

    monkeypatch.setattr(forget_mod, f"_step_{step}", broken)
    with pytest.raises(RuntimeError, match="injected"):
        vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    monkeypatch.undo()
    assert counts(vault, tenant) == before
    er = vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    assert sorted(er.deleted) == w.ada_s


def test_a_write_during_an_erase_conflicts_then_the_retry_is_clean(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    inside, release = threading.Event(), threading.Event()
    orig = forget_mod._step_memories

    def slow(conn: Any, run: Any) -> None:
        orig(conn, run)
        inside.set()
        release.wait(30)

    monkeypatch.setattr(forget_mod, "_step_memories", slow)
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "erase", vault.subjects.erase(w.ada, scope="s", principal=who)))
    t.start()
    assert inside.wait(30)
    with pytest.raises(Conflict) as info:  # the write for the same subject, mid-erase
        vault.remember("Ada called again", scope="s", subject=w.ada, principal=who)
    assert info.value.field == "subject"
    vault.remember("Bob is not being erased", scope="s", subject=w.bob, principal=who)
    vault.remember("Ada elsewhere", scope="t", subject=w.ada, principal=who)
    release.set()
    t.join(30)
    monkeypatch.undo()
    assert sorted(result["erase"].deleted) == w.ada_s
    assert _all_pages(vault, tenant, w.ada, "s") == []

    # the other way round: an erase while a write of the subject is under way
    inside.clear()
    release.clear()
    orig_embed = write_mod.embed

    def slow_embed(rt: Any, prepared: Any) -> Any:
        inside.set()
        release.wait(30)
        return orig_embed(rt, prepared)

    monkeypatch.setattr(write_mod, "embed", slow_embed)
    # the erase waits this long for the write under way (issue 29), which never commits
    monkeypatch.setattr(vault.settings, "erase_lock_timeout_seconds", 0.3)
    t = threading.Thread(target=lambda: result.setdefault(
        "write", vault.remember("Ada came back", scope="s", subject=w.ada, principal=who)))
    t.start()
    assert inside.wait(30)
    with pytest.raises(Conflict):
        vault.subjects.erase(w.ada, scope="s", principal=who)
    with pytest.raises(Conflict):
        vault.subjects.erase_scope("s", principal=who)
    release.set()
    t.join(30)
    monkeypatch.undo()
    assert _all_pages(vault, tenant, w.ada, "s") == [result["write"].id]
    retry = vault.subjects.erase(w.ada, scope="s", principal=who)  # the retry is clean
    assert retry.deleted == [result["write"].id]
    assert _all_pages(vault, tenant, w.ada, "s") == []


def test_an_erase_waits_for_the_writes_under_way_and_new_writes_yield_to_it(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: an erase that finds a write of its subject in its transaction waits for
    it (up to erase_lock_timeout_seconds) instead of failing; a write that arrives while
    the erase waits fails at once (it would otherwise keep the erase waiting); the erase
    then removes the write that committed before it."""
    w = build(vault, tenant)
    who = vault.principal(tenant)
    inside, release = threading.Event(), threading.Event()
    orig_embed = write_mod.embed

    def slow_embed(rt: Any, prepared: Any) -> Any:  # step 5 runs in the write's transaction
        if threading.current_thread().name == "writer":
            inside.set()
            release.wait(30)
        return orig_embed(rt, prepared)

    monkeypatch.setattr(write_mod, "embed", slow_embed)
    monkeypatch.setattr(vault.settings, "erase_lock_timeout_seconds", 20.0)
    result: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(name: str, fn: Any) -> None:
        try:
            result[name] = fn()
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(name="writer", target=run, args=("write", lambda: vault.remember(
        "Ada came back", scope="s", subject=w.ada, principal=who)))
    writer.start()
    assert inside.wait(30)
    t0 = time.monotonic()
    eraser = threading.Thread(target=run, args=("erase", lambda: vault.subjects.erase(
        w.ada, scope="s", principal=who)))
    eraser.start()
    deadline = time.monotonic() + 10  # the erase is queued on the subject's lock
    while not _waiting_on_advisory_lock(vault) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting_on_advisory_lock(vault)
    with pytest.raises(Conflict):  # a new write of the subject does not jump the queue
        vault.remember("Ada once more", scope="s", subject=w.ada, principal=who)
    vault.remember("Bob is not being erased", scope="s", subject=w.bob, principal=who)
    release.set()
    writer.join(30)
    eraser.join(30)
    assert not errors, errors
    assert time.monotonic() - t0 < 15
    assert result["write"].id in result["erase"].deleted
    assert sorted(result["erase"].deleted) == sorted([*w.ada_s, result["write"].id])
    assert _all_pages(vault, tenant, w.ada, "s") == []


def _waiting_on_advisory_lock(vault: MemoryVault) -> bool:
    with owner_connection(vault.db.url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                           "AND NOT granted").fetchone()
    return bool(row and row[0])


_CHILD = textwrap.dedent("""
    import sys, time
    from mnemovault.config import Settings
    from mnemovault.governance import forget as forget_mod
    from mnemovault.vault import MemoryVault

    data_dir, url, tenant, subject = sys.argv[1:5]
    orig = forget_mod._step_vault

    def stall(conn, run):
        orig(conn, run)  # memories deleted, values shredded: then the process dies
        print("INSIDE", flush=True)
        time.sleep(120)

    forget_mod._step_vault = stall
    mv = MemoryVault.open(Settings(data_dir=data_dir, database_url=url))
    mv.subjects.erase(subject, scope="s", principal=mv.principal(tenant))
    print("FINISHED", flush=True)
""")


def test_sigkill_in_the_middle_of_an_erase_leaves_all_or_nothing(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    w = build(vault, tenant)
    before = counts(vault, tenant)
    env = {**os.environ, "MNEMOVAULT_AUDIT_JSONL": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(vault.settings.data_dir), vault.db.url, tenant,
         w.ada], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        cwd=str(Path(__file__).resolve().parents[1]))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "INSIDE", line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while counts(vault, tenant) != before and time.monotonic() < deadline:
        time.sleep(0.2)  # the server notices the dead client and rolls back
    assert counts(vault, tenant) == before  # nothing: the transaction never committed
    er = vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    assert sorted(er.deleted) == w.ada_s  # and the retry does all of it


def test_a_contributor_removes_its_rows_in_the_same_erase(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    w = build(vault, tenant)
    seen: list[forget_mod.Reach] = []

    def runs(conn: Any, reach: forget_mod.Reach) -> dict[str, int]:
        seen.append(reach)
        return {"procedure_runs": 2}

    monkeypatch.setattr(forget_mod, "CONTRIBUTORS", {"test_runs": runs})  # only this one
    er = vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    assert er.receipt["counts"]["procedure_runs"] == 2
    assert seen[0].memory_ids == w.ada_s and seen[0].target is not None
    row = json.loads(next(r for r in audit_rows(vault, tenant) if b'"ERASE"' in r))
    assert row["details"]["contributed"] == {"procedure_runs": 2}


def test_http_and_cli(vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    w = build(vault, tenant)
    token, _ = vault.create_key(tenant, "admin")
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    r = client.get(f"/v1/subjects/{w.ada}/memories", params={"scope": "s", "limit": 100},
                   headers=h)
    assert r.status_code == 200, r.text
    listed = [m["id"] for m in r.json()["items"]]
    r = client.post(f"/v1/subjects/{w.ada}/erase", json={"scope": "s"}, headers=h)
    assert r.status_code == 200, r.text
    assert sorted(r.json()["deleted"]) == sorted(listed)
    assert r.json()["receipt"]["counts"]["memories"] == len(listed)
    r = client.post("/v1/scopes/t/erase", json={"confirm": "nope"}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["field"] == "confirm"

    runner = CliRunner()
    base = ["--data-dir", str(vault.settings.data_dir), "--tenant", tenant]
    res = runner.invoke(cli_app, [*base, "erase", "--subject", w.bob, "--scope", "s"],
                        input="wrong\n")
    assert res.exit_code == 5  # declined: nothing done
    assert len(_all_pages(vault, tenant, w.bob, "s")) == 1
    rfile = tmp_path / "receipt.json"
    res = runner.invoke(cli_app, [*base, "erase", "--subject", w.bob, "--scope", "s",
                                  "--receipt", str(rfile), "--json"], input=f"{w.bob}\n")
    assert res.exit_code == 0, res.output
    assert _all_pages(vault, tenant, w.bob, "s") == []
    res = runner.invoke(cli_app, [*base, "receipt", "verify", str(rfile), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["valid"] is True
    res = runner.invoke(cli_app, [*base, "erase", "--scope", "t", "--yes", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["receipt"]["counts"]["memories"] == 1


def test_erase_and_rectify_with_pseudonymisation_off(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vault, "settings",
                        vault.settings.model_copy(update={"pii_pseudonymize": False}))
    who = vault.principal(tenant)
    u = uuid.uuid4().hex[:8]
    subject = f"plain{u}@example.org"
    a = vault.remember(f"{subject} wrote", scope="s", subject=subject, principal=who).id
    b = vault.remember("kept", scope="s", subject="other", principal=who).id
    listed = [m.id for m in vault.subjects.list(subject, scope="s", principal=who).items]
    assert listed == [a] and vault.get(a, principal=who).subject == subject  # as written
    fixed = vault.subjects.rectify(b, "kept, corrected", principal=who)
    assert fixed.version == 2 and fixed.history is not None  # valid time: a history version
    er = vault.subjects.erase(subject, scope="s", principal=who)
    assert er.deleted == [a] and er.shredded == []
    assert vault.subjects.verify_receipt(er.receipt)["counts"]["memories"] == 1
    assert memory_ids(vault, tenant) == {b, fixed.history}
