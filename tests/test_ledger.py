"""The erasure ledger (issue 10, item 9): every erase, forget and shred records ids and
keyed fingerprints (no content) in ``erasure_ledger`` and, after commit, in the ledger file
outside the database; ``ledger export`` writes the file again from the table; after a
backup restore ``reapply-erasures`` removes again what was erased after the backup, is
idempotent, and reports what it removed."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from typer.testing import CliRunner

from mnemovault.cli import app as cli_app
from mnemovault.config import Settings
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


def test_reapply_after_a_backup_restore_erases_the_subject_again(tmp_path: Path) -> None:
    data = tmp_path / "mv"
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

    mv = MemoryVault.open(settings)
    try:
        who = mv.principal("acme")
        er = mv.subjects.erase(w.ada, scope="s", principal=who)
        forgot = mv.forget([w.others[1]], principal=who).deleted
        assert sorted(er.deleted) == w.ada_s and er.shredded
    finally:
        mv.close()
        stop(data)

    shutil.rmtree(data / "pg")  # the restore: back to the backup; the ledger dir stays
    _copy(backup, data / "pg")
    mv = MemoryVault.open(settings)
    try:
        who = mv.principal("acme")
        assert set(w.ada_s) | set(forgot) <= memory_ids(mv, "acme")  # the restore undid them
        assert mv.placeholder_outputs(er.shredded, principal=who) == {}  # values live again
        res = mv.subjects.reapply_erasures(principal=who)
        assert res.removed == sorted({*w.ada_s, *forgot})
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


def test_a_malformed_ledger_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "l.jsonl"
    bad.write_text('{"tenant": "a"}\n')
    try:
        ledger_mod.read([bad])
    except Exception as exc:  # ValidationError naming the line
        assert "line 1" in str(exc) and getattr(exc, "field", None) == "ledger"
    else:
        raise AssertionError("a malformed line was accepted")
