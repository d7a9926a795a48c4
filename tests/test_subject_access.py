"""Access and portability (issue 10, item 3): a subject's listing is exactly what an erase
would remove, oldest id first, keyset paged, pending and archived included, never an
embedding; bad arguments name the field; the export follows the committed JSON Schema and
resolves placeholders only for ``pii:reveal``, audited."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.cli import app as cli_app
from mnemovault.errors import Forbidden, ValidationError
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault
from tests import lexical
from tests.subjects_world import audit_rows, build, memory_ids

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "schemas"
                     / "subject-export.schema.json").read_text())


def test_listing_pages_in_id_order_with_every_status(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    who = vault.principal(tenant)
    seen, cursor, pages = [], None, 0
    while True:
        page = vault.subjects.list(w.ada, scope="s", limit=4, cursor=cursor, principal=who)
        assert len(page.items) <= 4
        seen += page.items
        pages += 1
        if page.next_cursor is None:
            break
        assert page.next_cursor == page.items[-1].id
        cursor = page.next_cursor
    assert pages == 2
    assert [m.id for m in seen] == w.ada_s
    assert {m.status for m in seen} == {"active", "pending_review", "superseded"}
    assert any(m.archived for m in seen)
    assert all("embedding" not in m.model_dump() for m in seen)
    # by the original value and by the placeholder it is stored as: the same set
    ph = seen[0].subject
    assert ph is not None and ph.startswith("{email:")
    assert [m.id for m in vault.subjects.list(ph, scope="s", limit=100,
                                              principal=who).items] == w.ada_s
    er = vault.subjects.erase(w.ada, scope="s", principal=who)
    assert sorted(er.deleted) == [m.id for m in seen]


def test_bad_arguments_name_the_field(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    cases = [({"subject": " "}, "subject"), ({"scope": ""}, "scope"),
             ({"limit": 0}, "limit"), ({"limit": 101}, "limit"),
             ({"limit": True}, "limit"), ({"cursor": "not-a-uuid"}, "cursor")]
    for change, field in cases:
        args = {"subject": "ada", "scope": "s", "limit": 10, "cursor": None, **change}
        with pytest.raises(ValidationError) as info:
            vault.subjects.list(args.pop("subject"), principal=who, **args)
        assert info.value.field == field, change
    with pytest.raises(ValidationError) as info:
        vault.subjects.export("", scope="s", principal=who)
    assert info.value.field == "subject"
    client = TestClient(create_app(vault))
    token, _ = vault.create_key(tenant, "member")
    h = {"Authorization": f"Bearer {token}"}
    for params, field in (({"scope": "s", "limit": 0}, "limit"),
                          ({"scope": "s", "cursor": "nope"}, "cursor"), ({}, "scope")):
        r = client.get("/v1/subjects/ada/memories", params=params, headers=h)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field


def test_a_limited_key_sees_only_its_subject(vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    token, _ = vault.create_key(tenant, "member", subject=w.bob)
    limited = vault.authenticate(token)
    assert len(vault.subjects.list(w.bob, scope="s", principal=limited).items) == 1
    with pytest.raises(Forbidden):
        vault.subjects.list(w.ada, scope="s", principal=limited)


def test_export_follows_the_schema_and_reveals_only_for_pii_reveal(
        vault: MemoryVault, tenant: str) -> None:
    w = build(vault, tenant)
    owner = vault.principal(tenant)
    plain = vault.subjects.export(w.ada, scope="s", principal=owner)
    jsonschema.validate(plain, SCHEMA)
    assert [m["id"] for m in plain["memories"]] == [str(i) for i in w.ada_s]
    text = json.dumps(plain)
    assert w.ada not in text and w.private not in text  # placeholders only
    assert plain["revealed"] is False and all("value" not in e for e in plain["vault_entries"])
    fact = next(m for m in plain["memories"] if m["reason"] == "derived")
    assert fact["derived_from"] == [str(w.ada_s[0])]
    with pytest.raises(Forbidden) as info:  # admins hold subject:erase but not pii:reveal
        vault.subjects.export(w.ada, scope="s", reveal=True,
                              principal=vault.principal(tenant, "admin"))
    assert info.value.details["permission"] == "pii:reveal"
    with pytest.raises(Forbidden) as info:
        vault.subjects.export(w.ada, scope="s", principal=vault.principal(tenant, "member"))
    assert info.value.details["permission"] == "subject:erase"
    reveals = sum(b'"REVEAL"' in r for r in audit_rows(vault, tenant))
    shown = vault.subjects.export(w.ada, scope="s", reveal=True, principal=owner)
    jsonschema.validate(shown, SCHEMA)
    assert shown["subject"] == w.ada
    assert w.private in json.dumps(shown["memories"])
    assert {e["value"] for e in shown["vault_entries"]} >= {w.ada, w.private}
    assert sum(b'"REVEAL"' in r for r in audit_rows(vault, tenant)) == reveals + 1
    assert sum(b'"SUBJECT_EXPORT"' in r for r in audit_rows(vault, tenant)) == 2
    # after an erase, the shredded value reads [erased] for everyone
    er = vault.subjects.erase(w.ada, scope="t", principal=owner)
    assert er.shredded == []  # Ada's address is still used in scope s
    vault.shred([next(e["placeholder"] for e in plain["vault_entries"]
                      if e["placeholder"] in plain["memories"][0]["content"]
                      and e["placeholder"] != plain["memories"][0]["subject"])],
                principal=owner)
    again = vault.subjects.export(w.ada, scope="s", reveal=True, principal=owner)
    assert "[erased]" in again["memories"][0]["content"]
    jsonschema.validate(again, SCHEMA)


def test_export_over_http_and_cli(vault: MemoryVault, tenant: str, tmp_path: Path) -> None:
    w = build(vault, tenant)
    token, _ = vault.create_key(tenant, "admin")
    client = TestClient(create_app(vault))
    r = client.get(f"/v1/subjects/{w.ada}/export", params={"scope": "s"},
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), SCHEMA)
    out = tmp_path / "export.json"
    res = CliRunner().invoke(cli_app, ["--data-dir", str(vault.settings.data_dir), "--tenant",
                                       tenant, "export-subject", "--subject", w.ada,
                                       "--scope", "s", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert len(doc["memories"]) == len(w.ada_s) == json.loads(res.stdout)["memories"]
    assert uuid.UUID(doc["memories"][0]["id"]) == w.ada_s[0]


def test_the_listing_equals_the_forget_walk_from_every_own_memory(
        vault: MemoryVault, tenant: str) -> None:
    """Versions under another subject, derived facts of derived facts, a parent outside:
    the paged listing (which never ships the subject's ids) equals what the erase removes:
    the subject's own rows of a version chain and what is derived from them, never
    another subject's versions (test_breaks_today defect 1); the generic forget walk by
    id from the same memories still takes every version."""
    from mnemovault.governance import forget as forget_mod

    who = vault.principal(tenant)
    own = [vault.remember(f"own {n}", scope="s", subject="cy", principal=who).id
           for n in range(5)]
    k1 = vault.remember("shared key v1", scope="s", subject="dee", key="k", principal=who).id
    k2 = vault.remember("shared key v2", scope="s", subject="cy", key="k", principal=who).id
    k3 = vault.remember("shared key v3", scope="s", subject="eve", key="k", principal=who).id
    f1 = vault.remember("fact 1", scope="s", type="fact", derived_from=[own[1]],
                        principal=who).id
    f2 = vault.remember("fact of fact", scope="s", type="fact", subject="dee",
                        derived_from=[f1], principal=who).id
    f3 = vault.remember("fact of a version", scope="s", type="fact", derived_from=[k3],
                        principal=who).id
    untouched = vault.remember("dee alone", scope="s", subject="dee", principal=who).id
    with vault.db.transaction(tenant) as conn:
        by_id = forget_mod.resolve(conn, [*own, k2]).all
    listed, cursor = [], None
    while True:
        page = vault.subjects.list("cy", scope="s", limit=3, cursor=cursor, principal=who)
        listed += [m.id for m in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert by_id == sorted({*own, k1, k2, k3, f1, f2, f3})
    assert listed == sorted({*own, k2, f1, f2})
    assert untouched not in listed
    er = vault.subjects.erase("cy", scope="s", principal=who)
    assert sorted(er.deleted) == listed
    assert er.receipt["counts"]["versions"] == 0 and er.receipt["counts"]["derived"] == 2


def _pages(vault: MemoryVault, subject: str, limit: int, who: object) -> list[uuid.UUID]:
    listed: list[uuid.UUID] = []
    cursor = None
    while True:
        page = vault.subjects.list(subject, scope="s", limit=limit, cursor=cursor,
                                   principal=who)
        assert len(page.items) <= limit
        listed += [m.id for m in page.items]
        if page.next_cursor is None:
            return listed
        assert page.next_cursor == page.items[-1].id
        cursor = page.next_cursor


def _extras_world(vault: MemoryVault, tenant: str) -> dict[str, Any]:
    """Subject ``cy`` in scope ``s`` with memories outside it that its erase reaches, placed
    all over the id order: a version (another subject's older row of a key whose later row
    is derived from cy) older than all of cy's rows, a fact derived from cy's first row
    written right after it, one written last, one in another scope of cy, a fact of a fact,
    and one inserted (as the owner) with an id smaller than every other row although its
    source is cy's last row (lineage across scopes and against the id order: no write
    path makes it, an import or a restore could); plus rows of other subjects in between
    that stay."""
    who = vault.principal(tenant)
    mem = lambda content, **kw: vault.remember(content, principal=who, **kw).id  # noqa: E731
    w: dict[str, Any] = {}
    w["old_version"] = mem("dee's fact, first version", scope="s", subject="dee", key="kf")
    own = [mem("cy 0", scope="s", subject="cy")]
    w["early_fact"] = mem("early fact", scope="s", type="fact", derived_from=[own[0]])
    stay = [mem("dee alone", scope="s", subject="dee")]
    for n in range(1, 8):
        own.append(mem(f"cy {n}", scope="s", subject="cy"))
        stay.append(mem(f"eve {n}", scope="s", subject="eve"))
    w["new_version"] = mem("dee's fact, second version", scope="s", subject="dee", key="kf",
                           derived_from=[own[3]])
    w["other_scope"] = mem("cy elsewhere", scope="t", subject="cy", type="fact")
    w["fact_of_fact"] = mem("fact of a fact", scope="s", subject="eve", type="fact",
                            derived_from=[w["early_fact"]])
    w["late_fact"] = mem("late fact", scope="s", type="fact", derived_from=[own[0]])
    stay.append(mem("eve at the end", scope="s", subject="eve"))
    tiny = uuid.UUID(int=1)
    with vault.db.transaction(tenant) as conn:
        tiny_terms = lexical.doc(vault, conn, "a fact with a tiny id")
    with owner_connection(vault.db.url, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO memories (tenant_id, id, scope, subject_id, type, content, embedding, "
            "tsv, tsv_length) SELECT tenant_id, %s, scope, NULL, 'fact', "
            "'a fact with a tiny id', embedding, %s, %s "
            "FROM memories WHERE tenant_id = %s AND id = %s",
            (tiny, *tiny_terms, tenant, own[-1]))
        conn.execute("INSERT INTO memory_lineage (tenant_id, memory_id, source_id) "
                     "VALUES (%s, %s, %s), (%s, %s, %s)",
                     (tenant, tiny, own[-1], tenant, w["other_scope"], own[5]))
    w["tiny_id_fact"] = tiny
    w["own"], w["stay"] = own, stay
    return w


def test_extras_anywhere_in_the_id_order_appear_once_on_every_page_size(
        vault: MemoryVault, tenant: str) -> None:
    """Derived facts with ids before and after the cursor, a version row, a fact with an id
    smaller than its source, another scope: every page size lists each exactly once, in
    id order, and the whole listing is what the erase removes."""
    from mnemovault.governance import forget as forget_mod
    from mnemovault.subjects.erase import target_of

    w = _extras_world(vault, tenant)
    who = vault.principal(tenant)
    extras = {w[k] for k in ("old_version", "early_fact", "new_version", "other_scope",
                             "fact_of_fact", "late_fact", "tiny_id_fact")}
    expected = sorted({*w["own"], *extras})
    with vault.db.transaction(tenant) as conn:
        from mnemovault.pii import service as pii
        target = target_of("s", "cy", pii.Translator(vault.rt, conn, tenant),
                           vault.rt.pii.tenant_keys(conn, tenant))
        res = forget_mod.resolve_target(conn, target)
    assert res.all == expected  # the world is what it says: the forward walk agrees
    assert w["old_version"] in res.derived  # a version of a derived fact counts as derived
    for limit in (1, 2, 3, 4, 7, 100):
        listed = _pages(vault, "cy", limit, who)
        assert listed == expected, limit  # sorted, each once
    er = vault.subjects.erase("cy", scope="s", principal=who)
    assert sorted(er.deleted) == expected
    assert set(w["stay"]) <= memory_ids(vault, tenant)


def test_a_crowded_window_falls_back_to_the_walk_from_the_target(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past WINDOW_CAP rows outside the target in a page's window, the page comes from the
    walk from the whole target: the same pages."""
    from mnemovault.store import subjects as subject_store

    w = _extras_world(vault, tenant)
    who = vault.principal(tenant)
    before = _pages(vault, "cy", 2, who)
    calls: list[bool] = []
    real = subject_store.extras_in_window

    def spy(*args: Any, **kw: Any) -> list[uuid.UUID] | None:
        out = real(*args, **kw)
        calls.append(out is None)
        return out

    monkeypatch.setattr(subject_store, "WINDOW_CAP", 1)
    monkeypatch.setattr(subject_store, "extras_in_window", spy)
    assert _pages(vault, "cy", 2, who) == before
    assert any(calls)  # the fallback ran
    assert len(before) == len(w["own"]) + 7


def test_a_key_narrowed_to_a_subject_lists_only_what_it_may(
        vault: MemoryVault, tenant: str) -> None:
    """A key limited to subject cy lists cy's rows and the extras of subject cy (another
    scope), never the extras of other subjects or of none; limited to scope s as well, not
    even those; on every page size."""
    w = _extras_world(vault, tenant)
    token, _ = vault.create_key(tenant, "member", subject="cy")
    by_subject = vault.authenticate(token)
    for limit in (1, 3, 100):
        assert _pages(vault, "cy", limit, by_subject) == sorted([*w["own"], w["other_scope"]])
    token, _ = vault.create_key(tenant, "member", subject="cy", scope="s")
    narrow = vault.authenticate(token)
    for limit in (1, 3, 100):
        assert _pages(vault, "cy", limit, narrow) == w["own"]
    with pytest.raises(Forbidden):
        vault.subjects.list("dee", scope="s", principal=narrow)
    assert len(_pages(vault, "cy", 5, vault.principal(tenant))) == len(w["own"]) + 7


def test_the_listing_never_loads_the_known_entity_index(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing by a subject written as a known person's name (stored as a placeholder)
    finds the same rows without building the tenant's known-entity index."""
    from mnemovault.pii.vault import PiiVault

    who = vault.principal(tenant)
    name = f"Zelda Quimby{uuid.uuid4().hex[:4]}"
    vault.remember("pool", scope="pool", entities=[{"kind": "person", "value": name}],
                   principal=who)
    ids = sorted(vault.remember(f"{name} note {n}", scope="s", subject=name,
                                principal=who).id for n in range(3))
    vault.remember("someone else", scope="s", subject="zed", principal=who)

    def boom(*args: Any, **kw: Any) -> Any:
        raise AssertionError("known-entity index loaded")

    monkeypatch.setattr(PiiVault, "known_index", boom)
    page = vault.subjects.list(f"  {name.upper()}  ".strip(), scope="s", principal=who)
    assert [m.id for m in page.items] == ids
    assert page.items[0].subject is not None and page.items[0].subject.startswith("{person:")
    assert vault.subjects.list("nobody known", scope="s", principal=who).items == []
