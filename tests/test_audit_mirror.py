"""The audit log's JSON Lines mirror and the per-tenant file mechanics it shares with the
erasure ledger (:mod:`mnemovault.audit.jsonl`): a database restored behind the mirror
(its stale tail is set aside, the file again equals the chain), torn last lines, unsafe
names, atomic rewrites, and byte-for-byte compatibility with files written before."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mnemovault.audit import jsonl
from mnemovault.audit.mirror import JsonlMirror
from mnemovault.audit.verify import verify_file
from mnemovault.errors import ValidationError
from mnemovault.vault import MemoryVault


def _mirror(vault: MemoryVault) -> JsonlMirror:
    found = [h.__self__ for h in vault.db.after_commit
             if isinstance(getattr(h, "__self__", None), JsonlMirror)]
    assert len(found) == 1
    return found[0]


def _remember(vault: MemoryVault, tenant: str, n: int, tag: str) -> None:
    who = vault.principal(tenant)
    for i in range(n):
        vault.remember(f"mirror {tag} {i}", scope="m", principal=who)


def _export(vault: MemoryVault, tenant: str) -> bytes:
    return b"".join(vault.audit.export(vault.principal(tenant)))


def _seqs(data: bytes) -> list[int]:
    import orjson
    return [int(orjson.loads(x)["seq"]) for x in data.splitlines() if x.strip()]


class _Snapshot:
    """The tenant's audit tables at one moment, put back later as the owner: what a
    restore of a backup taken then does to the audit chain (the memories stay; the mirror
    reads the chain only)."""

    def __init__(self, vault: MemoryVault, tenant: str) -> None:
        self.url, self.tenant = vault.db.url, tenant
        with psycopg.connect(self.url) as conn:
            cur = conn.cursor(row_factory=psycopg.rows.dict_row)
            self.head = cur.execute("SELECT * FROM audit_heads WHERE tenant_id = %s",
                                    (tenant,)).fetchone()
            self.nodes = cur.execute("SELECT level, idx FROM audit_nodes WHERE tenant_id = %s",
                                     (tenant,)).fetchall()
        self.seq = int(self.head["seq"]) if self.head else 0  # no head: no row yet

    def restore(self) -> None:
        t = self.tenant
        with psycopg.connect(self.url) as conn:
            conn.execute("DELETE FROM audit_log WHERE tenant_id = %s AND seq > %s", (t, self.seq))
            conn.execute("DELETE FROM audit_checkpoints WHERE tenant_id = %s AND size > %s",
                         (t, self.seq))
            conn.execute(
                "DELETE FROM audit_nodes WHERE tenant_id = %s AND (level, idx) NOT IN "
                "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))",
                (t, [n["level"] for n in self.nodes], [n["idx"] for n in self.nodes]))
            if self.head is None:
                conn.execute("DELETE FROM audit_heads WHERE tenant_id = %s", (t,))
                return
            cols = [c for c in self.head if c != "tenant_id"]
            conn.execute(
                "UPDATE audit_heads SET " + ", ".join(f"{c} = %s" for c in cols)
                + " WHERE tenant_id = %s", (*[self.head[c] for c in cols], t))


@pytest.mark.parametrize("written_after_restore", [False, True])
def test_a_restore_behind_the_mirror_sets_the_stale_tail_aside(
        vault: MemoryVault, tenant: str, caplog: pytest.LogCaptureFixture,
        written_after_restore: bool) -> None:
    mirror = _mirror(vault)
    path = mirror.path(tenant)
    _remember(vault, tenant, 3, "before")
    backup = _Snapshot(vault, tenant)  # the backup is taken here
    k = backup.seq
    assert _seqs(path.read_bytes()) == list(range(1, k + 1))
    _remember(vault, tenant, 2, "lost")  # written after the backup, then lost by the restore
    before = path.read_bytes()
    assert _seqs(before) == list(range(1, k + 3))
    lost = b"".join(before.splitlines(keepends=True)[k:])
    backup.restore()
    assert vault.audit.verify(vault.principal(tenant)).rows == k  # the chain is back at k

    caplog.set_level(logging.WARNING, logger="mnemovault.audit.jsonl")
    if written_after_restore:  # a new row takes seq k+1 with another hash
        _remember(vault, tenant, 1, "after")
        assert vault.audit.verify(vault.principal(tenant)).ok
    else:  # the database only went back
        assert mirror.sync(tenant) == 0
    sides = mirror.files.side_files(tenant)
    assert [p.name.split(".")[2].split("-")[0] for p in sides] == ["restored"]
    assert sides[0].read_bytes() == lost  # the lost timeline's lines, unchanged
    assert verify_file(sides[0], allow_partial=True).ok  # and still a verifiable chain
    assert path.read_bytes() == _export(vault, tenant)  # the mirror is the chain again
    assert _seqs(path.read_bytes()) == list(range(1, k + 1 + written_after_restore))
    assert verify_file(path).ok
    assert any("moved to" in r.getMessage() and str(sides[0]) in r.getMessage()
               for r in caplog.records)

    _remember(vault, tenant, 2, "later")  # in step again: plain appends, no new side file
    assert path.read_bytes() == _export(vault, tenant)
    assert verify_file(path).ok
    assert mirror.files.side_files(tenant) == sides
    mirror.remove(tenant)
    assert not path.exists() and mirror.files.side_files(tenant) == []
    assert not path.with_name(path.name + ".lock").exists()


def test_a_torn_last_line_is_set_aside_and_written_again(vault: MemoryVault,
                                                         tenant: str) -> None:
    mirror = _mirror(vault)
    path = mirror.path(tenant)
    _remember(vault, tenant, 3, "torn")
    whole = path.read_bytes()
    last = whole.splitlines(keepends=True)[-1]
    path.write_bytes(whole[: len(whole) - len(last) // 2])  # a writer died mid-line
    assert mirror.sync(tenant) == 1
    assert path.read_bytes() == whole == _export(vault, tenant)
    sides = mirror.files.side_files(tenant)
    assert len(sides) == 1 and ".torn-" in sides[0].name
    assert sides[0].read_bytes() == last[: len(last) - len(last) // 2]


def test_a_file_written_before_still_reads_and_grows(vault: MemoryVault, tenant: str) -> None:
    # the format is export_line's, as before: a file from the old writer, with a blank
    # line at its end, is continued, not rewritten
    mirror = _mirror(vault)
    path = mirror.path(tenant)
    _remember(vault, tenant, 2, "old")
    old = _export(vault, tenant)
    path.write_bytes(old + b"\n")
    _remember(vault, tenant, 1, "new")
    data = path.read_bytes()
    assert data.startswith(old + b"\n") and mirror.files.side_files(tenant) == []
    assert data.replace(b"\n\n", b"\n") == _export(vault, tenant)
    assert mirror.rewrite(tenant) == len(_seqs(data))  # a rewrite from the table drops it
    assert path.read_bytes() == _export(vault, tenant)


def test_other_tenants_files_are_untouched(vault: MemoryVault, tenant: str) -> None:
    other = tenant + "-o"
    vault.ensure_tenant(other)
    mirror = _mirror(vault)
    _remember(vault, other, 2, "other")
    theirs = mirror.path(other).read_bytes()
    _remember(vault, tenant, 1, "kept")
    backup = _Snapshot(vault, tenant)
    _remember(vault, tenant, 2, "mine")
    backup.restore()
    mirror.sync(tenant)
    assert mirror.path(other).read_bytes() == theirs == _export(vault, other)
    assert mirror.files.side_files(other) == []
    assert len(mirror.files.side_files(tenant)) == 1


# -- the file mechanics without a database -------------------------------------------------


def _table(rows: list[dict[str, Any]]) -> jsonl.Table[dict[str, Any]]:
    import orjson

    def fetch(after: int, limit: int) -> list[dict[str, Any]]:
        return [r for r in rows if r["seq"] > after][:limit]

    return jsonl.Table(fetch=fetch, seq=lambda r: r["seq"], ident=lambda r: r["id"],
                       render=lambda r: orjson.dumps(r) + b"\n",
                       key=lambda e: (e["seq"], e["id"]))


def test_unsafe_names_are_refused(tmp_path: Path) -> None:
    files = jsonl.TenantFiles(tmp_path)
    for bad in ("../x", "a/b", "A", "", ".hidden", "a.b", "x" * 65):
        with pytest.raises(ValidationError) as err:
            files.path(bad)
        assert err.value.field == "tenant"
    assert files.path("acme-1") == tmp_path / "acme-1.jsonl"
    assert files.path("_system") == tmp_path / "_system.jsonl"


def test_keep_appends_what_the_file_lacks_and_counts_the_rest(tmp_path: Path) -> None:
    files = jsonl.TenantFiles(tmp_path, batch=2)
    rows = [{"seq": s, "id": f"r{s}"} for s in (2, 5, 9)]
    assert files.sync("t", _table(rows), ahead=jsonl.KEEP).written == 3
    # a restore: the table lost seq 9 and then got another row at 7
    restored = [*rows[:2], {"seq": 7, "id": "n7"}]
    done = files.sync("t", _table(restored), ahead=jsonl.KEEP)
    assert (done.written, done.unmatched, done.set_aside) == (1, 1, None)
    text = files.path("t").read_text()
    assert [line.split('"id":"')[1][:2] for line in text.splitlines()] == ["r2", "r5", "r9",
                                                                           "n7"]


def test_set_aside_moves_the_first_mismatch_and_all_after(tmp_path: Path) -> None:
    files = jsonl.TenantFiles(tmp_path, batch=2)
    rows = [{"seq": s, "id": f"r{s}"} for s in range(1, 6)]
    files.sync("t", _table(rows), ahead=jsonl.SET_ASIDE)
    old = files.path("t").read_bytes()
    now = [*rows[:3], {"seq": 4, "id": "x4"}]
    done = files.sync("t", _table(now), ahead=jsonl.SET_ASIDE)
    assert done.written == 1 and done.set_aside is not None
    assert done.set_aside.read_bytes() == b"".join(old.splitlines(keepends=True)[3:])
    assert files.path("t").read_bytes() == b"".join(_table(now).render(r) for r in now)


def test_dump_replaces_atomically_and_last_line_skips_blanks(tmp_path: Path) -> None:
    rows = [{"seq": s, "id": f"r{s}"} for s in range(1, 4)]
    target = tmp_path / "copy.jsonl"
    target.write_bytes(b"old content that is longer than the new one" * 10)
    assert jsonl.dump(target, _table(rows), batch=2) == 3
    assert target.read_bytes() == b"".join(_table(rows).render(r) for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.jsonl"]  # no temp left
    target.write_bytes(target.read_bytes() + b"\n  \n")
    assert jsonl.last_line(target) == _table(rows).render(rows[-1]).rstrip(b"\n")
    target.write_bytes(b'{"seq": 1}')  # no complete line
    assert jsonl.last_line(target) is None


def test_an_append_is_one_query_and_batches_are_followed(tmp_path: Path) -> None:
    rows = [{"seq": s, "id": f"r{s}"} for s in range(1, 8)]
    calls: list[int] = []
    inner = _table(rows)

    def fetch(after: int, limit: int) -> list[dict[str, Any]]:
        calls.append(after)
        return list(inner.fetch(after, limit))

    table = jsonl.Table(fetch=fetch, seq=inner.seq, ident=inner.ident, render=inner.render,
                        key=inner.key)
    files = jsonl.TenantFiles(tmp_path, batch=3)
    assert files.sync("t", table, ahead=jsonl.SET_ASIDE).written == 7
    assert calls == [0, 3, 6]  # full batches are followed; a short one is the last
    calls.clear()
    assert files.sync("t", table, ahead=jsonl.SET_ASIDE).written == 0
    assert calls == [6]  # in step: one query checks the last line and finds nothing new
    rows.append({"seq": 8, "id": "r8"})
    calls.clear()
    assert files.sync("t", table, ahead=jsonl.SET_ASIDE).written == 1
    assert calls == [6]
    assert files.path("t").read_bytes() == b"".join(inner.render(r) for r in rows)


def test_concurrent_shared_syncs_share_passes_and_miss_no_row(tmp_path: Path) -> None:
    """Issue 29: writers that commit while a sync runs are covered by the next one; each
    writer's rows are in the file when its own sync returns; a failed sync covers no one;
    sequential syncs never skip."""
    import threading
    import time

    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    passes: list[int] = []
    fail = {"next": False}
    inner = _table(rows)

    def fetch(after: int, limit: int) -> list[dict[str, Any]]:
        passes.append(after)
        time.sleep(0.01)  # a query's time: writers pile up behind it
        if fail["next"]:
            fail["next"] = False
            raise RuntimeError("database gone")
        with lock:
            return list(inner.fetch(after, limit))

    table = jsonl.Table(fetch=fetch, seq=inner.seq, ident=inner.ident, render=inner.render,
                        key=inner.key)
    files = jsonl.TenantFiles(tmp_path, fsync=False)
    missing: list[int] = []

    def writer(i: int) -> None:
        for j in range(5):
            with lock:  # "commit" a row, then sync as the after-commit hook does
                seq = len(rows) + 1
                rows.append({"seq": seq, "id": f"w{i}-{j}"})
            files.sync("t", table, ahead=jsonl.SET_ASIDE, shared=True)
            if f'"seq":{seq},' not in files.path("t").read_text():
                missing.append(seq)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert missing == []
    assert files.path("t").read_bytes() == b"".join(inner.render(r) for r in rows)
    assert len(passes) < len(rows)  # fewer passes than writers' syncs (40)
    # sequential: each call syncs (none began after it), and a failure covers nobody
    rows.append({"seq": len(rows) + 1, "id": "late"})
    fail["next"] = True
    with pytest.raises(RuntimeError):
        files.sync("t", table, ahead=jsonl.SET_ASIDE, shared=True)
    assert files.sync("t", table, ahead=jsonl.SET_ASIDE, shared=True).written == 1
    assert files.sync("t", table, ahead=jsonl.SET_ASIDE, shared=True).written == 0
