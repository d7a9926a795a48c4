"""KEK rotation on a live deployment (issue 29, items 1, 5 and 7), in process: key rings
that follow their key file, a vault opened before another one rotated, a write under the
old version racing the retire, one rotation at a time, the JSON Lines mirror right after
the rotation, and ``audit verify`` of the system chain. The cross-process cases (SIGKILL at
each step, a real ``serve``) are tests/test_kek_live.py."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from mnemovault.cli import app
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, Conflict, Unavailable
from mnemovault.pii import crypto
from mnemovault.pii.crypto import KekUnavailable, KeyRing
from mnemovault.pii.vault import PiiVault
from mnemovault.store import pii as pii_store
from mnemovault.vault import MemoryVault

runner = CliRunner()


def _email() -> str:
    return f"kek.{uuid.uuid4().hex[:10]}@example.org"


def _dek_version(vault: MemoryVault, tenant: str, placeholder: str) -> int:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT kek_version FROM pii_deks WHERE tenant_id = %s AND "
                           "placeholder = %s", (tenant, placeholder)).fetchone()
    assert row is not None
    return int(row["kek_version"])


def _file_versions(path: Path) -> tuple[int, list[int]]:
    body = json.loads(path.read_text())
    return int(body["current"]), sorted(int(v) for v in body["keys"])


# -- the key ring follows its file -------------------------------------------------------
def test_two_key_rings_on_one_file_see_each_others_rotation(tmp_path: Path) -> None:
    path = tmp_path / "kek.json"
    a = KeyRing.load(env_value=None, key_file=path)
    b = KeyRing.load(env_value=None, key_file=path)  # another process, loaded before
    assert a.created and not b.created and a.keys == b.keys
    new = a.add_version()
    assert new == 2 and b.current == 1
    version, key = b.wrapping_key()  # re-checks the file before every wrap
    assert (version, key) == (2, a.kek(2))
    a.retire([1])
    assert _file_versions(path) == (2, [2])
    assert 1 in b.keys  # not re-read yet: a lookup re-checks at most every RECHECK_SECONDS
    b._checked -= KeyRing.RECHECK_SECONDS
    with pytest.raises(KekUnavailable):
        b.kek(1)
    assert b.keys == a.keys
    # a ring that missed the rotation finds the new version on its first miss
    c = KeyRing({1: a.keys[2]}, 1, path, "file", stamp=(0, 0, 0, 0))
    assert c.kek(2) == a.kek(2)
    assert (path.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kek.json"]  # no temp file left


def test_an_unreadable_key_file_keeps_the_keys_but_wraps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "kek.json"
    ring = KeyRing.load(env_value=None, key_file=path)
    key = ring.kek(1)
    tmp = tmp_path / "bad"
    tmp.write_text("{not json")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    assert ring.refresh() is False
    assert ring.kek(1) == key  # what it wrapped still opens
    with pytest.raises(Unavailable, match="cannot be read"):
        ring.wrapping_key()  # but its version may be one a rotation just destroyed
    path.unlink()
    with pytest.raises(Unavailable):
        ring.wrapping_key()
    crypto._write_file(path, {1: key}, 1)
    assert ring.wrapping_key() == (1, key)


def test_a_first_start_never_replaces_a_key_file_made_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "kek.json"
    first = KeyRing.load(env_value=None, key_file=path)
    # the second of two processes starting at once writes its file after the first did
    assert crypto._write_file(path, {1: os.urandom(32)}, 1, exclusive=True) is None
    assert KeyRing.load(env_value=None, key_file=path).keys == first.keys


def test_rotating_an_environment_kek_is_refused_and_changes_nothing() -> None:
    ring = KeyRing.load(env_value=base64.b64encode(os.urandom(32)).decode(),
                        key_file=Path("/nonexistent/kek.json"))
    with pytest.raises(ConfigError, match="MNEMOVAULT_KEK"):
        ring.add_version()
    assert ring.current == 1 and list(ring.keys) == [1]


# -- a vault opened before another process rotated -----------------------------------------
def test_a_vault_opened_before_a_cli_rotation_keeps_reading_and_writing(
        vault: MemoryVault, tenant: str, data_dir: Path) -> None:
    owner = vault.principal(tenant)
    email = _email()
    before = vault.remember(f"before {email}", scope="s", principal=owner)
    vault.get(before.id, principal=owner, reveal=True)  # the ring is loaded and used
    res = runner.invoke(app, ["--data-dir", str(data_dir), "kek", "rotate", "--retire",
                              "--json"])  # its own MemoryVault: another key ring
    assert res.exit_code == 0, res.output
    rotated = json.loads(res.stdout)
    new = rotated["kek_version"]
    assert rotated["retired"] and new not in rotated["retired"]
    assert _file_versions(vault.keyring.path) == (new, [new])  # type: ignore[arg-type]
    # this vault's ring never saw the rotation: it reads the file again
    assert vault.get(before.id, principal=owner, reveal=True).content == f"before {email}"
    after = vault.remember(f"after x{email}", scope="s", principal=owner)
    assert _dek_version(vault, tenant, after.placeholders[0]) == new
    assert vault.get(after.id, principal=owner, reveal=True).content == f"after x{email}"
    hits = vault.recall(email, scope="s", principal=owner, reveal=True)
    assert any(email in h.memory.content for h in hits)


# -- a write under the old version racing the retire ---------------------------------------
def _waiting_for_wrap_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (pii_store.WRAP_LOCK,)).fetchone()
    return bool(row and row[0])


def test_a_write_under_the_old_version_in_flight_is_rewrapped_before_the_retire(
        vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    vault.remember(f"first {_email()}", scope="s", principal=owner)  # the tenant's secret
    vault.keyring.refresh()
    old = vault.keyring.current
    # a writer in another process that read the key file before the rotation: its ring
    # has only the old version, and its transaction commits after the rotation's scan
    stale = PiiVault(KeyRing(vault.keyring.keys, old))
    email = _email()
    result: dict[str, Any] = {}

    def rotate() -> None:
        try:
            result["res"] = vault.rotate_kek(retire=True)
        except BaseException as exc:  # reported below
            result["error"] = exc

    rotation = threading.Thread(target=rotate)
    with vault.db.transaction(tenant) as conn:
        keys = stale.tenant_keys(conn, tenant)
        entry = stale.get_or_create(conn, tenant, keys, "email", email,
                                    stale.known_index(conn, keys))
        assert entry.created
        rotation.start()
        deadline = time.monotonic() + 60
        while rotation.is_alive() and not _waiting_for_wrap_lock(vault.db.url):
            assert time.monotonic() < deadline, "the rotation neither waited nor finished"
            time.sleep(0.05)
        # the retire waits for this transaction (it holds the wrap lock in share mode)
    rotation.join(60)
    assert not rotation.is_alive() and "error" not in result, result
    res = result["res"]
    assert old in res["retired"]
    assert _dek_version(vault, tenant, entry.placeholder) == res["kek_version"]
    got = vault.vault_entry(entry.placeholder, reveal=True, principal=owner)
    assert got["value"] == email


def test_a_second_rotation_is_refused_while_one_runs(vault: MemoryVault) -> None:
    path = vault.keyring.path
    assert path is not None
    before = path.read_bytes()
    with psycopg.connect(vault.db.url, autocommit=True) as other:
        assert pii_store.try_lock_rotation(other)
        with pytest.raises(Conflict, match="another KEK rotation"):
            vault.rotate_kek(retire=True)
    assert path.read_bytes() == before


# -- item 5: the JSON Lines mirror gets the rotation's rows at once ------------------------
def test_kek_rotate_rows_reach_the_jsonl_mirror_when_the_rotation_commits(
        vault: MemoryVault, tenant: str, settings: Settings) -> None:
    owner = vault.principal(tenant)
    vault.remember(f"mirror {_email()}", scope="s", principal=owner)
    res = vault.rotate_kek()
    mirror = Path(settings.data_dir) / "audit" / f"{tenant}.jsonl"
    lines = [json.loads(line) for line in mirror.read_text().splitlines()]
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT seq, operation FROM audit_log WHERE tenant_id = %s "
                            "ORDER BY seq", (tenant,)).fetchall()
    assert rows[-1]["operation"] == "KEK_ROTATE"
    assert [line["seq"] for line in lines] == [r["seq"] for r in rows]
    assert lines[-1]["operation"] == "KEK_ROTATE"
    assert lines[-1]["details"]["kek_version"] == res["kek_version"]


# -- item 7: the system tenant's chain from the CLI ----------------------------------------
def test_audit_verify_reads_the_system_chain(vault: MemoryVault, tenant: str,
                                             data_dir: Path) -> None:
    t0 = datetime.now(UTC)
    vault.tenants.delete(tenant, confirm=f"DELETE-{tenant}", now=t0)
    purged = vault.tenants.purge_expired(now=t0 + timedelta(days=365))
    assert tenant in [p["tenant"] for p in purged["purged"]]
    res = runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", "_system", "audit",
                              "verify", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] is True and out["rows"] >= 1 and "_system" in out["source"]
    res = runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", "_system", "audit",
                              "export"])
    assert res.exit_code == 0, res.output
    assert any(json.loads(line)["operation"] == "TENANT_PURGE"
               for line in res.stdout.splitlines())
    # other names outside the tenant rule are still refused
    res = runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", "_other", "audit",
                              "verify"])
    assert res.exit_code == 2
