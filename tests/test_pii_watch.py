"""The PII watch (SPEC section 3, issue 23 item 4): a value that became known after records
holding it were stored is replaced by its placeholder in those records (content, vector,
keyed terms), audited by ids and counts, incrementally, and never in another tenant or a
record whose key was destroyed."""

from __future__ import annotations

import json
import random
import string
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.cli import app as cli_app
from mnemovault.errors import Forbidden
from mnemovault.recall import terms
from mnemovault.vault import MemoryVault
from tests.subjects_world import audit_rows


def _name() -> str:
    """A made-up name nothing else in the database holds (letters only: one word lexeme)."""
    rnd = random.Random(uuid.uuid4().int)
    return "Q" + "".join(rnd.choice(string.ascii_lowercase) for _ in range(9))


def _row(vault: MemoryVault, tenant: str, mid: Any) -> dict[str, Any]:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT id, key_id, content_sealed AS blob, embedding::text AS emb, "
                           "version, tsv::text AS tsv FROM memories WHERE id = %s",
                           (mid,)).fetchone()
    assert row is not None
    return dict(row)


def _posted(vault: MemoryVault, tenant: str, mid: Any, word: str) -> bool:
    """Whether the postings of ``mid`` hold the keyed hash of ``word``'s lexeme."""
    with vault.db.transaction(tenant) as conn:
        key = terms.tenant_key(vault.pii, conn, tenant, create=False)
        assert key is not None
        (lexeme,) = terms.query(key, word)
        row = conn.execute("SELECT count(*) AS n FROM lexical_postings WHERE memory_id = %s "
                           "AND lexeme = %s", (mid, lexeme)).fetchone()
    return bool(row and row["n"])


def _df(vault: MemoryVault, tenant: str, scope: str, word: str) -> int:
    """The BM25 document frequency of ``word``'s keyed lexeme in ``scope`` (base rows plus
    the deltas not folded yet)."""
    with vault.db.transaction(tenant) as conn:
        key = terms.tenant_key(vault.pii, conn, tenant, create=False)
        assert key is not None
        (lexeme,) = terms.query(key, word)
        row = conn.execute(
            "SELECT coalesce((SELECT df FROM lexical_df WHERE scope = %(s)s AND lexeme = "
            "%(l)s), 0) + coalesce((SELECT sum(n) FROM lexical_stat_deltas WHERE scope = "
            "%(s)s AND lexeme = %(l)s), 0) AS df", {"s": scope, "l": lexeme}).fetchone()
    assert row is not None
    return int(row["df"])


def _watch_rows(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    return [json.loads(r) for r in audit_rows(vault, tenant) if b'"PII_WATCH"' in r]


def _all_contents(vault: MemoryVault, tenant: str, scope: str) -> list[str]:
    who = vault.principal(tenant)
    out, cursor = [], None
    while True:
        page = vault.list(scope=scope, limit=1, cursor=cursor, principal=who)
        out += [m.content for m in page.items]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def test_an_earlier_record_gets_the_placeholder(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    name, other_name = _name(), _name()
    early = vault.remember(f"Met {name} at the harbour to talk about the blue boat",
                           scope="s", subject="ada", principal=who)
    bystander = vault.remember(f"{other_name} painted the fence", scope="s", principal=who)
    # another tenant holds the same name in plain text, and never learns it
    other = f"o{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(other)
    theirs = vault.remember(f"{name} sold the boat", scope="s", principal=vault.principal(other))
    before = _row(vault, tenant, early.id)
    assert name in vault.get(early.id, principal=who).content  # not known yet: plain
    assert _posted(vault, tenant, early.id, name)
    assert _df(vault, tenant, "s", name) == 1

    later = vault.remember(f"{name} called about the boat again", scope="s",
                           entities=[{"kind": "person", "value": name}], principal=who)
    placeholder = later.placeholders[0]
    assert vault.pii_watch.run(principal=who, dry_run=True, settle_seconds=0).rewritten == [
        str(early.id)]

    rep = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert rep.rewritten == [str(early.id)] and rep.candidates == 1 and rep.opened == 1
    assert rep.values == 1 and rep.values_done == 1 and not rep.deferred
    got = vault.get(early.id, principal=who)
    assert name not in got.content and placeholder in got.content
    assert got.content == f"Met {placeholder} at the harbour to talk about the blue boat"
    assert got.version == 2 and got.status == "active" and got.subject == "ada"
    assert vault.get(early.id, principal=who, reveal=True).content.startswith(f"Met {name} ")
    after = _row(vault, tenant, early.id)
    assert after["emb"] != before["emb"]  # re-embedded
    assert after["key_id"] == before["key_id"]  # the same subject key
    assert after["blob"] != before["blob"]
    assert not _posted(vault, tenant, early.id, name)  # the clear term's hash is gone
    assert _df(vault, tenant, "s", name) == 0  # and counts in no statistic
    vault.db.fold_lexical(tenant, wait=True)
    assert _df(vault, tenant, "s", name) == 0
    # the clear form is on no page of the listing and in no recall result
    pages = _all_contents(vault, tenant, "s")
    assert len(pages) == 3 and not any(name in c for c in pages)
    hits = vault.recall(f"{name} harbour boat", scope="s", k=10, principal=who)
    assert hits and not any(name in h.memory.content for h in hits)
    assert str(early.id) in {str(h.memory.id) for h in hits}
    # the bystander and the other tenant are untouched
    assert vault.get(bystander.id, principal=who).version == 1
    theirs_now = vault.get(theirs.id, principal=vault.principal(other))
    assert theirs_now.content == f"{name} sold the boat" and theirs_now.version == 1
    assert _watch_rows(vault, other) == []
    # audited: ids and counts, never the value
    (row,) = _watch_rows(vault, tenant)
    assert row["memory_ids"] == [str(early.id)] and row["details"]["count"] == 1
    assert row["details"]["placeholders"] == [placeholder]
    assert row["details"]["run_id"] == rep.run_id
    assert rep.audit_seqs == [row["seq"]]
    blob = b"".join(audit_rows(vault, tenant))
    assert name.encode() not in blob and name.lower().encode() not in blob
    with vault.db.transaction(tenant) as conn:
        run = conn.execute("SELECT values_scanned, candidates, rewritten FROM "
                           "pii_watch_runs WHERE run_id = %s", (rep.run_id,)).fetchone()
    assert run == {"values_scanned": 1, "candidates": 1, "rewritten": 1}

    # a second run touches nothing (the value is covered)
    again = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert again.values == 0 and again.candidates == 0 and again.rewritten == []
    assert vault.get(early.id, principal=who).version == 2
    assert len(_watch_rows(vault, tenant)) == 1


def test_dry_run_changes_nothing(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    name = _name()
    early = vault.remember(f"{name} likes green tea", scope="s", principal=who)
    vault.remember("tea again", scope="s", entities=[{"kind": "person", "value": name}],
                   principal=who)
    before, seqs = _row(vault, tenant, early.id), len(audit_rows(vault, tenant))
    rep = vault.pii_watch.run(principal=who, dry_run=True, settle_seconds=0)
    assert rep.dry_run and rep.rewritten == [str(early.id)] and rep.audit_seqs == []
    assert _row(vault, tenant, early.id) == before
    assert len(audit_rows(vault, tenant)) == seqs
    assert vault.get(early.id, principal=who).content == f"{name} likes green tea"
    with vault.db.transaction(tenant) as conn:
        marks = conn.execute("SELECT count(*) AS n FROM pii_values WHERE watched_at IS NOT "
                             "NULL OR watch_seen_at IS NOT NULL").fetchone()
        runs = conn.execute("SELECT count(*) AS n FROM pii_watch_runs").fetchone()
    assert marks == {"n": 0} and runs == {"n": 0}
    # and the real run afterwards does it
    assert vault.pii_watch.run(principal=who, settle_seconds=0).rewritten == [str(early.id)]


def test_incremental_one_new_entity_touches_only_its_records(vault: MemoryVault,
                                                             tenant: str) -> None:
    who = vault.principal(tenant)
    a, b = _name(), _name()
    with_a = vault.remember(f"{a} fixed the bike", scope="s", principal=who)
    with_b = vault.remember(f"{b} fixed the car", scope="t", principal=who)
    vault.remember_many([{"content": f"note {i} about gardening", "scope": "s"}
                         for i in range(20)], principal=who)
    vault.remember("x", scope="s", entities=[{"kind": "person", "value": a}], principal=who)
    first = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert first.rewritten == [str(with_a.id)] and first.candidates == 1
    vault.remember("y", scope="t", entities=[{"kind": "person", "value": b}], principal=who)
    second = vault.pii_watch.run(principal=who, settle_seconds=0)
    # only the new value is looked for, and only the record holding its terms is opened
    assert second.values == 1 and second.candidates == 1 and second.opened == 1
    assert second.rewritten == [str(with_b.id)]
    assert vault.get(with_a.id, principal=who).version == 2  # not touched again


def test_settle_time_keeps_a_value_pending_for_one_more_run(vault: MemoryVault,
                                                            tenant: str) -> None:
    who = vault.principal(tenant)
    name = _name()
    early = vault.remember(f"{name} wrote a letter", scope="s", principal=who)
    vault.remember("z", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    first = vault.pii_watch.run(principal=who, settle_seconds=3600)
    assert first.rewritten == [str(early.id)] and first.values_done == 0  # seen, not settled
    second = vault.pii_watch.run(principal=who, settle_seconds=3600)
    assert second.values == 1 and second.rewritten == [] and second.values_done == 0
    third = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert third.values == 1 and third.values_done == 1 and third.rewritten == []


def test_non_live_records_are_found_too(vault: MemoryVault, tenant: str) -> None:
    """Archived and superseded records have no postings: their tsv is matched."""
    who = vault.principal(tenant)
    name = _name()
    v1 = vault.remember(f"{name} owns the red kayak", scope="s", key="kayak", principal=who)
    v2 = vault.remember(f"{name} sold the red kayak", scope="s", key="kayak", principal=who)
    fact = vault.remember(f"{name} has no kayak now", scope="s", type="fact",
                          derived_from=[v2.id], principal=who)
    vault.remember("w", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    rep = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert sorted(rep.rewritten) == sorted([str(v1.id), str(v2.id), str(fact.id)])
    with vault.db.transaction(tenant) as conn:  # lineage and the version chain are kept
        assert conn.execute("SELECT source_id FROM memory_lineage WHERE memory_id = %s",
                            (fact.id,)).fetchall() == [{"source_id": v2.id}]
        assert conn.execute("SELECT parent_id FROM memories WHERE id = %s",
                            (v2.id,)).fetchone() == {"parent_id": v1.id}
    assert vault.get(v2.id, principal=who).key == "kayak"
    for m in (v1, v2):
        got = vault.get(m.id, principal=who)
        assert name not in got.content
    assert vault.get(v1.id, principal=who).status == "superseded"  # statuses kept
    assert vault.get(v2.id, principal=who).status == "active"


def test_an_erased_subject_is_not_resurrected(vault: MemoryVault, tenant: str) -> None:
    from mnemovault.subjects.erase import destroy_keys

    who = vault.principal(tenant)
    name = _name()
    gone = vault.remember(f"{name} met bob at noon", scope="s", subject="bob", principal=who)
    vault.subjects.erase("bob", scope="s", principal=who)
    # a row whose key was destroyed but that is still there (an erase interrupted after
    # its key went, a restored backup before the ledger is reapplied)
    stale = vault.remember(f"{name} met carol at noon", scope="s", subject="carol",
                           principal=who)
    kid = _row(vault, tenant, stale.id)["key_id"]
    destroy_keys(vault.rt, tenant, [str(kid)])
    vault.remember("v", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    rep = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert rep.rewritten == [] and rep.erased == 1
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE subject_id = 'bob'"
                            ).fetchone() == {"n": 0}
        assert conn.execute("SELECT id FROM memories WHERE id = %s",
                            (gone.id,)).fetchone() is None
    after = _row(vault, tenant, stale.id)
    assert after["key_id"] == kid and after["version"] == 1  # no new key, not rewritten
    assert vault.get(stale.id, principal=who).content == "[erased]"


def test_permissions_and_surfaces(vault: MemoryVault, tenant: str, tmp_path: Any) -> None:
    who = vault.principal(tenant)
    with pytest.raises(Forbidden) as info:
        vault.pii_watch.run(principal=vault.principal(tenant, "member"))
    assert info.value.details["permission"] == "subject:erase"
    name = _name()
    early = vault.remember(f"{name} planted tulips", scope="s", principal=who)
    vault.remember("u", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    token, _ = vault.create_key(tenant, "admin")
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    r = client.post("/v1/admin/pii/watch", json={"dry_run": True}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["rewritten"] == [str(early.id)] and r.json()["dry_run"] is True
    assert name not in r.text
    r = client.post("/v1/admin/pii/watch", json={"batch": 0}, headers=h)
    assert r.status_code == 422
    member, _ = vault.create_key(tenant, "member")
    r = client.post("/v1/admin/pii/watch", json={},
                    headers={"Authorization": f"Bearer {member}"})
    assert r.status_code == 403 and "subject:erase" in r.text
    res = CliRunner().invoke(cli_app, ["--data-dir", str(vault.settings.data_dir),
                                       "--tenant", tenant, "pii", "watch",
                                       "--settle-seconds", "0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["rewritten"] == [str(early.id)] and out["values_done"] == 1
    assert name not in vault.get(early.id, principal=who).content


def test_a_subject_being_erased_is_deferred_to_the_next_run(vault: MemoryVault,
                                                           tenant: str) -> None:
    from mnemovault.store import subjects as subject_store

    who = vault.principal(tenant)
    name = _name()
    held = vault.remember(f"{name} visited dana", scope="s", subject="dana", principal=who)
    free = vault.remember(f"{name} visited erin", scope="s", subject="erin", principal=who)
    vault.remember("q", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    with vault.db.transaction(tenant) as conn:  # an erase of dana holds its lock
        subject_store.lock_for_erase(conn, tenant, "s", "dana")
        rep = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert rep.rewritten == [str(free.id)] and rep.deferred == [str(held.id)]
    assert rep.values_done == 0  # the value stays pending for the deferred record
    assert name in vault.get(held.id, principal=who).content
    again = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert again.rewritten == [str(held.id)] and again.values_done == 1
    assert name not in vault.get(held.id, principal=who).content


def test_a_value_of_stop_words_only_is_found_by_a_scan(vault: MemoryVault,
                                                       tenant: str) -> None:
    """No keyed term to look up (PostgreSQL's english stop words): every record is opened."""
    who = vault.principal(tenant)
    early = vault.remember("We saw The Who live in the park", scope="s", principal=who)
    vault.remember("p", scope="s", entities=[{"kind": "org", "value": "The Who"}],
                   principal=who)
    rep = vault.pii_watch.run(principal=who, settle_seconds=0)
    assert rep.full and rep.candidates == 2 and rep.rewritten == [str(early.id)]
    content = vault.get(early.id, principal=who).content
    assert "The Who" not in content and "{org:p_" in content


def test_the_background_schedule_runs_it(vault: MemoryVault, tenant: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import functools
    import threading

    from mnemovault.pii import watch
    from mnemovault.tenants import schedule

    who = vault.principal(tenant)
    name = _name()
    early = vault.remember(f"{name} repaired the roof", scope="s", principal=who)
    vault.remember("r", scope="s", entities=[{"kind": "person", "value": name}], principal=who)
    ran = threading.Event()
    real = functools.partial(watch.run_all, tenants=[tenant], settle_seconds=0)

    def run_all(rt: Any) -> watch.Report:  # this test's tenant only
        try:
            return real(rt)
        finally:
            ran.set()

    monkeypatch.setattr(schedule.watch, "run_all", run_all)
    bg = schedule.Background(vault.rt, poll_seconds=60, purge_interval_hours=0,
                             watch_interval_hours=24, watch_delay_seconds=0)
    with bg:
        assert ran.wait(60)
    assert bg.runs["pii_watch"] == 1
    assert name not in vault.get(early.id, principal=who).content
    (row,) = _watch_rows(vault, tenant)
    assert row["trigger"] == "schedule" and row["memory_ids"] == [str(early.id)]
