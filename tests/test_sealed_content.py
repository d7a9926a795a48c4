"""Content sealed under per-subject keys outside the database (issue 21, item 1), against a
real PostgreSQL and the directory key store: the stored row holds ciphertext and a key
id, every read path opens it, a row whose key was destroyed reads as erased (never a
crash), an erase destroys the subject's key (and lists it in the ledger) and leaves the
other subject's, a subject written again after its erase gets a new key, an erase killed
between its key destroy and its commit is completed by the next start (audited), rows
written before sealing are sealed in place, and a KEK rotation with --retire rewraps the
key store."""

from __future__ import annotations

import uuid

import pytest

from mnemovault.errors import MnemoError
from mnemovault.pii.sealing import ERASED
from mnemovault.subjects import erase as erase_mod
from mnemovault.subjects import keys as content_keys
from mnemovault.vault import MemoryVault


def _stored(vault: MemoryVault, tenant: str, mid: uuid.UUID) -> dict:
    with vault.db.transaction(tenant) as conn:  # no sealed column selected: raw row
        row = conn.execute("SELECT key_id, content_sealed AS blob, content FROM memories "
                           "WHERE tenant_id = %s AND id = %s", (tenant, mid)).fetchone()
    assert row is not None
    return dict(row)


def test_content_is_sealed_and_every_read_opens_it(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("Ada was diagnosed with diabetes-canary-1", scope="s",
                       subject="ada", principal=who)
    raw = _stored(vault, tenant, r.id)
    assert raw["key_id"] is not None and b"diabetes" not in bytes(raw["blob"])
    assert vault.get(r.id, principal=who).content == "Ada was diagnosed with diabetes-canary-1"
    assert any(m.content.endswith("canary-1") for m in
               vault.list(scope="s", principal=who).items)
    hits = vault.recall("diabetes", scope="s", principal=who)
    assert any(h.memory.content.endswith("canary-1") for h in hits)
    # the key is the subject's in the scope: another subject has another one
    other = vault.remember("Bob likes tea", scope="s", subject="bob", principal=who)
    assert _stored(vault, tenant, other.id)["key_id"] != raw["key_id"]
    same = vault.remember("Ada likes chess", scope="s", subject="ada", principal=who)
    assert _stored(vault, tenant, same.id)["key_id"] == raw["key_id"]


def test_a_row_whose_key_was_destroyed_reads_as_erased(vault: MemoryVault,
                                                       tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("Cy has a secret-canary-2", scope="s", subject="cy", principal=who)
    kid = str(_stored(vault, tenant, r.id)["key_id"])
    vault.rt.sealer.store.destroy(tenant, [kid])  # as another process's erase would
    vault.rt.sealer.cache.evict(tenant, [kid])
    assert vault.get(r.id, principal=who).content == ERASED
    assert all(m.content == ERASED for m in vault.list(scope="s", principal=who).items)
    hits = vault.recall("secret", scope="s", principal=who)
    assert all("canary-2" not in h.memory.content for h in hits)
    assert all("canary-2" not in m.content
               for m in vault.wake(scope="s", subject="cy", principal=who).records)
    # the next start deletes it (audited)
    swept = content_keys.sweep(vault.rt)
    assert r.id in swept.tenants[tenant]
    with pytest.raises(MnemoError):
        vault.get(r.id, principal=who)


def test_erase_destroys_the_subjects_key_only_and_a_new_write_gets_a_new_key(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    a = vault.remember("Dee note canary-3", scope="s", subject="dee", principal=who)
    b = vault.remember("Eve note canary-4", scope="s", subject="eve", principal=who)
    ka = str(_stored(vault, tenant, a.id)["key_id"])
    kb = str(_stored(vault, tenant, b.id)["key_id"])
    vault.subjects.erase("dee", scope="s", principal=who)
    store = vault.rt.sealer.store
    assert {e.key_id for e in store.destroyed(tenant)} == {ka}
    assert store.get(tenant, kb)  # the other subject's key is whole
    assert vault.get(b.id, principal=who).content == "Eve note canary-4"
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT contributed FROM erasure_ledger WHERE tenant_id = %s "
                           "AND kind = 'erase' ORDER BY audit_seq DESC LIMIT 1",
                           (tenant,)).fetchone()
    assert row is not None and row["contributed"]["content_keys"] == [ka]
    again = vault.remember("Dee is back canary-5", scope="s", subject="dee", principal=who)
    assert str(_stored(vault, tenant, again.id)["key_id"]) not in (ka, kb)


def test_an_erase_killed_between_key_destroy_and_commit_is_finished_at_start(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    who = vault.principal(tenant)
    a = vault.remember("Fay note canary-6", scope="s", subject="fay", principal=who)
    real = erase_mod.destroy_keys

    class Killed(BaseException):
        pass

    def destroy_then_die(rt, tenant_, keys):  # type: ignore[no-untyped-def]
        real(rt, tenant_, keys)
        raise Killed  # the process dies before the commit: the transaction rolls back

    monkeypatch.setattr(erase_mod, "destroy_keys", destroy_then_die)
    with pytest.raises(Killed):
        vault.subjects.erase("fay", scope="s", principal=who)
    monkeypatch.setattr(erase_mod, "destroy_keys", real)
    # the rows are still there, unreadable
    assert _stored(vault, tenant, a.id)["key_id"] is not None
    assert vault.get(a.id, principal=who).content == ERASED
    content_keys.on_start(vault.rt)  # the next start
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE tenant_id = %s AND "
                            "id = %s", (tenant, a.id)).fetchone()["n"] == 0
        audit = conn.execute("SELECT operation, convert_from(row_bytes, 'UTF8') AS body "
                             "FROM audit_log WHERE tenant_id = %s ORDER BY seq DESC LIMIT 1",
                             (tenant,)).fetchone()
    assert audit is not None and audit["operation"] == "FORGET"
    assert "key_destroyed" in audit["body"]


def test_rows_written_before_sealing_are_sealed_in_place(vault: MemoryVault,
                                                         tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("Gus old row canary-7", scope="s", subject="gus", principal=who)
    with vault.db.transaction(tenant) as conn:  # as a database made before 0015
        conn.execute("UPDATE memories SET key_id = NULL, content_sealed = NULL, content = %s, "
                     "provenance_sealed = NULL WHERE tenant_id = %s AND id = %s",
                     ("Gus old row canary-7", tenant, r.id))
    assert vault.get(r.id, principal=who).content == "Gus old row canary-7"
    n = content_keys.seal_existing(vault.rt, batch=1)
    assert n is not None and n >= 1
    raw = _stored(vault, tenant, r.id)
    assert raw["key_id"] is not None and b"canary-7" not in bytes(raw["blob"])
    assert vault.get(r.id, principal=who).content == "Gus old row canary-7"
    assert content_keys.seal_existing(vault.rt) == 0  # resumable: nothing left


def test_a_procedure_and_a_rectified_memory_are_sealed(vault: MemoryVault,
                                                       tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember("Hal note canary-8", scope="s", subject="hal", principal=who)
    vault.subjects.rectify(r.id, "Hal corrected canary-9", principal=who)
    raw = _stored(vault, tenant, r.id)
    assert b"canary-9" not in bytes(raw["blob"])
    assert vault.get(r.id, principal=who).content == "Hal corrected canary-9"


def test_the_upsert_key_is_a_keyed_hash_and_versions_still_follow_it(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    v1 = vault.remember("Ivy lives in Paris", scope="s", subject="ivy",
                        key="ivy-home-canary-10", principal=who)
    v2 = vault.remember("Ivy lives in Rome", scope="s", subject="ivy",
                        key="ivy-home-canary-10", principal=who)
    assert v2.superseded == v1.id and v2.version == 2
    with vault.db.transaction(tenant) as conn:
        raw = conn.execute("SELECT key, key_sealed AS ks FROM memories WHERE tenant_id = %s "
                           "AND id = %s", (tenant, v2.id)).fetchone()
    assert raw is not None and raw["key"].startswith("h1:") and "canary" not in raw["key"]
    assert b"canary-10" not in bytes(raw["ks"])
    got = vault.get(v2.id, principal=who)
    assert got.key == "ivy-home-canary-10" and got.content == "Ivy lives in Rome"
    vault.subjects.erase("ivy", scope="s", principal=who)
    again = vault.remember("Ivy is back", scope="s", subject="ivy", key="ivy-home-canary-10",
                           principal=who)
    assert again.version == 1 and again.superseded is None


def test_kek_rotation_with_retire_rewraps_the_key_store(vault: MemoryVault,
                                                        tenant: str) -> None:
    """The session vault's key ring is its key file: rotate and retire for real (other
    tests' values stay readable: everything is rewrapped first)."""
    who = vault.principal(tenant)
    r = vault.remember("Jo rotation canary-11", scope="s", subject="jo", principal=who)
    store = vault.rt.sealer.store
    before = store.versions()
    assert before
    res = vault.rotate_kek(retire=True)
    new = res["kek_version"]
    assert res["content_keys"] >= 1 and res["retired"]
    assert set(store.versions()) == {new}
    assert not store.not_under(new)
    vault.rt.sealer.cache.evict(tenant, [str(_stored(vault, tenant, r.id)["key_id"])])
    assert vault.get(r.id, principal=who).content == "Jo rotation canary-11"
    with pytest.raises(MnemoError):  # the retired versions are gone from the ring
        vault.rt.keyring.kek(min(before))
