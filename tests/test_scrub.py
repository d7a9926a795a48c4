"""Scrub (issue 10, item 8): after an erasure, no byte of the erased records stays in any
file of the data directory, WAL included; without the scrub they are still there.

These tests run their own embedded PostgreSQL in a data directory of their own (WAL,
checkpoints and ``wal_recycle`` are server-wide, and a scrub waits for every older
transaction), with a stand-in embedder (hash-seeded random vectors: nothing here recalls by
meaning). The stand-in carries the default model's name and dimension so that the CLI,
which opens the database with the configured (lazy, never loaded here) embedder, accepts
the database.

The erasure is the subject erase (``mv.subjects.erase``), which runs the one forget path.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import string
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import psycopg
import pytest
from typer.testing import CliRunner

from mnemovault.audit import log as audit_log
from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.embed.base import Vectors, normalise
from mnemovault.errors import Forbidden, ValidationError
from mnemovault.governance.scrub import scrub
from mnemovault.store import memories as memory_store
from mnemovault.vault import MemoryVault

DIM = 384
SUBJECT = "erasure-subject"


class StandInEmbedder:
    """Deterministic unit vectors from a hash of the text; the default model's identity."""

    model = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = DIM

    def embed(self, texts: list[str]) -> Vectors:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            out[i] = np.random.default_rng(seed).standard_normal(DIM)
        return normalise(out)


@pytest.fixture(scope="module")
def own() -> Iterator[tuple[MemoryVault, Path]]:
    """A vault on an embedded server of its own; the process-wide audit configuration the
    session's vault set is restored afterwards."""
    saved = audit_log.config
    d = Path(tempfile.mkdtemp(prefix="mv-scrub-"))
    d.chmod(0o755)
    mv = MemoryVault.open(Settings(data_dir=d, database_url=None), embedder=StandInEmbedder())
    try:
        yield mv, d
    finally:
        mv.close()
        from mnemovault.store.embedded import stop

        stop(d)
        audit_log.configure(saved)
        shutil.rmtree(d, ignore_errors=True)


def marker(kind: str) -> str:
    """A plain word no detector takes for personal data, and that the full-text parser
    keeps whole (letters and digits: a ``numword``, not stemmed), so the GIN index holds it
    byte for byte."""
    return f"zqx{kind}{uuid.uuid4().hex[:12]}"


def owner_sql(mv: MemoryVault, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(mv.db.url, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def search(mv: MemoryVault, data_dir: Path, words: list[str]) -> dict[str, set[str]]:
    """Every file under ``data_dir`` holding any of ``words``: word -> places, a place being
    ``wal:<segment>`` or the relation a data file belongs to (``memories``,
    ``memories_tsv``, ``pg_toast_…``, ``pg_statistic``), else the path."""
    found: dict[str, set[str]] = {w: set() for w in words}
    encoded = [(w, w.encode()) for w in words]
    for path in sorted(data_dir.rglob("*")):
        if not path.is_file():
            continue
        try:
            blob = path.read_bytes()
        except OSError:  # removed while walking (a segment unlinked by a checkpoint)
            continue
        hits = [w for w, b in encoded if b in blob]
        if not hits:
            continue
        rel = path.relative_to(data_dir)
        if rel.parts[:2] == ("pg", "pg_wal"):
            place = f"wal:{path.name}"
        elif rel.parts[:2] == ("pg", "base") and path.name.split(".")[0].isdigit():
            node = int(path.name.split(".")[0])
            names = owner_sql(mv, "SELECT relname FROM pg_class "
                                  "WHERE pg_relation_filenode(oid) = %s", (node,))
            place = names[0][0] if names else f"dropped:{rel}"
        else:
            place = str(rel)
        for w in hits:
            found[w].add(place)
    return found


def current_segment(mv: MemoryVault) -> str:
    rows = owner_sql(mv, "SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
    return str(rows[0][0])


def letters(n: int, seed: int) -> str:
    """``n`` characters of random lowercase words: incompressible enough that PostgreSQL
    stores a long memory out of line (TOAST) uncompressed."""
    rng = random.Random(seed)
    words = ("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9)))
             for _ in range(n))
    return " ".join(words)[:n]


def test_erased_bytes_stay_until_the_scrub_removes_them(
        own: tuple[MemoryVault, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mv, data_dir = own
    tenant = "scrub-a"
    mv.ensure_tenant(tenant)
    who = mv.principal(tenant)
    erased = [marker("erase") for _ in range(5)]
    kept = marker("keep")
    long_text = (f"{erased[4]} " + letters(6000, 7) + f" {erased[4]} "
                 + letters(3000, 8) + f" {erased[4]}")
    # issue 21: every free-text column is sealed under the subject's key, so a record
    # written today has no plaintext for the scrub to remove. A database made before
    # sealing has (its rows are sealed in place at the next start, and the plaintext stays
    # in dead tuples, TOAST, statistics and WAL until a scrub): these records are written
    # so, with the plaintext column kept (KEEP_PLAINTEXT). A record written with sealing
    # as it is must be nowhere in clear even before the scrub.
    sealed_only = marker("sealed")
    sealed_id = mv.remember(f"the subject noted {sealed_only} at the meeting", scope="s",
                            subject=SUBJECT, principal=who).id
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", True)
    ids = [mv.remember(f"the subject mentioned {w} at the meeting", scope="s",
                       subject=SUBJECT, provenance={"source_id": w}, principal=who).id
           for w in erased[:3]]
    ids.append(mv.remember(long_text, scope="s", subject=SUBJECT,
                           provenance={"source_id": erased[4]}, principal=who).id)
    fact = mv.remember_many([{"content": f"derived fact about {erased[3]}", "scope": "s",
                              "subject": SUBJECT, "type": "fact",
                              "provenance": {"source_id": erased[3]},
                              "derived_from": [str(ids[0]), str(ids[1])]}],
                            principal=who)[0].id
    keep_id = mv.remember(f"another person said {kept}", scope="s", subject="someone-else",
                          provenance={"source_id": kept}, principal=who).id
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", False)
    owner_sql(mv, "ANALYZE memories")  # planner statistics sample the content
    # the long memory really is stored out of line
    toast = owner_sql(mv, "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
                          "WHERE relname = 'memories'")
    assert toast[0][0] > 0

    owner_sql(mv, "CHECKPOINT")  # the pages reach the table files
    erasure = mv.subjects.erase(SUBJECT, scope="s", principal=who)
    assert set(erasure.deleted) == {*ids, fact, sealed_id}
    # a checkpoint (any, as the server takes them by itself) writes the pages with the
    # deleted rows; switching and checkpointing again, with wal_recycle on (the default),
    # renames the old segment, erased bytes inside, to a future segment's name
    owner_sql(mv, "CHECKPOINT")
    assert owner_sql(mv, "SHOW wal_recycle") == [("on",)]
    owner_sql(mv, "SELECT pg_switch_wal()")
    owner_sql(mv, "CHECKPOINT")

    before = search(mv, data_dir, [*erased, kept, sealed_only])
    assert before[sealed_only] == set()  # sealed content: never in clear on disk
    everywhere = set().union(*(before[w] for w in erased))
    current = current_segment(mv)
    # WITHOUT a scrub the erased records are still in the data directory, in every kind of
    # place the scrub has to deal with:
    assert "memories" in everywhere  # the heap (dead tuples)
    # (the GIN full-text index holds keyed term hashes since 0014: no plaintext marker
    # reaches it)
    assert "pg_statistic" in everywhere  # planner statistics (sample values)
    wal = {p.removeprefix("wal:") for p in everywhere if p.startswith("wal:")}
    assert wal and any(seg > current for seg in wal)  # a recycled, not yet used segment
    assert all(before[w] for w in erased)

    report = scrub(mv.rt, request_id="req-scrub-1")

    assert report.complete, report.incomplete
    assert report.wal["verified"] and report.wal["recycle_was_on"]
    assert report.wal["switches"] >= 1 and report.wal["segments_removed"] >= 1
    assert report.statistics == "cleared"
    rewritten = {t["table"] for t in report.tables}
    assert {"memories", "memory_lineage", "graph_nodes", "pii_values"} <= rewritten
    assert not rewritten & {"audit_log", "alembic_version"}

    after = search(mv, data_dir, [*erased, kept])
    assert {w: p for w, p in after.items() if w in erased and p} == {}
    assert "memories" in after[kept]  # the search still sees what was kept
    assert owner_sql(mv, "SHOW wal_recycle") == [("off",)]  # kept for the next time

    # nothing that remains was touched: the kept memory lists, the chain verifies and ends
    # with the scrub's row
    page = mv.list(scope="s", principal=who)
    assert [m.id for m in page.items] == [keep_id]
    assert mv.rt.audit.verify(who).ok
    rows = [json.loads(line) for chunk in mv.rt.audit.export(who)
            for line in chunk.splitlines()]
    last = rows[-1]
    assert last["seq"] == report.audit[tenant]
    assert last["operation"] == "SCRUB" and last["request_id"] == "req-scrub-1"
    assert last["details"]["complete"] is True and "memories" in last["details"]["tables"]
    assert kept not in json.dumps(last) and SUBJECT not in json.dumps(last)


def test_a_second_erasure_is_scrubbed_with_recycling_already_off(
        own: tuple[MemoryVault, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mv, data_dir = own
    tenant = "scrub-b"
    mv.ensure_tenant(tenant)
    who = mv.principal(tenant)
    scrub(mv.rt, tenants=[tenant])  # recycling off from here on (idempotent)
    words = [marker("again") for _ in range(3)]
    # written as a database made before sealing holds them (plaintext beside the
    # ciphertext): what the scrub has to remove
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", True)
    ids = [mv.remember(f"note {w}", scope="s", subject=SUBJECT, principal=who).id
           for w in words]
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", False)
    owner_sql(mv, "CHECKPOINT")
    assert set(mv.subjects.erase(SUBJECT, scope="s", principal=who).deleted) == set(ids)
    owner_sql(mv, "CHECKPOINT")
    assert all(search(mv, data_dir, words).values())  # still there before the scrub

    report = scrub(mv.rt, tenants=[tenant])

    assert report.complete, report.incomplete
    assert not report.wal["recycle_was_on"]
    assert report.audit.keys() == {tenant}
    assert not any(search(mv, data_dir, words).values())


def test_erase_with_scrub_leaves_no_byte_behind(
        own: tuple[MemoryVault, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    mv, data_dir = own
    tenant = "scrub-c"
    mv.ensure_tenant(tenant)
    who = mv.principal(tenant)
    words = [marker("scrubbed") for _ in range(3)]
    # written as a database made before sealing holds them (plaintext beside the
    # ciphertext): what the scrub has to remove
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", True)
    ids = [mv.remember(f"note {w}", scope="s", subject=SUBJECT, principal=who).id
           for w in words]
    monkeypatch.setattr(memory_store, "KEEP_PLAINTEXT", False)
    owner_sql(mv, "CHECKPOINT")
    erasure = mv.subjects.erase(SUBJECT, scope="s", principal=who, scrub=True)
    assert set(erasure.deleted) == set(ids)
    assert erasure.scrub is not None and erasure.scrub["complete"], erasure.scrub
    assert {t["table"] for t in erasure.scrub["tables"]} >= {"memories", "pii_values"}
    assert not any(search(mv, data_dir, words).values())
    # a key narrowed to one subject may erase it, but not scrub every tenant's tables:
    # refused before anything is erased
    token, _ = mv.create_key(tenant, "admin", subject="bob")
    bob = mv.authenticate(token)
    kept = mv.remember("bob's note", scope="s", subject="bob", principal=who).id
    with pytest.raises(Forbidden):
        mv.subjects.erase("bob", scope="s", principal=bob, scrub=True)
    assert [m.id for m in mv.list(scope="s", principal=who).items] == [kept]


def test_dry_run_reports_tables_and_changes_nothing(own: tuple[MemoryVault, Path]) -> None:
    mv, _ = own
    node = owner_sql(mv, "SELECT pg_relation_filenode('memories')")
    head = owner_sql(mv, "SELECT max(seq) FROM audit_log")
    report = scrub(mv.rt, dry_run=True)
    assert report.dry_run and report.complete and report.audit == {}
    by_name = {t["table"]: t for t in report.tables}
    assert "memories" in by_name and "audit_log" not in by_name
    assert by_name["memories"]["total_bytes"] > 0 and by_name["memories"]["may_rewrite"]
    assert report.capabilities["superuser"] is True
    assert owner_sql(mv, "SELECT pg_relation_filenode('memories')") == node  # not rewritten
    assert owner_sql(mv, "SELECT max(seq) FROM audit_log") == head  # nothing audited
    with_audit = scrub(mv.rt, dry_run=True, include_audit=True)
    assert "audit_log" in {t["table"] for t in with_audit.tables}
    only = scrub(mv.rt, dry_run=True, tables=["memories"])
    assert [t["table"] for t in only.tables] == ["memories"]


def test_bad_tables_and_callers_are_refused(own: tuple[MemoryVault, Path]) -> None:
    mv, _ = own
    with pytest.raises(ValidationError) as bad:
        scrub(mv.rt, tables=["memories", "no_such_table"], dry_run=True)
    assert bad.value.field == "tables" and "no_such_table" in bad.value.message
    with pytest.raises(ValidationError):
        scrub(mv.rt, tables=[], dry_run=True)
    member = Principal.local("scrub-a", "member")
    with pytest.raises(Forbidden) as no_perm:
        scrub(mv.rt, member, dry_run=True)
    assert no_perm.value.details["permission"] == "subject:erase"
    narrowed = Principal(tenant="scrub-a", role="owner", permissions=member.permissions
                         | {"subject:erase"}, scope="s")
    with pytest.raises(Forbidden) as limited:
        scrub(mv.rt, narrowed, dry_run=True)
    assert limited.value.details["permission"] == "unlimited"


def test_a_role_without_privileges_is_told_what_it_lacks(
        own: tuple[MemoryVault, Path]) -> None:
    """As on a plain server where the login is neither superuser nor the tables' owner:
    the dry run names every missing privilege, and a run refuses before touching
    anything."""
    mv, _ = own
    as_app = SimpleNamespace(db=SimpleNamespace(url=mv.db.app_url))
    report = scrub(as_app, dry_run=True)  # type: ignore[arg-type]
    caps = report.capabilities
    assert caps["superuser"] is False and caps["can_checkpoint"] is False
    assert caps["can_switch_wal"] is False and caps["can_list_wal"] is False
    assert not report.complete
    gaps = " ".join(report.incomplete)
    assert "pg_statistic" in gaps
    assert "pg_switch_wal" in gaps and "table memories: this role does not own it" in gaps
    node = owner_sql(mv, "SELECT pg_relation_filenode('memories')")
    with pytest.raises(Forbidden) as denied:
        scrub(as_app, tenants=[])  # type: ignore[arg-type]
    assert denied.value.details["permission"] == "table owner"
    assert owner_sql(mv, "SELECT pg_relation_filenode('memories')") == node


def test_cli_scrub(own: tuple[MemoryVault, Path]) -> None:
    from mnemovault.cli import app

    _, data_dir = own
    runner = CliRunner()
    dry = runner.invoke(app, ["--data-dir", str(data_dir), "scrub", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    body = json.loads(dry.stdout)
    assert body["dry_run"] is True and "memories" in {t["table"] for t in body["tables"]}
    run = runner.invoke(app, ["--data-dir", str(data_dir), "scrub", "--table", "memories",
                              "--json"])
    assert run.exit_code == 0, run.output
    done = json.loads(run.stdout)
    assert done["complete"] is True and [t["table"] for t in done["tables"]] == ["memories"]
    assert {"scrub-a", "scrub-b"} <= set(done["audit"])
    bad = runner.invoke(app, ["--data-dir", str(data_dir), "scrub", "--table", "nope"])
    assert bad.exit_code == 2
    helptext = runner.invoke(app, ["scrub", "--help"]).output
    assert "ACCESS EXCLUSIVE" in helptext and "--dry-run" in helptext
