"""The librarian (issue 23, items 1 and 3) against the real PostgreSQL: merges with lineage,
dry runs, the per-tenant lock, idempotent reruns, the forget and erase cascades, dates,
placeholders-only models, fading, pins and tenant isolation."""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from mnemovault.librarian.common import days
from mnemovault.llm.openai import OpenAIChat
from mnemovault.store import librarian as store
from mnemovault.store.db import owner_connection
from mnemovault.vault import MemoryVault

SAME = ("I love hiking in the mountains with my dog.",
        "I love hiking in the mountains with my dog!",
        "I really love hiking in the mountains with my dog.")
WHEN = [datetime(2023, 5, 8, 10, tzinfo=UTC), datetime(2023, 6, 9, 10, tzinfo=UTC),
        datetime(2023, 7, 1, 10, tzinfo=UTC)]


def _seed(vault: MemoryVault, tenant: str, scope: str = "s",
          subject: str = "carol") -> list[uuid.UUID]:
    p = vault.principal(tenant)
    ids = [vault.remember(t, scope=scope, subject=subject, created_at=w, principal=p).id
           for t, w in zip(SAME, WHEN, strict=True)]
    vault.remember("The quarterly report is due on Friday.", scope=scope, subject=subject,
                   created_at=datetime(2023, 7, 3, tzinfo=UTC), principal=p)
    return ids


def _facts(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    """Every librarian fact of the tenant (any status) with its lineage sources."""
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute(
            "SELECT id, key_id, content_sealed, status, archived, pinned, rank_boost, "
            "provenance, provenance_sealed, ARRAY(SELECT source_id FROM memory_lineage l "
            "WHERE l.tenant_id = "
            "m.tenant_id AND l.memory_id = m.id) AS sources FROM memories m "
            "WHERE tenant_id = %s AND type = 'fact' ORDER BY id", (tenant,)).fetchall()
    return [dict(r) for r in rows]


def _count(vault: MemoryVault, tenant: str, table: str) -> int:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s",
                           (tenant,)).fetchone()
    assert row is not None
    return int(row["n"])


def test_three_near_duplicates_make_one_fact_ranked_above_them(
        vault: MemoryVault, tenant: str) -> None:
    ids = _seed(vault, tenant)
    res = vault.librarian.run(principal=vault.principal(tenant))
    assert res.merged == 1 and len(res.written) == 1 and res.audit_seq is not None
    (fact,) = _facts(vault, tenant)
    assert sorted(fact["sources"]) == sorted(ids)
    assert fact["provenance"]["source"] == "librarian"
    assert fact["provenance"]["librarian"] == "merge"
    hits = vault.recall("hiking in the mountains with my dog", scope="s", k=5,
                        principal=vault.principal(tenant), touch=False)
    order = [h.memory.id for h in hits]
    assert order[0] == fact["id"]
    assert set(ids) <= set(order[1:])  # the sources stay, below the fact
    for i in ids:  # still there, still active
        assert vault.get(i, principal=vault.principal(tenant)).status == "active"


def test_the_fact_keeps_the_dates(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    vault.librarian.run(principal=vault.principal(tenant))
    (fact,) = _facts(vault, tenant)
    assert days(WHEN) == "8 May 2023, 9 June 2023 and 1 July 2023"
    assert days(WHEN) in fact["content"]
    assert fact["provenance"]["span_from"] == "2023-05-08"
    assert fact["provenance"]["span_to"] == "2023-07-01"
    m = vault.get(fact["id"], principal=vault.principal(tenant))
    assert m.created_at == WHEN[-1]  # the fact sits at its newest source's time


def test_a_dry_run_writes_nothing(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    before = (_count(vault, tenant, "memories"), _count(vault, tenant, "audit_log"),
              _count(vault, tenant, "memory_lineage"))
    res = vault.librarian.run(dry_run=True, principal=vault.principal(tenant))
    assert res.dry_run and res.planned == 1 and res.written == [] and res.audit_seq is None
    after = (_count(vault, tenant, "memories"), _count(vault, tenant, "audit_log"),
             _count(vault, tenant, "memory_lineage"))
    assert before == after


def test_a_rerun_is_idempotent(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    first = vault.librarian.run(principal=vault.principal(tenant))
    again = vault.librarian.run(principal=vault.principal(tenant))
    assert len(first.written) == 1
    assert again.written == [] and again.existing == 1 and again.audit_seq is None
    assert len(_facts(vault, tenant)) == 1


def test_a_group_that_grows_supersedes_its_fact(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    vault.librarian.run(principal=vault.principal(tenant))
    vault.remember("I love hiking in the mountains with my dog!!", scope="s",
                   subject="carol", principal=vault.principal(tenant))
    res = vault.librarian.run(principal=vault.principal(tenant))
    assert len(res.written) == 1 and res.superseded == 1
    live = [f for f in _facts(vault, tenant) if f["status"] == "active"]
    assert len(live) == 1 and len(live[0]["sources"]) == 4


def test_two_runs_at_once_do_not_duplicate(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    results: list[Any] = []
    start = threading.Barrier(2)

    def go() -> None:
        start.wait()
        results.append(vault.librarian.run(principal=vault.principal(tenant)))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    assert sum(len(r.written) for r in results) == 1
    assert len(_facts(vault, tenant)) == 1


def test_a_held_lock_makes_a_run_do_nothing(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    with owner_connection(vault.db.url, autocommit=True) as conn:
        assert store.try_lock(conn, tenant)
        res = vault.librarian.run(principal=vault.principal(tenant))
        assert res.locked and res.written == []
        store.unlock(conn, tenant)
    assert _facts(vault, tenant) == []
    assert len(vault.librarian.run(principal=vault.principal(tenant)).written) == 1


def test_forgetting_one_source_removes_the_fact(vault: MemoryVault, tenant: str) -> None:
    ids = _seed(vault, tenant)
    vault.librarian.run(principal=vault.principal(tenant))
    (fact,) = _facts(vault, tenant)
    res = vault.forget(ids[1], principal=vault.principal(tenant))
    assert fact["id"] in res.derived and fact["id"] in res.deleted
    assert _facts(vault, tenant) == []
    with vault.db.transaction(tenant) as conn:
        left = conn.execute("SELECT count(*) AS n FROM memory_lineage WHERE tenant_id = %s "
                            "AND memory_id = %s", (tenant, fact["id"])).fetchone()
    assert left is not None and left["n"] == 0


def test_erasing_the_subject_removes_the_fact(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    _seed(vault, tenant, subject="dave")
    vault.librarian.run(principal=vault.principal(tenant))
    facts = _facts(vault, tenant)
    assert len(facts) == 2
    vault.subjects.erase("carol", scope="s", principal=vault.principal(tenant))
    left = _facts(vault, tenant)
    assert len(left) == 1  # dave's stays
    assert vault.get(left[0]["id"], principal=vault.principal(tenant)).subject == "dave"


def test_a_model_sees_placeholders_only(vault: MemoryVault, tenant: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    p = vault.principal(tenant)
    texts = ["I adopted a puppy named Rex, Ada Lovelace helped me choose him.",
             "My puppy Rex loves playing fetch, I email ada.lovelace@example.org photos."]
    for t, w in zip(texts, WHEN[:2], strict=True):
        vault.remember(t, scope="pets", subject="carol", created_at=w, principal=p,
                       entities=[{"kind": "person", "value": "Ada Lovelace"}])
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = request.content.decode()
        seen.append(body)
        system = json.loads(body)["messages"][0]["content"]
        mail = re.search(r"\{email:p_[0-9a-f]{10}\}", system)
        answer = f"Carol adopted a puppy named Rex and sends photos to {mail.group(0)}." \
            if mail else "Carol adopted a puppy named Rex."
        return httpx.Response(200, json={"choices": [{"message": {"content": answer}}]})

    monkeypatch.setattr(vault, "llm", OpenAIChat(
        model="fake", base_url="http://model.invalid/v1",
        transport=httpx.MockTransport(handler)))
    monkeypatch.setattr(vault, "settings", vault.settings.model_copy(
        update={"librarian_topic_similarity": 0.2}))
    res = vault.librarian.run(scope="pets", principal=p)
    assert res.model == "openai" and res.distilled == 1 and seen
    for body in seen:
        assert "ada.lovelace@example.org" not in body and "Ada Lovelace" not in body
        assert re.search(r"\{email:p_[0-9a-f]{10}\}", body)
        assert re.search(r"\{person:p_[0-9a-f]{10}\}", body)
    (fact,) = [f for f in _facts(vault, tenant) if f["provenance"]["librarian"] == "distil"]
    assert fact["provenance"]["via"] == "model"
    assert "8 May 2023 to 9 June 2023" in fact["content"]  # the span, whatever the model said
    assert "adopted a puppy named Rex" in fact["content"]
    assert sorted(fact["sources"]) == sorted(
        m.id for m in vault.list(scope="pets", principal=p).items if m.type == "episode")


def test_an_invented_placeholder_falls_back_to_extractive(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = vault.principal(tenant)
    for t, w in zip(["I adopted a puppy named Rex.", "My puppy Rex loves playing fetch."],
                    WHEN[:2], strict=True):
        vault.remember(t, scope="pets", subject="carol", created_at=w, principal=p)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {
            "content": "Carol's vet is {person:p_0123456789}."}}]})

    monkeypatch.setattr(vault, "llm", OpenAIChat(
        model="fake", base_url="http://model.invalid/v1",
        transport=httpx.MockTransport(handler)))
    monkeypatch.setattr(vault, "settings", vault.settings.model_copy(
        update={"librarian_topic_similarity": 0.2}))
    res = vault.librarian.run(scope="pets", principal=p)
    assert res.model_fallbacks == 1
    (fact,) = _facts(vault, tenant)
    assert "p_0123456789" not in fact["content"]
    assert "8 May 2023: I adopted a puppy named Rex." in fact["content"]


def test_fading_lowers_rank_then_retention_archives(vault: MemoryVault, tenant: str) -> None:
    ids = _seed(vault, tenant)
    p = vault.principal(tenant)
    vault.librarian.run(principal=p)
    (fact,) = _facts(vault, tenant)
    assert fact["rank_boost"] == pytest.approx(vault.settings.librarian_fact_boost)
    soon = datetime.now(UTC) + timedelta(days=5)
    assert vault.librarian.run(now=soon, principal=p).faded == 0  # not idle long enough
    later = datetime.now(UTC) + timedelta(days=vault.settings.librarian_fade_after_days + 1)
    res = vault.librarian.run(now=later, principal=p)
    assert res.faded == 1 and res.audit_seq is not None
    (fact,) = _facts(vault, tenant)
    assert fact["rank_boost"] == pytest.approx(vault.settings.librarian_faded_boost)
    hits = vault.recall("hiking in the mountains with my dog", scope="s", k=5, principal=p,
                        touch=False)
    order = [h.memory.id for h in hits]
    assert fact["id"] in order and order[0] in ids  # now below its best source
    # retention, later still: archived like any idle memory (the sources too)
    ret = vault.run_retention(now=datetime.now(UTC) + timedelta(days=400), principal=p)
    assert fact["id"] in ret.archived
    (fact,) = _facts(vault, tenant)
    assert fact["archived"]
    hits = vault.recall("hiking in the mountains with my dog", scope="s", k=5, principal=p,
                        touch=False)
    assert fact["id"] not in [h.memory.id for h in hits]


def test_a_recalled_fact_does_not_fade_and_a_woken_one_neither(
        vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    p = vault.principal(tenant)
    vault.librarian.run(principal=p)
    (fact,) = _facts(vault, tenant)
    state = vault.wake(scope="s", subject="carol", principal=p)
    assert fact["id"] in [m.id for m in state.records]
    with vault.db.transaction(tenant) as conn:  # the wake counted as an access
        row = conn.execute("SELECT access_count, last_accessed_at FROM memories WHERE "
                           "tenant_id = %s AND id = %s", (tenant, fact["id"])).fetchone()
    assert row is not None and row["access_count"] == 1
    # 10 days after that access it is not idle, though its newest source is years old
    res = vault.librarian.run(now=row["last_accessed_at"] + timedelta(days=10), principal=p)
    assert res.faded == 0


def test_a_pinned_fact_is_exempt(vault: MemoryVault, tenant: str) -> None:
    _seed(vault, tenant)
    p = vault.principal(tenant)
    vault.librarian.run(principal=p)
    (fact,) = _facts(vault, tenant)
    vault.pin(fact["id"], principal=p)
    far = datetime.now(UTC) + timedelta(days=400)
    assert vault.librarian.run(now=far, principal=p).faded == 0
    ret = vault.run_retention(now=far, principal=p)
    assert fact["id"] not in ret.archived
    (fact,) = _facts(vault, tenant)
    assert not fact["archived"]
    assert fact["rank_boost"] == pytest.approx(vault.settings.librarian_fact_boost)


def test_another_tenant_is_untouched(vault: MemoryVault, tenant: str) -> None:
    other = f"{tenant}-other"
    vault.ensure_tenant(other)
    _seed(vault, tenant)
    _seed(vault, other)
    before = _count(vault, other, "memories"), _count(vault, other, "audit_log")
    res = vault.librarian.run(principal=vault.principal(tenant))
    assert len(res.written) == 1
    assert _facts(vault, other) == []
    assert (_count(vault, other, "memories"), _count(vault, other, "audit_log")) == before
    assert all(r.tenant in (tenant, other) or r.error is None
               for r in [vault.librarian.run(principal=vault.principal(other))])
    assert len(_facts(vault, other)) == 1 and len(_facts(vault, tenant)) == 1


def test_a_limited_key_may_not_run_it(vault: MemoryVault, tenant: str) -> None:
    from mnemovault.errors import Forbidden

    token, _ = vault.create_key(tenant, "admin", scope="s")
    with pytest.raises(Forbidden):
        vault.librarian.run(principal=vault.authenticate(token))
    token, _ = vault.create_key(tenant, "service")
    with pytest.raises(Forbidden) as err:
        vault.librarian.run(principal=vault.authenticate(token))
    assert err.value.details.get("permission") == "memory:forget"


def test_the_http_endpoint_runs_it(vault: MemoryVault, tenant: str) -> None:
    from fastapi.testclient import TestClient

    from mnemovault.api import create_app

    _seed(vault, tenant)
    token, _ = vault.create_key(tenant, "admin")
    with TestClient(create_app(vault)) as client:
        h = {"Authorization": f"Bearer {token}"}
        r = client.post("/v1/admin/librarian/run", json={"dry_run": True}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["planned"] == 1 and r.json()["written"] == []
        r = client.post("/v1/admin/librarian/run", json={"scope": "s"}, headers=h)
        assert r.status_code == 200 and len(r.json()["written"]) == 1
    assert len(_facts(vault, tenant)) == 1


def test_the_cli_runs_it(vault: MemoryVault, tenant: str, settings: Any) -> None:
    from typer.testing import CliRunner

    from mnemovault.cli import app

    _seed(vault, tenant)
    runner = CliRunner()
    base = ["--data-dir", str(settings.data_dir), "--tenant", tenant, "librarian", "run"]
    r = runner.invoke(app, [*base, "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dry_run"] and out["planned"] == 1 and out["written"] == []
    assert _facts(vault, tenant) == []
    r = runner.invoke(app, [*base, "--scope", "s"])
    assert r.exit_code == 0, r.output
    assert "wrote 1 fact" in r.stdout
    assert len(_facts(vault, tenant)) == 1
    with owner_connection(vault.db.url, autocommit=True) as conn:  # another run under way
        assert store.try_lock(conn, tenant)
        r = runner.invoke(app, base)
        store.unlock(conn, tenant)
    assert r.exit_code == 5 and "under way" in r.output


def test_an_attribute_stated_twice_supersedes_in_valid_time(vault: MemoryVault,
                                                            tenant: str) -> None:
    """Item 2's "the same attribute found by the librarian": two unkeyed episodes say where
    Dana lives (the later-dated one written first); the librarian's keyed facts make the
    later value current and the earlier one true only as of its time; a rerun adds
    nothing."""
    p = vault.principal(tenant)
    new = vault.remember("I moved to Oslo last month for a new job.", scope="s",
                         subject="dana", created_at=datetime(2025, 6, 1, tzinfo=UTC),
                         principal=p)
    old = vault.remember("I live in Lisbon with my two cats.", scope="s", subject="dana",
                         created_at=datetime(2024, 1, 10, tzinfo=UTC), principal=p)
    res = vault.librarian.run(principal=p)
    assert res.attributes == 2 and len(res.written) >= 2, res

    def homes(**kw: Any) -> list[str]:
        hits = vault.recall("where does dana live?", scope="s", k=10,
                            filters={"types": ["fact"]}, principal=p, touch=False, **kw)
        return [h.memory.content for h in hits if "lives in" in h.memory.content]

    assert homes() == ["dana (1 June 2025): lives in Oslo."]
    assert homes(as_of="2024-06-01T00:00:00Z") == ["dana (10 January 2024): lives in Lisbon."]
    assert homes(as_of="2023-06-01T00:00:00Z") == []
    facts = {f["id"]: f for f in _facts(vault, tenant)}
    lineage = {tuple(f["sources"]): f["status"] for f in facts.values()
               if f["provenance"].get("attribute") == "home"}
    assert lineage == {(new.id,): "active", (old.id,): "superseded"}
    again = vault.librarian.run(principal=p)
    assert again.written == [] and again.existing >= 2
