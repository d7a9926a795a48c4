"""The audit log in the database: chain, Merkle nodes, checkpoints, proofs, export,
the JSON Lines mirror, concurrency, and what rows never contain."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.audit import log as audit_log
from mnemovault.audit.checkpoint import load_public_key, open_checkpoint
from mnemovault.audit.merkle import verify_consistency, verify_inclusion
from mnemovault.audit.verify import verify_file
from mnemovault.errors import Forbidden
from mnemovault.vault import MemoryVault
from tests.dbcheck import refused_by_database


def _fill(vault: MemoryVault, tenant: str, n: int) -> None:
    who = vault.principal(tenant)
    for i in range(n):
        vault.remember(f"audit entry {i}", scope="audit", principal=who)


def test_chain_verifies_from_the_database_and_the_mirror(vault: MemoryVault, tenant: str,
                                                         data_dir: Path) -> None:
    _fill(vault, tenant, 5)
    owner = vault.principal(tenant)
    res = vault.audit.verify(owner)
    assert res.ok and res.rows == 5
    mirror = data_dir / "audit" / f"{tenant}.jsonl"
    assert mirror.exists()
    assert len(mirror.read_bytes().splitlines()) == 5
    assert verify_file(mirror).ok
    # the mirror and an export are the same bytes
    assert b"".join(vault.audit.export(owner)) == mirror.read_bytes()


def test_tampered_mirror_line_is_caught_at_its_line(vault: MemoryVault, tenant: str,
                                                    tmp_path: Path) -> None:
    _fill(vault, tenant, 4)
    lines = b"".join(vault.audit.export(vault.principal(tenant))).splitlines(keepends=True)
    lines[2] = lines[2].replace(b"audit", b"aUdit") if b"audit" in lines[2] else \
        lines[2].replace(b'"REMEMBER"', b'"REMEMBEX"')
    f = tmp_path / "tampered.jsonl"
    f.write_bytes(b"".join(lines))
    res = verify_file(f)
    assert not res.ok and res.error_line == 3


def test_checkpoint_and_proofs(vault: MemoryVault, tenant: str, data_dir: Path) -> None:
    _fill(vault, tenant, 7)
    owner = vault.principal(tenant)
    first = vault.audit.checkpoint(owner)  # signed at the first row
    assert first["size"] == 1
    cp = vault.audit.checkpoint(owner, sign_now=True)
    assert cp["size"] == 7
    pub = load_public_key(data_dir / "audit_signing.key.pub")
    parsed = open_checkpoint(cp["note"], pub)
    assert parsed.size == 7 and parsed.root_hash.hex() == cp["root"]
    for seq in range(1, 8):
        p = vault.audit.inclusion(owner, seq, 7)
        verify_inclusion(seq - 1, 7, bytes.fromhex(p["leaf_hash"]),
                         [bytes.fromhex(h) for h in p["proof"]], parsed.root_hash)
    c = vault.audit.consistency(owner, 1, 7)
    verify_consistency(1, 7, [bytes.fromhex(h) for h in c["proof"]],
                       bytes.fromhex(first["root"]), parsed.root_hash)


def test_truncation_is_caught_with_a_saved_checkpoint(vault: MemoryVault, tenant: str,
                                                      tmp_path: Path, data_dir: Path) -> None:
    _fill(vault, tenant, 6)
    owner = vault.principal(tenant)
    cp = vault.audit.checkpoint(owner, sign_now=True)
    (tmp_path / "cp.txt").write_text(cp["note"])
    lines = b"".join(vault.audit.export(owner)).splitlines(keepends=True)
    (tmp_path / "full.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "short.jsonl").write_bytes(b"".join(lines[:-2]))
    pub = data_dir / "audit_signing.key.pub"
    assert verify_file(tmp_path / "full.jsonl", tmp_path / "cp.txt", pub).ok
    assert verify_file(tmp_path / "short.jsonl").ok  # the chain alone cannot tell
    assert not verify_file(tmp_path / "short.jsonl", tmp_path / "cp.txt", pub).ok


def test_eight_concurrent_writers_make_one_unbroken_chain(vault: MemoryVault,
                                                          tenant: str) -> None:
    per_writer = 125  # 1,000 rows in all (the bench runs 8 x 1,000)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(per_writer):
                with vault.db.transaction(tenant) as conn:
                    audit_log.append(conn, tenant=tenant, operation="TEST", actor="t")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    res = vault.audit.verify(vault.principal(tenant))
    assert res.ok and res.rows == 8 * per_writer
    with vault.db.transaction(tenant) as conn:
        seqs = [r["seq"] for r in conn.execute("SELECT seq FROM audit_log ORDER BY seq")]
    assert seqs == list(range(1, 8 * per_writer + 1))


def test_audit_rows_hold_no_personal_values(vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    u = uuid.uuid4().hex[:8]
    email, name = f"quinn.{u}@example.org", f"Quinn Marlowe{u}"
    r = vault.remember(f"{name} writes from {email}", scope=f"scope-{email}", subject=email,
                       entities=[{"kind": "person", "value": name}], principal=owner)
    vault.get(r.id, reveal=True, principal=owner)
    vault.delete(r.id, principal=owner)
    blob = b"".join(vault.audit.export(owner))
    assert blob
    for value in (email, name, u):
        assert value.encode() not in blob


def test_audit_endpoints_need_audit_read(vault: MemoryVault, tenant: str) -> None:
    client = TestClient(create_app(vault))
    _fill(vault, tenant, 3)
    admin = {"Authorization": "Bearer " + vault.create_key(tenant, "admin")[0]}
    member = {"Authorization": "Bearer " + vault.create_key(tenant, "member")[0]}
    r = client.get("/v1/admin/audit/export", headers=member)
    assert r.status_code == 403 and r.json()["error"]["details"]["permission"] == "audit:read"
    r = client.get("/v1/admin/audit/export", headers=admin, params={"from": 2, "to": 3})
    assert r.status_code == 200
    assert [line.count(b'"seq":') for line in r.content.splitlines()] == [1, 1]
    assert client.get("/v1/admin/audit/checkpoint", headers=admin).json()["size"] >= 1
    p = client.get("/v1/admin/audit/proof/inclusion", headers=admin,
                   params={"seq": 2, "size": 3}).json()
    assert p["leaf_index"] == 1 and p["proof"]
    r = client.get("/v1/admin/audit/proof/inclusion", headers=admin,
                   params={"seq": 2, "size": 10_000})
    assert r.status_code == 422 and r.json()["error"]["field"] == "size"
    with pytest.raises(Forbidden):
        vault.audit.verify(vault.principal(tenant, role="member"))


def test_audit_tables_are_append_only_for_the_app(vault: MemoryVault, tenant: str) -> None:
    _fill(vault, tenant, 1)
    for stmt in ("UPDATE audit_nodes SET hash = hash", "DELETE FROM audit_checkpoints"):
        with refused_by_database(psycopg.errors.InsufficientPrivilege), \
                vault.db.transaction(tenant) as conn:
            conn.execute(stmt)
