"""The batched write path (issue 13 item 5): one batch's pseudonymisation reads and inserts
its vault entries in a few statements, and its memories in one INSERT, with the outcome of
writing them one value and one row at a time: one entry per value, the same placeholder
everywhere, each value its own DEK, nothing written when the batch fails, the audit chain
and the lexical statistics exactly as before."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from mnemovault.errors import ValidationError
from mnemovault.memories import write
from mnemovault.pii.vault import PLACEHOLDER_RE, PiiVault, TenantKeys
from mnemovault.store import memories as store_memories
from mnemovault.vault import MemoryVault
from tests import lexical


def _u() -> str:
    return uuid.uuid4().hex[:8]


def _count(vault: MemoryVault, tenant: str, sql: str) -> int:
    with vault.db.transaction(tenant) as conn:
        return int(conn.execute(sql, (tenant,)).fetchone()["n"])


def _entries(vault: MemoryVault, tenant: str) -> int:
    return _count(vault, tenant, "SELECT count(*) AS n FROM pii_values WHERE tenant_id = %s")


def _deks(vault: MemoryVault, tenant: str) -> list[bytes]:
    with vault.db.transaction(tenant) as conn:
        rows = conn.execute("SELECT wrapped_dek FROM pii_deks WHERE tenant_id = %s",
                            (tenant,)).fetchall()
    return [bytes(r["wrapped_dek"]) for r in rows]


def _reveal(vault: MemoryVault, tenant: str, placeholders: set[str]) -> dict[str, str]:
    with vault.db.transaction(tenant) as conn:
        return vault.pii.reveal_values(conn, tenant, placeholders)


def _batch(u: str) -> list[dict[str, Any]]:
    """A batch where values repeat across items, in other written forms, and where a
    caller-named entity of a later item appears in an earlier one."""
    email, name = f"lena.{u}@example.org", f"Odalys {u.capitalize()}"
    return [
        {"content": f"Mail {email} about card 4111 1111 1111 1111", "scope": "s",
         "subject": email},
        {"content": f"{email.upper()} paid with 4111-1111-1111-1111", "scope": "s",
         "entities": [{"kind": "person", "value": name}]},
        {"content": f"{name.lower()} wrote to {email}; call +1 415 555 2671", "scope": "s",
         "subject": name, "provenance": {"tags": [email]}},
        {"content": "nothing personal here", "scope": "s"},
    ]


def _shape(vault: MemoryVault, tenant: str, ids: list[uuid.UUID]) -> list[Any]:
    """What was stored, with each placeholder named by its order of first appearance (so
    two tenants' writes compare: same shape = same entries in the same places)."""
    names: dict[str, str] = {}

    def norm(text: str | None) -> str | None:
        if text is None:
            return None
        return PLACEHOLDER_RE.sub(
            lambda m: names.setdefault(m.group(0), f"<{m.group(1)}{len(names)}>"), text)

    out = []
    who = vault.principal(tenant)
    for i in ids:
        m = vault.get(i, principal=who)
        out.append((norm(m.content), norm(m.subject), [norm(t) for t in m.provenance["tags"]]))
    return out


def test_a_batch_stores_what_one_by_one_writes_store(vault: MemoryVault) -> None:
    """remember_many of a batch and the same items remembered one at a time give the same
    entries in the same places (no item mentions an entity named by a later one: the batch
    registers every caller-named entity first), and every placeholder reveals the value
    as first written."""
    u = _u()
    batch_tenant, single_tenant = f"b-{u}", f"o-{u}"
    for t in (batch_tenant, single_tenant):
        vault.ensure_tenant(t)
    items = _batch(u)
    receipts = vault.remember_many(items, principal=vault.principal(batch_tenant))
    one = vault.principal(single_tenant)
    ids = [vault.remember(**item, principal=one).id for item in items]
    assert _shape(vault, batch_tenant, [r.id for r in receipts]) == _shape(
        vault, single_tenant, ids)
    # email, card, person, phone: one entry each, four DEKs, all different
    assert _entries(vault, batch_tenant) == _entries(vault, single_tenant) == 4
    deks = _deks(vault, batch_tenant)
    assert len(deks) == 4 and len(set(deks)) == 4
    created = [p for r in receipts for p in r.placeholders]
    assert len(created) == len(set(created)) == 4  # each reported once, where it first occurs
    assert receipts[3].placeholders == []
    values = _reveal(vault, batch_tenant, set(created))
    # the form first written is what is kept
    assert sorted(values.values()) == sorted([
        f"lena.{u}@example.org", "4111 1111 1111 1111", f"Odalys {u.capitalize()}",
        "+1 415 555 2671"])


def test_values_already_in_the_vault_keep_their_placeholder(vault: MemoryVault,
                                                            tenant: str) -> None:
    who = vault.principal(tenant)
    u = _u()
    email = f"ines.{u}@example.com"
    first = vault.remember(f"contact {email}", scope="s", principal=who)
    (ph,) = first.placeholders
    new_email = f"noa.{u}@example.com"
    rs = vault.remember_many([
        {"content": f"{email} again", "scope": "s"},
        {"content": f"{new_email} and {email.upper()}", "scope": "s"},
        {"content": f"{new_email}", "scope": "s", "subject": email},
    ], principal=who)
    assert _entries(vault, tenant) == 2
    assert rs[0].placeholders == [] and rs[2].placeholders == []
    (new_ph,) = rs[1].placeholders
    contents = [vault.get(r.id, principal=who).content for r in rs]
    assert contents == [f"{ph} again", f"{new_ph} and {ph}", new_ph]
    assert vault.get(rs[2].id, principal=who).subject == ph
    assert _reveal(vault, tenant, {ph, new_ph}) == {ph: email, new_ph: new_email}


def test_a_failing_batch_leaves_nothing_written(vault: MemoryVault, tenant: str) -> None:
    """The last item names a source that does not exist: it fails inside the transaction,
    after the batch's new vault entries were inserted; all of it rolls back."""
    who = vault.principal(tenant)
    vault.remember("before", scope="s", principal=who)
    seq = vault.audit.size(who)
    entries, memories = _entries(vault, tenant), _count(
        vault, tenant, "SELECT count(*) AS n FROM memories WHERE tenant_id = %s")
    u = _u()
    with pytest.raises(ValidationError) as err:
        vault.remember_many([
            {"content": f"mail zed.{u}@example.org", "scope": "s",
             "entities": [{"kind": "person", "value": f"Zed {u}"}]},
            {"content": "derived", "scope": "s", "derived_from": [str(uuid.uuid4())]},
        ], principal=who)
    assert err.value.field == "items.1.derived_from.0"
    assert _entries(vault, tenant) == entries
    assert len(_deks(vault, tenant)) == entries
    assert _count(vault, tenant,
                  "SELECT count(*) AS n FROM memories WHERE tenant_id = %s") == memories
    assert vault.audit.size(who) == seq


def test_audit_chain_verifies_after_batches(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    u = _u()
    for b in range(3):
        vault.remember_many([{"content": f"row {b}.{i} for mia.{u}@example.org", "scope": "s"}
                             for i in range(5)], principal=who)
    vault.remember("one more", scope="s", principal=who)
    res = vault.audit.verify(who)
    assert res.ok and res.rows == 4  # one REMEMBER row per batch


def test_memories_insert_in_chunks_keeps_the_lexical_statistics(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One INSERT per chunk of rows (3 here): every row stored, and the per-scope BM25
    statistics the statement trigger keeps equal a recount."""
    monkeypatch.setattr(store_memories, "_ROWS_PER_STATEMENT", 3)
    who = vault.principal(tenant)
    rs = vault.remember_many([{"content": f"walrus number {i} swims", "scope": "lex"}
                              for i in range(7)], principal=who)
    assert len({r.id for r in rs}) == 7
    with vault.db.transaction(tenant) as conn:
        stats = conn.execute(
            "SELECT doc_count, total_length FROM lexical_scope_stats "
            "WHERE tenant_id = %s AND scope = 'lex'", (tenant,)).fetchone()
        recount = conn.execute(
            "SELECT count(*) AS n, sum(tsv_length) AS len FROM memories "
            "WHERE tenant_id = %s AND scope = 'lex'", (tenant,)).fetchone()
        df = conn.execute(
            "SELECT df FROM lexical_df WHERE tenant_id = %s AND scope = 'lex' "
            "AND lexeme = %s", (tenant, lexical.lx(vault, conn, "walrus"))).fetchone()
    assert stats["doc_count"] == recount["n"] == 7
    assert stats["total_length"] == recount["len"]
    assert df["df"] == 7
    hits = vault.recall("walrus swims", scope="lex", principal=who, k=10)
    assert {h.memory.id for h in hits} == {r.id for r in rs}


def test_a_placeholder_collision_moves_to_the_next_candidate(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two new values whose first candidate placeholder is the same (a forced 40-bit
    collision): the batch insert keeps one, the other goes on to its next candidate."""
    original = TenantKeys.candidate

    def colliding(self: TenantKeys, kind: str, value: str, counter: int, *,
                  identity: str | None = None) -> str:
        if counter == 0:
            return f"{{{kind}:p_00000000aa}}"
        return original(self, kind, value, counter, identity=identity)

    monkeypatch.setattr(TenantKeys, "candidate", colliding)
    who = vault.principal(tenant)
    u = _u()
    a, b = f"ava.{u}@example.org", f"bo.{u}@example.org"
    rs = vault.remember_many([{"content": f"{a} and {b}", "scope": "s"},
                              {"content": f"{b} alone", "scope": "s"}], principal=who)
    created = rs[0].placeholders
    assert len(created) == 2 and "{email:p_00000000aa}" in created
    values = _reveal(vault, tenant, set(created))
    assert sorted(values.values()) == sorted([a, b])
    b_ph = next(p for p, v in values.items() if v == b)
    assert vault.get(rs[1].id, principal=who).content == f"{b_ph} alone"
    assert len(set(_deks(vault, tenant))) == 2


def test_concurrent_batches_share_one_entry_per_value(
        vault: MemoryVault, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch writing values that another batch inserted and has not committed yet: its
    insert waits and is skipped, it reads the first writer's entries (one per value, the
    same placeholders, created once)."""
    who = vault.principal(tenant)
    u = _u()
    vault.remember(f"first use of the vault: o.{u}@example.org", scope="s", principal=who)
    emails = [f"p{i}.{u}@example.org" for i in range(6)]
    inserted = threading.Event()
    embed = write.embed

    def slow_embed(rt: Any, prepared: Any) -> Any:
        if threading.current_thread().name == "first":
            inserted.set()  # its vault entries are in, uncommitted
            time.sleep(0.5)  # the second writer now runs into them
        return embed(rt, prepared)

    fallback = []
    get_or_create = PiiVault.get_or_create

    def spy(self: PiiVault, *a: Any, **kw: Any) -> Any:
        fallback.append(threading.current_thread().name)
        return get_or_create(self, *a, **kw)

    monkeypatch.setattr(write, "embed", slow_embed)
    monkeypatch.setattr(PiiVault, "get_or_create", spy)
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(name: str, order: list[str]) -> None:
        try:
            if name == "second":
                assert inserted.wait(30)
            results[name] = vault.remember_many(
                [{"content": f"mail {e}", "scope": "s"} for e in order], principal=who)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, name="first", args=("first", emails)),
               threading.Thread(target=run, name="second", args=("second", emails[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert fallback == ["second"] * 6  # every insert of the second writer was skipped
    assert _entries(vault, tenant) == 7 and len(_deks(vault, tenant)) == 7
    assert all(len(r.placeholders) == 1 for r in results["first"])
    assert all(r.placeholders == [] for r in results["second"])
    by_value = {}
    for name, order in (("first", emails), ("second", emails[::-1])):
        for e, r in zip(order, results[name], strict=True):
            by_value.setdefault(e, set()).add(vault.get(r.id, principal=who).content)
    assert all(len(v) == 1 for v in by_value.values())
