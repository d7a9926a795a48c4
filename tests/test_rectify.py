"""Rectification (issue 10, item 4): a memory's content is replaced in place by a new
version (re-pseudonymised, re-embedded), the old text is not kept anywhere in the tables,
vault values only it used are shredded, and the change is audited (``subject:erase``)."""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.errors import Conflict, Forbidden, NotFound, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.vault import MemoryVault
from tests.subjects_world import audit_rows, counts


def _u() -> str:
    return uuid.uuid4().hex[:8]


def test_rectify_replaces_the_content_and_shreds_what_only_it_used(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    u = _u()
    old_mail, new_mail, kept = f"wrong{u}@example.org", f"right{u}@example.org", f"k{u}@x.org"
    m = vault.remember(f"Ada's email is {old_mail}, her friend {kept} knows zebra{u}",
                       scope="s", subject="ada", principal=who)
    other = vault.remember(f"{kept} is a friend", scope="s", principal=who)
    before = counts(vault, tenant)
    res = vault.subjects.rectify(m.id, f"Ada's email is {new_mail}, her friend {kept} "
                                 f"knows giraffe{u}", principal=who)
    assert res.id == m.id and res.version == 2
    got = vault.get(m.id, principal=who, reveal=True)
    assert new_mail in got.content and old_mail not in got.content
    assert got.version == 2 and got.status == "active"
    # in place; the stretch before the correction is a version of its own (valid time,
    # issue 23), holding the corrected text: the old one is kept nowhere
    assert counts(vault, tenant)["memories"] == before["memories"] + 1
    assert res.history is not None
    hist = vault.get(res.history, principal=who, reveal=True)
    assert hist.status == "superseded" and new_mail in hist.content
    assert hist.valid_to == got.valid_from == res.valid_from
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT content FROM memories").fetchall()
        assert not any(f"zebra{u}" in r["content"] for r in rows)  # the old text is gone
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE id = %s",
                            (m.id,)).fetchone()["n"] == 1
    # the old address was used only by the old text: shredded; the friend's is kept
    assert len(res.shredded) == 1
    assert vault.placeholder_outputs(res.shredded, principal=who) == {
        res.shredded[0]: "[erased]"}
    assert kept in vault.get(other.id, principal=who, reveal=True).content
    assert len(res.placeholders) == 1  # the new address got a vault entry
    # re-embedded: recall finds the new wording
    hits = vault.recall(f"giraffe{u}", scope="s", k=1, principal=who)
    assert hits and hits[0].memory.id == m.id
    row = json.loads(next(r for r in audit_rows(vault, tenant) if b'"RECTIFY"' in r))
    assert row["memory_ids"] == [str(m.id)] and row["details"]["version"] == 2
    blob = b"".join(audit_rows(vault, tenant))
    for needle in (old_mail, new_mail, f"zebra{u}", f"giraffe{u}"):
        assert needle.encode() not in blob
    with vault.db.transaction(tenant) as conn:
        led = conn.execute("SELECT kind, rectified, placeholders FROM erasure_ledger "
                           "WHERE kind = 'rectify'").fetchall()
    assert led == [{"kind": "rectify", "rectified": [m.id], "placeholders": res.shredded}]


def test_rectify_rules(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    m = vault.remember("Ada likes tea", scope="s", subject="ada", principal=who)
    with pytest.raises(Forbidden) as info:
        vault.subjects.rectify(m.id, "Ada likes coffee",
                               principal=vault.principal(tenant, "member"))
    assert info.value.details["permission"] == "subject:erase"
    with pytest.raises(ValidationError) as v:
        vault.subjects.rectify(m.id, "   ", principal=who)
    assert v.value.field == "content"
    with pytest.raises(ValidationError) as v:
        vault.subjects.rectify("nope", "x", principal=who)
    assert v.value.field == "id"
    other = f"o{_u()}"
    vault.ensure_tenant(other)
    with pytest.raises(NotFound):
        vault.subjects.rectify(m.id, "Ada likes coffee", principal=vault.principal(other))
    token, _ = vault.create_key(tenant, "admin", subject="bob")
    with pytest.raises((NotFound, Forbidden)):
        vault.subjects.rectify(m.id, "Ada likes coffee", principal=vault.authenticate(token))
    assert vault.get(m.id, principal=who).content == "Ada likes tea"


def test_rectify_conflicts_with_an_erase_of_its_subject(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    who = vault.principal(tenant)
    m = vault.remember("Ada likes tea", scope="s", subject="ada", principal=who)
    inside, release = threading.Event(), threading.Event()
    orig = forget_mod._step_collect

    def slow(conn: object, run: object) -> None:
        orig(conn, run)  # type: ignore[arg-type]
        inside.set()
        release.wait(30)

    monkeypatch.setattr(forget_mod, "_step_collect", slow)
    t = threading.Thread(target=lambda: vault.subjects.erase("ada", scope="s", principal=who))
    t.start()
    assert inside.wait(30)
    with pytest.raises(Conflict):
        vault.subjects.rectify(m.id, "Ada likes coffee", principal=who)
    release.set()
    t.join(30)


def test_rectify_over_http(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    m = vault.remember("The plan is Tuesday", scope="s", principal=who)
    token, _ = vault.create_key(tenant, "admin")
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    r = client.put(f"/v1/memories/{m.id}/content", json={"content": "The plan is Monday"},
                   headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 2
    assert vault.get(m.id, principal=who).content == "The plan is Monday"
    r = client.put(f"/v1/memories/{uuid.uuid4()}/content", json={"content": "x"}, headers=h)
    assert r.status_code == 404
