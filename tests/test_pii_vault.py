"""The PII vault through the service: placeholders, nothing plaintext on disk, reveal,
crypto-shredding, KEK rotation with retirement, tampering, streaming."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg
import pytest

from mnemovault.errors import Forbidden
from mnemovault.pii.crypto import DecryptionError, Sealed, dek_aad, open_sealed, value_aad
from mnemovault.pii.vault import PLACEHOLDER_RE, StreamRevealer
from mnemovault.vault import MemoryVault


def _unique() -> str:
    return uuid.uuid4().hex[:8]


def test_placeholders_replace_detected_values_everywhere(vault: MemoryVault,
                                                         tenant: str) -> None:
    who = vault.principal(tenant)
    u = _unique()
    email = f"zora.{u}@example.org"
    r = vault.remember(f"Write to {email} about the lease", scope="s", subject=email,
                       key=f"contact {email}", provenance={"tags": [email]}, principal=who)
    assert len(r.placeholders) == 1 and r.placeholders[0].startswith("{email:p_")
    m = vault.get(r.id, principal=who)
    ph = r.placeholders[0]
    assert m.content == f"Write to {ph} about the lease"
    assert m.subject == ph and m.key == f"contact {ph}" and m.provenance["tags"] == [ph]
    # the same value gives the same placeholder; lookups by the original value work
    r2 = vault.remember(f"{email.upper()} replied", scope="s", principal=who)
    assert r2.placeholders == []  # nothing new was created
    assert vault.get(r2.id, principal=who).content == f"{ph} replied"
    assert [x.id for x in vault.list(subject=email, principal=who).items] == [r.id]
    hits = vault.recall(f"mail to {email}", scope="s", principal=who,
                        filters={"subject": email})
    assert [h.memory.id for h in hits] == [r.id]


def test_another_tenant_gets_another_placeholder(vault: MemoryVault, tenant: str) -> None:
    email = f"kim.{_unique()}@example.net"
    a = vault.remember(f"mail {email}", scope="s", principal=vault.principal(tenant))
    other = tenant + "-o"
    b = vault.remember(f"mail {email}", scope="s", principal=vault.principal(other))
    assert a.placeholders and b.placeholders and a.placeholders != b.placeholders
    # tenant B cannot reveal tenant A's placeholder: it is not in B's vault
    with vault.db.transaction(other) as conn:
        assert vault.pii.reveal_values(conn, other, a.placeholders) == {}


def test_known_entities_are_recognised_later(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    name = f"Odalys {_unique().capitalize()}"
    first = vault.remember("Met the new neighbour today", scope="s", principal=who,
                           entities=[{"kind": "person", "value": name}])
    assert len(first.placeholders) == 1 and first.placeholders[0].startswith("{person:p_")
    later = vault.remember(f"{name.upper()}\n lent us a ladder;  {name.lower()} is kind",
                           scope="s", principal=who)
    content = vault.get(later.id, principal=who).content
    assert name.lower() not in content.lower()
    assert content.count(first.placeholders[0]) == 2


def test_nothing_plaintext_on_disk(vault: MemoryVault, tenant: str,
                                   data_dir: Path) -> None:
    who = vault.principal(tenant)
    u = _unique()
    originals = [f"ingrid.{u}@example.com", "+44 20 7946 0958", "GB82 WEST 1234 5698 7654 32",
                 f"Bartholomew Quist{u}"]
    vault.remember(f"Ingrid ({originals[0]}, {originals[1]}) pays from {originals[2]}",
                   scope="disk", principal=who,
                   entities=[{"kind": "person", "value": originals[3]}])
    vault.remember(f"{originals[3]} called about the invoice", scope="disk", principal=who)
    vault.recall(f"what did {originals[3]} call about?", scope="disk", principal=who)
    with psycopg.connect(vault.db.url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    needles = [o.encode() for o in originals] + [originals[2].replace(" ", "").encode()]
    hits = []
    for path in (data_dir / "pg").rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            hits += [(str(path), n) for n in needles if n in blob]
    assert hits == [], hits


def test_reveal_needs_permission_and_is_audited(vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    email = f"pax.{_unique()}@example.org"
    r = vault.remember(f"Pax writes from {email}", scope="s", principal=owner)
    for role in ("admin", "member", "service"):
        with pytest.raises(Forbidden) as err:
            vault.get(r.id, reveal=True, principal=vault.principal(tenant, role=role))
        assert err.value.details["permission"] == "pii:reveal"
    assert vault.get(r.id, reveal=True, principal=owner).content == f"Pax writes from {email}"
    hits = vault.recall("who writes?", scope="s", reveal=True, principal=owner)
    assert hits[0].memory.content == f"Pax writes from {email}"
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT row_bytes FROM audit_log WHERE operation = 'REVEAL'"
                            ).fetchall()
    assert len(rows) == 2
    for row in rows:  # audit rows name placeholders, never values
        assert email.encode() not in bytes(row["row_bytes"])
        assert b"{email:p_" in bytes(row["row_bytes"])


def test_shred_erases_everywhere_and_the_value_gets_a_new_placeholder(
        vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    email = f"vesna.{_unique()}@example.org"
    r = vault.remember(f"Vesna: {email}", scope="s", principal=owner)
    ph = r.placeholders[0]
    assert vault.shred([ph], principal=owner) == [ph]
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT ciphertext, fingerprint, shredded_at FROM pii_values "
                           "WHERE placeholder = %s", (ph,)).fetchone()
        assert row["ciphertext"] is None and row["fingerprint"] is None
        assert row["shredded_at"] is not None
        assert conn.execute("SELECT count(*) AS n FROM pii_deks WHERE placeholder = %s",
                            (ph,)).fetchone()["n"] == 0
    for who, reveal in ((owner, True), (owner, False),
                        (vault.principal(tenant, role="member"), False)):
        assert vault.get(r.id, principal=who, reveal=reveal).content == "Vesna: [erased]"
    again = vault.remember(f"Vesna again: {email}", scope="s", principal=owner)
    assert again.placeholders and again.placeholders[0] != ph
    assert vault.get(r.id, principal=owner, reveal=True).content == "Vesna: [erased]"
    assert vault.get(again.id, principal=owner, reveal=True).content.endswith(email)
    # shredding needs subject:erase
    with pytest.raises(Forbidden):
        vault.shred(again.placeholders, principal=vault.principal(tenant, role="member"))


def test_retired_kek_cannot_open_a_dumped_wrapped_dek(vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    email = f"ulla.{_unique()}@example.org"
    r = vault.remember(f"Ulla {email}", scope="s", principal=owner)
    ph = r.placeholders[0]
    with vault.db.transaction(tenant) as conn:  # what a pg_dump taken now would hold
        dumped = conn.execute("SELECT kek_version, nonce, wrapped_dek FROM pii_deks "
                              "WHERE placeholder = %s", (ph,)).fetchone()
    old_version = dumped["kek_version"]
    assert vault.shred([ph], principal=owner) == [ph]
    res = vault.rotate_kek(retire=True)
    assert old_version in res["retired"] and old_version not in vault.keyring.keys
    sealed = Sealed(bytes(dumped["nonce"]), bytes(dumped["wrapped_dek"]))
    for version, key in vault.keyring.keys.items():
        with pytest.raises(DecryptionError):
            open_sealed(key, sealed, dek_aad(tenant, ph, version))
        with pytest.raises(DecryptionError):
            open_sealed(key, sealed, dek_aad(tenant, ph, old_version))
    # values that were not shredded still reveal after the rotation
    other = vault.remember(f"Ulla's colleague: x{email}", scope="s", principal=owner)
    assert vault.get(other.id, reveal=True, principal=owner).content.endswith("x" + email)


def test_moved_ciphertext_fails_to_decrypt(vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    a = vault.remember(f"a.{_unique()}@example.org", scope="s", principal=owner).placeholders[0]
    b = vault.remember(f"b.{_unique()}@example.org", scope="s", principal=owner).placeholders[0]
    with vault.db.transaction(tenant) as conn:
        rows = {r["placeholder"]: r for r in conn.execute(
            "SELECT v.placeholder, v.nonce, v.ciphertext, d.kek_version, d.nonce AS dn, "
            "d.wrapped_dek FROM pii_values v JOIN pii_deks d USING (tenant_id, placeholder) "
            "WHERE v.placeholder = ANY(%s)", ([a, b],)).fetchall()}
    ra = rows[a]
    key = vault.keyring.kek(ra["kek_version"])
    dek = open_sealed(key, Sealed(bytes(ra["dn"]), bytes(ra["wrapped_dek"])),
                      dek_aad(tenant, a, ra["kek_version"]))
    value = Sealed(bytes(ra["nonce"]), bytes(ra["ciphertext"]))
    assert open_sealed(dek, value, value_aad(tenant, a)).endswith(b"@example.org")
    with pytest.raises(DecryptionError):  # moved to another placeholder
        open_sealed(dek, value, value_aad(tenant, b))
    with pytest.raises(DecryptionError):  # moved to another tenant
        open_sealed(dek, value, value_aad(tenant + "x", a))
    with pytest.raises(DecryptionError):  # wrapped key moved to another placeholder
        open_sealed(key, Sealed(bytes(ra["dn"]), bytes(ra["wrapped_dek"])),
                    dek_aad(tenant, b, ra["kek_version"]))


def test_placeholder_typed_by_a_user_is_text(vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    typed = "{email:p_0123456789}"
    r = vault.remember(f"my code is {typed}", scope="s", principal=owner)
    assert r.placeholders == []
    assert vault.get(r.id, reveal=True, principal=owner).content == f"my code is {typed}"


@pytest.mark.parametrize("text", [
    "to {email:p_0123456789} and {phone:p_abcdef0123}!",
    "{person:p_0000000000}{person:p_0000000000}",
    "braces { not {a placeholder} {email:p_01234} end {",
])
def test_stream_revealer_resolves_every_split(text: str) -> None:
    values = {"{email:p_0123456789}": "ann@example.org", "{phone:p_abcdef0123}": "[erased]",
              "{person:p_0000000000}": "Ada"}
    expected = PLACEHOLDER_RE.sub(lambda m: values.get(m.group(0), m.group(0)), text)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            r = StreamRevealer(lambda p: values.get(p, p))
            pieces = [r.feed(text[:i]), r.feed(text[i:j]), r.feed(text[j:]), r.flush()]
            assert "".join(pieces) == expected
            for piece in pieces[:-1]:  # never half a placeholder or half a value
                assert not re.search(r"\{[a-z_]*:p_[0-9a-f]*$", piece)


def test_a_lost_key_file_is_refused_not_replaced(vault: MemoryVault, tenant: str,
                                                 settings: object, tmp_path: Path) -> None:
    vault.remember(f"keyed {uuid.uuid4().hex[:6]}@example.org", scope="s",
                   principal=vault.principal(tenant))
    from mnemovault.config import Settings
    from mnemovault.errors import ConfigError

    assert isinstance(settings, Settings)
    wrong = tmp_path / "elsewhere" / "kek.json"
    with pytest.raises(ConfigError) as err:
        MemoryVault.open(settings.model_copy(update={"kek_file": wrong}))
    assert "KEK version" in str(err.value) and str(wrong) in str(err.value)
    assert not wrong.exists()  # the key file it would have created is gone again
