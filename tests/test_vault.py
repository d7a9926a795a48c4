"""The service: remember/recall round trip, key versioning, list, delete, atomicity."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from mnemovault.errors import Forbidden, NotFound, ValidationError
from mnemovault.vault import MemoryVault


def _audit_ops(vault: MemoryVault, tenant: str) -> list[str]:
    with vault.db.transaction(tenant) as conn:
        return [r["operation"] for r in
                conn.execute("SELECT operation FROM audit_log ORDER BY seq").fetchall()]


def test_remember_recall_round_trip(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    texts = [
        "Maya adopted a tabby cat named Pickles last spring.",
        "The quarterly budget review moved to Thursday afternoon.",
        "Maya is learning to play the cello with a teacher in Leeds.",
        "Our team switched the build system from Make to Bazel.",
    ]
    receipts = vault.remember_many(
        [{"content": t, "scope": "maya", "subject": "maya"} for t in texts], principal=who)
    assert len({r.id for r in receipts}) == 4
    assert len({r.audit_seq for r in receipts}) == 1  # one transaction, one audit row

    hits = vault.recall("what instrument is Maya learning?", scope="maya", k=2, principal=who)
    assert hits[0].memory.content == texts[2]
    assert hits[0].score >= hits[1].score
    assert hits[0].similarity is not None and 0 < hits[0].similarity <= 1

    got = vault.get(receipts[0].id, principal=who)
    assert got.content == texts[0] and got.subject == "maya" and got.status == "active"
    assert _audit_ops(vault, tenant) == ["REMEMBER"]
    # recall touched the access statistics of what it returned
    assert vault.get(hits[0].memory.id, principal=who).access_count == 1


def test_recall_only_searches_the_given_scope(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    vault.remember("Jonas likes hiking in the Alps", scope="a", principal=who)
    vault.remember("Jonas likes hiking in the Dolomites", scope="b", principal=who)
    hits = vault.recall("hiking", scope="a", k=10, principal=who)
    assert [h.memory.scope for h in hits] == ["a"]


def test_key_versioning_supersedes_and_delete_takes_all_versions(
        vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    v1 = vault.remember("Favourite colour: green", scope="u", key="fav-colour", principal=who)
    v2 = vault.remember("Favourite colour: blue", scope="u", key="fav-colour", principal=who)
    assert v2.version == 2 and v2.superseded == v1.id
    assert vault.get(v1.id, principal=who).status == "superseded"
    assert vault.get(v2.id, principal=who).parent_id == v1.id

    hits = vault.recall("favourite colour", scope="u", k=10, principal=who)
    assert [h.memory.id for h in hits] == [v2.id]
    assert [m.id for m in vault.list(scope="u", principal=who).items] == [v2.id]
    assert len(vault.list(scope="u", include_superseded=True, principal=who).items) == 2

    # the same key in another scope is independent
    other = vault.remember("Favourite colour: red", scope="w", key="fav-colour", principal=who)
    assert other.version == 1

    res = vault.delete(v2.id, principal=who)
    assert sorted(res.deleted) == sorted([v1.id, v2.id])
    for mid in (v1.id, v2.id):
        with pytest.raises(NotFound):
            vault.get(mid, principal=who)
    assert vault.get(other.id, principal=who).content == "Favourite colour: red"
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT row_bytes FROM audit_log WHERE operation = 'FORGET'").fetchone()
    assert b'"count":2' in bytes(row["row_bytes"])
    assert b"colour" not in bytes(row["row_bytes"])  # ids and counts, never content


def test_two_versions_in_one_batch(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    r = vault.remember_many([{"content": "v1", "scope": "s", "key": "k"},
                             {"content": "v2", "scope": "s", "key": "k"}], principal=who)
    assert r[1].superseded == r[0].id
    live = vault.list(scope="s", principal=who).items
    assert [m.content for m in live] == ["v2"]


def test_list_is_keyset_paginated_oldest_first(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    ids = [r.id for r in vault.remember_many(
        [{"content": f"note {i}", "scope": "p"} for i in range(7)], principal=who)]
    seen, cursor = [], None
    while True:
        page = vault.list(scope="p", limit=3, cursor=cursor, principal=who)
        seen += [m.id for m in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ids
    with pytest.raises(ValidationError) as err:
        vault.list(scope="p", limit=0, principal=who)
    assert err.value.field == "limit"


def test_created_at_is_kept_and_archived_is_excluded(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    r = vault.remember("Sailing trip around Mallorca", scope="s", created_at=when, principal=who)
    assert vault.get(r.id, principal=who).created_at == when
    with vault.db.transaction(tenant) as conn:
        conn.execute("UPDATE memories SET archived = true WHERE id = %s", (r.id,))
    assert vault.recall("sailing", scope="s", principal=who) == []
    hits = vault.recall("sailing", scope="s", principal=who,
                        filters={"include_archived": True})
    assert [h.memory.id for h in hits] == [r.id]
    hits = vault.recall("sailing", scope="s", principal=who,
                        filters={"include_archived": True,
                                 "since": when + timedelta(days=1)})
    assert hits == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": "", "scope": "s"}, "content"),
        ({"content": "   ", "scope": "s"}, "content"),
        ({"content": "x", "scope": ""}, "scope"),
        ({"content": "a\x00b", "scope": "s"}, "content"),
        ({"content": "x", "scope": "s", "type": "opinion"}, "type"),
        ({"content": "x" * 100_001, "scope": "s"}, "content"),
        ({"content": "x", "scope": "s\n"}, "scope"),
        ({"content": "x", "scope": "s", "provenance": {"tags": [""]}}, "provenance.tags"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
        vault: MemoryVault, tenant: str, kwargs: dict, field: str) -> None:
    who = vault.principal(tenant)
    with pytest.raises(ValidationError) as err:
        vault.remember(principal=who, **kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")
    assert vault.list(principal=who).items == []
    assert _audit_ops(vault, tenant) == []


def test_bad_item_in_a_batch_stores_nothing(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    with pytest.raises(ValidationError) as err:
        vault.remember_many([{"content": "fine", "scope": "s"},
                             {"content": "also fine", "scope": ""}], principal=who)
    assert err.value.field == "items.1.scope"
    assert vault.list(principal=who).items == []


def test_failure_inside_the_transaction_leaves_nothing(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemovault.audit import log as audit_log

    def broken_append(*args: object, **kwargs: object) -> int:
        raise RuntimeError("injected failure in the audit step")

    monkeypatch.setattr(audit_log, "append", broken_append)
    who = vault.principal(tenant)
    with pytest.raises(RuntimeError):
        vault.remember("should not survive", scope="s", principal=who)
    monkeypatch.undo()
    with psycopg.connect(vault.db.url) as conn:
        n = conn.execute("SELECT count(*) FROM memories WHERE tenant_id = %s",
                         (tenant,)).fetchone()[0]
    assert n == 0


def test_recall_validation(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    for kwargs, field in [({"query": " ", "scope": "s"}, "query"),
                          ({"query": "x", "scope": "s", "k": 0}, "k"),
                          ({"query": "x", "scope": "s", "k": 101}, "k")]:
        with pytest.raises(ValidationError) as err:
            vault.recall(principal=who, **kwargs)
        assert err.value.field == field
    with pytest.raises(ValidationError) as err:
        vault.recall("x", scope="s", filters={"colour": "red"}, principal=who)
    assert err.value.field == "filters.colour"


def test_service_role_cannot_delete(vault: MemoryVault, tenant: str) -> None:
    r = vault.remember("keep me", scope="s", principal=vault.principal(tenant))
    with pytest.raises(Forbidden) as err:
        vault.delete(r.id, principal=vault.principal(tenant, role="service"))
    assert "memory:forget" in str(err.value)
    assert vault.get(r.id, principal=vault.principal(tenant)).content == "keep me"


def test_delete_of_unknown_id_writes_nothing(vault: MemoryVault, tenant: str) -> None:
    res = vault.delete(uuid.uuid4(), principal=vault.principal(tenant))
    assert res.deleted == [] and len(res.not_found) == 1 and res.audit_seq is None
    with pytest.raises(ValidationError) as err:
        vault.delete("not-a-uuid", principal=vault.principal(tenant))
    assert err.value.field == "ids.0"


def test_audit_chain_links_rows(vault: MemoryVault, tenant: str) -> None:
    import hashlib

    who = vault.principal(tenant)
    for i in range(3):
        vault.remember(f"entry {i}", scope="s", principal=who)
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT seq, row_bytes, prev_hash, row_hash FROM audit_log "
                            "ORDER BY seq").fetchall()
    prev = bytes(32)
    for n, row in enumerate(rows, start=1):
        assert row["seq"] == n
        assert bytes(row["prev_hash"]) == prev
        assert bytes(row["row_hash"]) == hashlib.sha256(prev + bytes(row["row_bytes"])).digest()
        prev = bytes(row["row_hash"])
