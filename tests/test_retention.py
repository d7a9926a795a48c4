"""Retention: the score, the archiving job (pinned memories survive), archived memories out
of recall but flagged in previews, forgetting unused memories, the schedule, the CLI."""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
from typer.testing import CliRunner

from mnemovault.cli import app as cli_app
from mnemovault.governance import retention
from mnemovault.vault import MemoryVault

NOW = datetime.now(UTC)


def _id_at(when: datetime) -> uuid.UUID:
    """A UUIDv7 (mnemovault.ids) of ``when``: a memory stored then."""
    ms = int(when.timestamp() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    return uuid.UUID(int=(ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76
                     | ((rand >> 68) & 0xFFF) << 64 | 0x2 << 62 | (rand & ((1 << 62) - 1)))


def _old(vault: MemoryVault, tenant: str, text: str, days: float, *, scope: str = "s",
         accesses: int = 0, last_access_days: float | None = None,
         stored_days: float | None = None) -> uuid.UUID:
    """A memory of ``days`` ago, stored then too (``stored_days``: stored that many days
    ago instead, e.g. 0: imported just now)."""
    who = vault.principal(tenant)
    stored = NOW - timedelta(days=days if stored_days is None else stored_days)
    with mock.patch("mnemovault.memories.write.uuid7", lambda: _id_at(stored)):
        mid = vault.remember(text, scope=scope, created_at=NOW - timedelta(days=days),
                             principal=who).id
    if accesses or last_access_days is not None:
        with vault.db.transaction(tenant) as conn:
            conn.execute("UPDATE memories SET access_count = %s, last_accessed_at = %s "
                         "WHERE id = %s",
                         (accesses, None if last_access_days is None
                          else NOW - timedelta(days=last_access_days), mid))
    return mid


def test_score_formula() -> None:
    p = retention.Policy()
    assert retention.score(0, 0, False, p) == pytest.approx(p.recency_weight)
    assert retention.score(p.half_life_days, 0, False, p) == pytest.approx(
        p.recency_weight / 2)
    assert retention.score(0, 10_000, False, p) == pytest.approx(
        p.recency_weight + p.access_weight)
    assert retention.score(10_000, 0, True, p) == math.inf
    # use stretches life: more accesses, higher score at the same idleness
    assert retention.score(40, 5, False, p) > retention.score(40, 1, False, p) > \
        retention.score(40, 0, False, p)


def test_sql_score_matches_the_python_one(vault: MemoryVault, tenant: str) -> None:
    p = retention.Policy()
    cases = [(3.0, 0, None), (45.0, 2, 20.0), (400.0, 50, 100.0), (10.0, 1, 1.0)]
    ids = [_old(vault, tenant, f"note {i}", d, accesses=n, last_access_days=last)
           for i, (d, n, last) in enumerate(cases)]
    with vault.db.transaction(tenant) as conn:
        got = retention.scores(conn, ids, p, NOW)
    for mid, (days, n, last) in zip(ids, cases, strict=True):
        idle = last if last is not None else days
        assert got[mid] == pytest.approx(retention.score(idle, n, False, p), rel=1e-6)


def test_the_job_archives_low_scores_and_pinned_memories_survive(vault: MemoryVault,
                                                                 tenant: str) -> None:
    who = vault.principal(tenant)
    stale = _old(vault, tenant, "Old note about the garden shed roof", 200)
    pinned = _old(vault, tenant, "Old note about the garden shed key code", 200)
    fresh = _old(vault, tenant, "New note about the garden shed paint", 1)
    used = _old(vault, tenant, "Old note about the garden shed lock", 200, accesses=30,
                last_access_days=2)
    assert vault.pin([pinned], principal=who).changed == [pinned]

    dry = vault.run_retention(dry_run=True, now=NOW, principal=who)
    assert dry.archived == [stale] and dry.audit_seq is None
    assert not vault.get(stale, principal=who).archived  # a dry run changes nothing

    res = vault.run_retention(now=NOW, principal=who)
    assert res.archived == [stale] and res.deleted == [] and res.audit_seq
    for mid, archived in ((stale, True), (pinned, False), (fresh, False), (used, False)):
        assert vault.get(mid, principal=who).archived is archived
    # archived memories stop appearing in recall ...
    hits = vault.recall("garden shed", scope="s", k=10, principal=who)
    assert stale not in {h.memory.id for h in hits} and pinned in {h.memory.id for h in hits}
    # ... but previews show them, flagged
    row = vault.forget_preview([stale], principal=who)[0]
    assert row["archived"] is True and row["excerpt"].startswith("Old note about the garden")
    with vault.db.transaction(tenant) as conn:
        audit = json.loads(bytes(conn.execute(
            "SELECT row_bytes FROM audit_log WHERE operation = 'RETENTION'").fetchone()
            ["row_bytes"]))
    assert audit["details"]["archived"] == 1 and audit["memory_ids"] == [str(stale)]
    # a second run finds nothing new; pinning brings a memory back from the archive
    assert vault.run_retention(now=NOW, principal=who).archived == []
    vault.pin([stale], principal=who)
    assert stale in {h.memory.id for h in vault.recall("garden shed", scope="s", k=10,
                                                       principal=who)}


def test_idle_time_counts_from_when_a_record_was_stored_if_later(vault: MemoryVault,
                                                                  tenant: str) -> None:
    """Issue 28 item 7: last spring's conversation imported today is not idle for months:
    idle time runs from the later of the record's own time and when it was stored."""
    who = vault.principal(tenant)
    imported = _old(vault, tenant, "Spring note about the allotment", 200, stored_days=0)
    stale = _old(vault, tenant, "Spring note about the allotment shed", 200)
    assert vault.run_retention(now=NOW, principal=who).archived == [stale]
    assert not vault.get(imported, principal=who).archived
    with vault.db.transaction(tenant) as conn:
        fresh = retention.scores(conn, [imported], retention.Policy(), NOW)[imported]
    assert fresh == pytest.approx(retention.Policy().recency_weight, rel=1e-3)  # ~0 days
    # 200 days on, unused, it is idle as long and archived like any other
    later = NOW + timedelta(days=200)
    assert vault.run_retention(now=later, principal=who).archived == [imported]


def test_unpinned_memories_decay_again(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    mid = _old(vault, tenant, "Ancient note", 300)
    vault.pin([mid], principal=who)
    assert vault.run_retention(now=NOW, principal=who).archived == []
    vault.unpin([mid], principal=who)
    assert vault.run_retention(now=NOW, principal=who).archived == [mid]


def test_unused_memories_are_forgotten_when_configured(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    who = vault.principal(tenant)
    gone = _old(vault, tenant, "Unused for a year", 365)
    fact = vault.remember("A fact from it", scope="s", type="fact", derived_from=[gone],
                          principal=who).id
    keep = _old(vault, tenant, "Unused for a year but pinned", 365)
    vault.pin([keep], principal=who)
    monkeypatch.setattr(vault, "settings", vault.settings.model_copy(
        update={"retention_delete_unused_days": 180.0}))
    res = vault.run_retention(now=NOW, principal=who)
    assert set(res.deleted) == {gone, fact}
    assert vault.list(scope="s", principal=who).items[0].id == keep
    with vault.db.transaction(tenant) as conn:
        rows = [json.loads(bytes(r["row_bytes"])) for r in conn.execute(
            "SELECT row_bytes FROM audit_log WHERE operation = 'FORGET'").fetchall()]
    assert rows[-1]["trigger"] == "retention" and rows[-1]["details"]["count"] == 2


def test_run_for_every_tenant(vault: MemoryVault, tenant: str) -> None:
    mid = _old(vault, tenant, "Forgotten corner", 500)
    # a dry run: the other tests' tenants in this database are left as they are
    results = {r.tenant: r for r in vault.run_retention_all(dry_run=True, now=NOW)}
    assert results[tenant].archived == [mid] and results[tenant].dry_run


def test_scheduler_runs_the_job_until_stopped() -> None:
    ran = threading.Event()
    calls: list[int] = []

    def job() -> None:
        calls.append(1)
        ran.set()

    s = retention.Scheduler(job, interval_hours=0.05 / 3600)
    s.start()
    assert ran.wait(5)
    s.stop()
    n = len(calls)
    threading.Event().wait(0.2)
    assert len(calls) == n
    retention.Scheduler(job, 0).start()  # interval 0: never scheduled


def test_cli_retention_run(data_dir: Path, vault: MemoryVault, tenant: str) -> None:
    mid = _old(vault, tenant, "Very old note", 1000)
    runner = CliRunner()
    base = ["--data-dir", str(data_dir), "--tenant", tenant, "retention", "run"]
    res = runner.invoke(cli_app, [*base, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["archived"] == [str(mid)]
    res = runner.invoke(cli_app, base)
    assert res.exit_code == 0 and "archived 1 memories" in res.stdout
    assert vault.get(mid, principal=vault.principal(tenant)).archived
