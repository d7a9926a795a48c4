"""The erasure ledger (issue 10, item 9): every erase, forget and shred records ids and
keyed fingerprints (no content) in ``erasure_ledger`` and, after commit, in the ledger file
outside the database; ``ledger export`` writes the file again from the table; after a
backup restore ``reapply-erasures`` removes again what was erased after the backup, is
idempotent, and reports what it removed."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemovault.audit import log as audit_log
from mnemovault.audit.verify import verify_file
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


def _file(vault: MemoryVault, tenant: str) -> list[dict[str, object]]:
    path = Path(str(vault.settings.data_dir)) / "ledger" / f"{tenant}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


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


def test_reapply_after_a_backup_restore_erases_the_subject_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # opening a vault sets the process-wide audit signing key: give the session's back after
    monkeypatch.setattr(audit_log, "config", audit_log.config)
    data = tmp_path / "mv"
    mirror = data / "audit" / "acme.jsonl"  # the audit mirror, beside the ledger
    settings = Settings(data_dir=data, database_url=None)
    backup = tmp_path / "backup-pg"
    mv = MemoryVault.open(settings)
    try:
        mv.ensure_tenant("acme")
        w = build(mv, "acme")
        kept = mv.remember("kept through everything", scope="k", principal=mv.principal("acme"))
    finally:
        mv.close()
        stop(data)
    _copy(data / "pg", backup)  # the backup: a copy of the stopped data dir
    at_backup = mirror.read_bytes()

    mv = MemoryVault.open(settings)
    try:
        who = mv.principal("acme")
        er = mv.subjects.erase(w.ada, scope="s", principal=who)
        forgot = mv.forget([w.others[1]], principal=who).deleted
        assert sorted(er.deleted) == w.ada_s and er.shredded
    finally:
        mv.close()
        stop(data)
    lost = mirror.read_bytes()[len(at_backup):]  # the audit rows the restore will undo
    assert lost.count(b"\n") >= 2

    shutil.rmtree(data / "pg")  # the restore: back to the backup; the ledger dir stays
    _copy(backup, data / "pg")
    mv = MemoryVault.open(settings)
    try:
        who = mv.principal("acme")
        assert set(w.ada_s) | set(forgot) <= memory_ids(mv, "acme")  # the restore undid them
        assert mv.placeholder_outputs(er.shredded, principal=who) == {}  # values live again
        caplog.set_level(logging.WARNING, logger="mnemovault.audit.jsonl")
        res = mv.subjects.reapply_erasures(principal=who)
        assert res.removed == sorted({*w.ada_s, *forgot})
        # the ledger file keeps the two lines the table lost, and says so
        assert any("2 lines have no row in the table" in r.getMessage()
                   for r in caplog.records)
        # the audit mirror set the lost timeline aside and is the restored chain again
        sides = sorted((data / "audit").glob("acme.jsonl.restored-*"))
        assert len(sides) == 1 and sides[0].read_bytes() == lost
        assert mirror.read_bytes() == b"".join(mv.audit.export(who))
        assert mirror.read_bytes().startswith(at_backup) and verify_file(mirror).ok
        assert set(er.shredded) <= set(res.shredded)
        assert res.audit_seq is not None
        assert memory_ids(mv, "acme") == {kept.id, w.others[0], w.others[2]}
        assert mv.subjects.list(w.ada, scope="s", principal=who).items == []
        assert mv.placeholder_outputs(er.shredded, principal=who) == {
            p: "[erased]" for p in er.shredded}
        again = mv.subjects.reapply_erasures(principal=who)  # idempotent
        assert again.removed == [] and again.shredded == []
        # the reapply's own ledger line reached the file although the restored database's
        # audit seqs are behind the file's
        kinds = [x["kind"] for x in _file(mv, "acme")]
        assert kinds.count("erase") == 1 and "reapply" in kinds
        res_cli = CliRunner().invoke(cli_app, ["--data-dir", str(data), "reapply-erasures",
                                               "--json"])
        assert res_cli.exit_code == 0, res_cli.output
        report = json.loads(res_cli.stdout)["tenants"]
        assert [(r["tenant"], r["removed"]) for r in report] == [("acme", [])]
    finally:
        mv.close()
        stop(data)


def test_export_refuses_the_live_file_and_replaces_a_copy_whole(
        vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    who = vault.principal(tenant)
    vault.forget([vault.remember("to forget", scope="q", principal=who).id], principal=who)
    live = Path(str(vault.settings.data_dir)) / "ledger" / f"{tenant}.jsonl"
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
    live = Path(str(vault.settings.data_dir)) / "ledger" / f"{tenant}.jsonl"
    mine = live.read_bytes()
    assert mine == b"".join(ledger_mod.line(r) for r in _table(vault, tenant))
    stale = mine.replace(b'"kind":"forget"', b'"kind":"erase"').replace(
        mine[mine.index(b'"id":"') + 6:mine.index(b'"id":"') + 42], str(uuid.uuid4()).encode())
    live.write_bytes(mine + stale)  # a line of a row the (restored) table lacks
    vault.forget([vault.remember("two", scope="q", principal=who).id], principal=who)
    lines = live.read_bytes().splitlines(keepends=True)
    assert lines[:2] == [mine, stale]  # kept, in place
    assert b"".join(lines[2:]) == ledger_mod.line(_table(vault, tenant)[-1])
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
