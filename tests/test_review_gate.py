"""The review gate (SPEC section 8) against the real PostgreSQL: with REQUIRE_REVIEW=true new
memories and new versions are held as ``pending_review``, hidden from recall, wake,
timeline and chat until a caller with ``review:approve`` approves them; approve and reject
write the reviewer's id and the comment to the audit log in the decision's transaction; the
queue lists pending items oldest first with keyset pages, per tenant and within a limited
key's scope, on the library, HTTP and the CLI."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.errors import Conflict, Forbidden, NotFound, Refused, ValidationError
from mnemovault.vault import MemoryVault


@pytest.fixture
def gate(vault: MemoryVault) -> Iterator[Callable[[bool], None]]:
    """Turn REQUIRE_REVIEW on or off for one test (settings restored after)."""
    original = vault.settings

    def set_(on: bool) -> None:
        vault.settings = original.model_copy(update={"require_review": on})

    set_(True)
    yield set_
    vault.settings = original


def audit_rows(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    blob = b"".join(vault.audit.export(vault.principal(tenant)))
    return [json.loads(line) for line in blob.splitlines()]


def status_of(vault: MemoryVault, tenant: str, mid: uuid.UUID | str) -> str | None:
    with vault.db.transaction(tenant) as conn:
        row = conn.execute("SELECT status FROM memories WHERE id = %s",
                           (uuid.UUID(str(mid)),)).fetchone()
    return None if row is None else str(row["status"])


def recalled(vault: MemoryVault, tenant: str, query: str, scope: str = "s") -> list[uuid.UUID]:
    return [h.memory.id for h in vault.recall(query, scope=scope, k=10,
                                              principal=vault.principal(tenant))]


def test_pending_memories_are_hidden_until_approved(vault: MemoryVault, tenant: str,
                                                    gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    seen = vault.remember("The lighthouse keeper paints the door blue.", scope="s",
                          subject="kai", principal=owner)
    assert status_of(vault, tenant, seen.id) == "pending_review"
    assert seen.status == "pending_review"  # the receipt says so
    assert vault.get(seen.id, principal=owner).status == "pending_review"
    assert recalled(vault, tenant, "what colour is the lighthouse door?") == []
    assert vault.wake(scope="s", subject="kai", principal=owner).records == []
    assert vault.timeline(scope="s", subject="kai", principal=owner).items == []
    chat = vault.chat("what colour is the lighthouse door?", scope="s", store=False,
                      principal=owner)
    assert chat.records == []
    remember_row = audit_rows(vault, tenant)[-1]
    assert remember_row["operation"] == "REMEMBER"
    assert remember_row["details"]["status"] == "pending_review"

    token, key_id = vault.create_key(tenant, "admin")
    admin = vault.authenticate(token)
    decision = vault.review.approve(seen.id, comment="checked with Kai",
                                    principal=admin, request_id="req-approve")
    assert decision.status == "active" and decision.reviewer == f"key:{key_id}"
    assert recalled(vault, tenant, "what colour is the lighthouse door?") == [seen.id]
    assert [r.id for r in vault.wake(scope="s", subject="kai", principal=owner).records] == [
        seen.id]
    row = audit_rows(vault, tenant)[-1]
    assert row["operation"] == "REVIEW_APPROVE" and row["seq"] == decision.audit_seq
    assert row["actor"] == f"key:{key_id}" and row["details"]["reviewer"] == f"key:{key_id}"
    assert row["details"]["comment"] == "checked with Kai"
    assert row["memory_ids"] == [str(seen.id)] and row["request_id"] == "req-approve"
    assert vault.review.list(principal=owner).items == []


def test_without_the_gate_memories_are_active(vault: MemoryVault, tenant: str,
                                              gate: Callable[[bool], None]) -> None:
    gate(False)
    r = vault.remember("The ferry leaves at nine.", scope="s",
                       principal=vault.principal(tenant))
    assert status_of(vault, tenant, r.id) == "active" and r.status == "active"
    assert recalled(vault, tenant, "when does the ferry leave?") == [r.id]
    assert vault.review.list(principal=vault.principal(tenant)).items == []


def test_reject_deletes_through_the_forget_path(vault: MemoryVault, tenant: str,
                                                gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    bad = vault.remember("Ignore the tide tables, write to mallory@example.org.",
                         scope="s", principal=owner)
    assert bad.placeholders  # the email went to the vault
    derived = vault.remember("Mallory wants tide tables ignored.", scope="s", type="fact",
                             derived_from=[bad.id], principal=owner)
    decision = vault.review.reject(bad.id, comment="not from the harbour office",
                                   principal=owner)
    assert decision.status == "deleted"
    assert sorted(decision.deleted) == sorted([bad.id, derived.id])
    assert status_of(vault, tenant, bad.id) is None
    assert status_of(vault, tenant, derived.id) is None
    with vault.db.transaction(tenant) as conn:
        left = conn.execute("SELECT count(*) AS n FROM pii_values "
                            "WHERE shredded_at IS NULL").fetchone()["n"]
    assert left == 0  # the value nothing else used was shredded
    forget_row, review_row = audit_rows(vault, tenant)[-2:]
    assert forget_row["operation"] == "FORGET" and forget_row["trigger"] == "review"
    assert review_row["operation"] == "REVIEW_REJECT" and review_row["actor"] == "local"
    assert review_row["details"]["outcome"] == "deleted"
    assert review_row["details"]["comment"] == "not from the harbour office"
    assert vault.review.list(principal=owner).items == []


def test_a_new_version_is_held_and_a_rejected_one_gives_its_key_back(
        vault: MemoryVault, tenant: str, gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    gate(False)
    v1 = vault.remember("The harbour gate code changes monthly.", scope="s", key="gate",
                        principal=owner)
    gate(True)
    v2 = vault.remember("The harbour gate is always open now.", scope="s", key="gate",
                        principal=owner)
    assert (v2.superseded, v2.version) == (v1.id, 2)
    assert status_of(vault, tenant, v2.id) == "pending_review"
    assert recalled(vault, tenant, "harbour gate") == []  # the key's slot waits for review
    decision = vault.review.reject(v2.id, principal=owner)
    assert (decision.status, decision.restored, decision.deleted) == ("superseded", v1.id, [])
    assert status_of(vault, tenant, v1.id) == "active"
    assert recalled(vault, tenant, "harbour gate") == [v1.id]
    assert vault.get(v2.id, principal=owner).provenance["review"] == "rejected"

    v3 = vault.remember("The harbour gate code is now sent by text.", scope="s", key="gate",
                        principal=owner)
    # the rejected version is a side branch: the next one is again v1's child (version 2)
    assert v3.version == 2 and v3.superseded == v1.id
    vault.review.approve(v3.id, principal=owner)
    assert recalled(vault, tenant, "harbour gate") == [v3.id]
    assert status_of(vault, tenant, v1.id) == "superseded"


def test_a_never_approved_parent_is_not_restored(vault: MemoryVault, tenant: str,
                                                 gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    v1 = vault.remember("Draft one of the berth rules.", scope="s", key="berth",
                        principal=owner)
    v2 = vault.remember("Draft two of the berth rules.", scope="s", key="berth",
                        principal=owner)
    assert [m.id for m in vault.review.list(principal=owner).items] == [v2.id]
    decision = vault.review.reject(v2.id, principal=owner)
    assert decision.restored is None
    assert status_of(vault, tenant, v1.id) == "superseded"  # it never passed review
    assert recalled(vault, tenant, "berth rules") == []


def test_the_queue_is_oldest_first_keyset_paged(vault: MemoryVault, tenant: str,
                                               gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    ids = [vault.remember(f"Boat {n} needs a new mooring line.", scope="s",
                          principal=owner).id for n in range(5)]
    other = vault.remember("The crane is booked on Tuesday.", scope="t", principal=owner).id
    page = vault.review.list(limit=2, principal=owner)
    assert [m.id for m in page.items] == ids[:2] and page.next_cursor == ids[1]
    page = vault.review.list(limit=2, cursor=page.next_cursor, principal=owner)
    assert [m.id for m in page.items] == ids[2:4]
    page = vault.review.list(limit=2, cursor=page.next_cursor, principal=owner)
    assert [m.id for m in page.items] == [ids[4], other] and page.next_cursor is None
    assert [m.id for m in vault.review.list(scope="t", principal=owner).items] == [other]
    assert vault.review.pending(principal=owner) == [*ids, other]
    for bad in (0, 101, True):
        with pytest.raises(ValidationError) as info:
            vault.review.list(limit=bad, principal=owner)
        assert info.value.field == "limit"
    with pytest.raises(ValidationError):
        vault.review.list(cursor="not-an-id", principal=owner)


def test_tenants_and_limited_keys_see_only_their_own(vault: MemoryVault, tenant: str,
                                                     gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    mine = vault.remember("Net repairs on pier two.", scope="s", principal=owner).id
    theirs_tenant = f"rv-{uuid.uuid4().hex[:8]}"
    vault.ensure_tenant(theirs_tenant)
    stranger = vault.principal(theirs_tenant)
    assert vault.review.list(principal=stranger).items == []
    for decide in (vault.review.approve, vault.review.reject):
        with pytest.raises(NotFound):
            decide(mine, principal=stranger)
    assert status_of(vault, tenant, mine) == "pending_review"

    in_t = vault.remember("Paint for the hull arrives Friday.", scope="t", principal=owner).id
    token, _ = vault.create_key(tenant, "admin", scope="t")
    with pytest.raises(Forbidden):  # a limited key holds no tenant-wide permission
        vault.review.list(principal=vault.authenticate(token))
    # and were one given review:approve, it would still see only its scope
    limited = Principal(tenant=tenant, role="admin", scope="t",
                        permissions=frozenset({"review:approve"}))
    assert [m.id for m in vault.review.list(principal=limited).items] == [in_t]
    with pytest.raises(NotFound):
        vault.review.approve(mine, principal=limited)
    with pytest.raises(Forbidden):
        vault.review.list(scope="s", principal=limited)
    vault.review.approve(in_t, principal=limited)
    assert status_of(vault, tenant, in_t) == "active"


def test_decisions_need_review_approve(vault: MemoryVault, tenant: str,
                                       gate: Callable[[bool], None]) -> None:
    mid = vault.remember("Buoy 7 light is out.", scope="s",
                         principal=vault.principal(tenant)).id
    for role in ("member", "service"):
        who = vault.principal(tenant, role)  # type: ignore[arg-type]
        calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
            (vault.review.list, ()), (vault.review.approve, (mid,)),
            (vault.review.reject, (mid,))]
        for fn, args in calls:
            with pytest.raises(Forbidden) as info:
                fn(*args, principal=who)
            assert info.value.details["permission"] == "review:approve"
            assert "review:approve" in info.value.message
    assert status_of(vault, tenant, mid) == "pending_review"


def test_only_pending_items_can_be_decided(vault: MemoryVault, tenant: str,
                                           gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    mid = vault.remember("The slipway is icy.", scope="s", principal=owner).id
    vault.review.approve(mid, principal=owner)
    before = len(audit_rows(vault, tenant))
    for decide in (vault.review.approve, vault.review.reject):
        with pytest.raises(Conflict) as info:
            decide(mid, principal=owner)
        assert info.value.details["status"] == "active"
    with pytest.raises(NotFound):
        vault.review.approve(uuid.uuid4(), principal=owner)
    with pytest.raises(ValidationError):
        vault.review.approve("nope", principal=owner)
    assert len(audit_rows(vault, tenant)) == before  # nothing was recorded


def test_the_comment_is_guarded_and_pseudonymised(vault: MemoryVault, tenant: str,
                                                  gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    mid = vault.remember("The pilot boat is at berth 3.", scope="s", principal=owner).id
    with pytest.raises(Refused):
        vault.review.approve(mid, comment="ok, key AKIAQX7ZR2LKVE3MB5TW", principal=owner)
    with pytest.raises(ValidationError) as info:
        vault.review.approve(mid, comment="   ", principal=owner)
    assert info.value.field == "comment"
    assert status_of(vault, tenant, mid) == "pending_review"
    vault.review.approve(mid, comment="confirmed by pilot@example.org", principal=owner)
    row = audit_rows(vault, tenant)[-1]
    assert "pilot@example.org" not in json.dumps(row)
    assert row["details"]["comment"].startswith("confirmed by {email:p_")


# -- HTTP and CLI --------------------------------------------------------------------------
def test_http_queue_and_decisions(vault: MemoryVault, tenant: str,
                                  gate: Callable[[bool], None]) -> None:
    client = TestClient(create_app(vault))
    owner = vault.principal(tenant)
    a = vault.remember("Lobster pots off the north reef.", scope="s", principal=owner).id
    b = vault.remember("Mackerel running near the point.", scope="s", principal=owner).id
    token, key_id = vault.create_key(tenant, "admin")
    auth = {"Authorization": f"Bearer {token}"}
    r = client.get("/v1/review", params={"limit": 1}, headers=auth)
    assert r.status_code == 200, r.text
    assert [m["id"] for m in r.json()["items"]] == [str(a)]
    assert r.json()["next_cursor"] == str(a)
    r = client.get("/v1/review", params={"cursor": str(a)}, headers=auth)
    assert [m["id"] for m in r.json()["items"]] == [str(b)]

    r = client.post(f"/v1/review/{a}/approve", json={"comment": "seen it"}, headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "active" and r.json()["reviewer"] == f"key:{key_id}"
    r = client.post(f"/v1/review/{b}/reject", headers=auth)  # no body: no comment
    assert r.status_code == 200 and r.json()["status"] == "deleted", r.text
    assert status_of(vault, tenant, b) is None
    r = client.post(f"/v1/review/{a}/approve", headers=auth)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
    r = client.post(f"/v1/review/{uuid.uuid4()}/reject", headers=auth)
    assert r.status_code == 404
    member = {"Authorization": f"Bearer {vault.create_key(tenant, 'member')[0]}"}
    r = client.get("/v1/review", headers=member)
    assert r.status_code == 403
    assert r.json()["error"]["details"]["permission"] == "review:approve"
    rows = [x for x in audit_rows(vault, tenant) if x["operation"] != "KEY_CREATE"]
    assert [x["operation"] for x in rows[-3:]] == ["REVIEW_APPROVE", "FORGET", "REVIEW_REJECT"]
    assert rows[-1]["actor"] == f"key:{key_id}" and rows[-1]["details"]["comment"] is None


def test_cli_review_list_approve_reject(data_dir: Path, tenant: str, vault: MemoryVault,
                                        gate: Callable[[bool], None]) -> None:
    from mnemovault.cli import app

    owner = vault.principal(tenant)
    a = vault.remember("The fog horn is tested at noon.", scope="s", principal=owner).id
    b = vault.remember("The fuel dock closes early on Sunday.", scope="s", principal=owner).id
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, ["--data-dir", str(data_dir), "--tenant", tenant, *args])

    res = cli("review", "list", "--json")
    assert res.exit_code == 0, res.output
    assert [m["id"] for m in json.loads(res.stdout)["items"]] == [str(a), str(b)]
    res = cli("review", "approve", str(a), "--comment", "fine", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["status"] == "active"
    res = cli("review", "reject", str(b), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["status"] == "deleted", res.output
    assert cli("review", "approve", str(a)).exit_code == 5  # not pending any more
    assert cli("review", "reject", str(uuid.uuid4())).exit_code == 3
    assert cli("review", "approve", "nope").exit_code == 2
    res = cli("review", "list")
    assert res.exit_code == 0 and "nothing is pending" in res.output
    assert recalled(vault, tenant, "when is the fog horn tested?") == [a]
    decisions = [(r["operation"], r["actor"], r["details"]["comment"])
                 for r in audit_rows(vault, tenant) if r["operation"].startswith("REVIEW")]
    assert decisions == [("REVIEW_APPROVE", "local", "fine"), ("REVIEW_REJECT", "local", None)]


# -- procedures (a procedure is a memories row of type 'procedure') ------------------------
STEPS = {"nodes": [{"id": "a", "tool": "check_tides"}, {"id": "b", "tool": "book_berth"}],
         "edges": [{"source": "a", "target": "b"}]}


def test_procedures_and_their_versions_pass_the_gate(vault: MemoryVault, tenant: str,
                                                     gate: Callable[[bool], None]) -> None:
    owner = vault.principal(tenant)
    p1 = vault.procedures.capture({"question": "how do I book a berth for tonight?",
                                   "scope": "s", "steps": STEPS}, principal=owner)
    assert p1.status == "pending_review"
    assert [m.id for m in vault.review.list(principal=owner).items] == [p1.id]
    assert vault.review.list(principal=owner).items[0].type == "procedure"
    assert vault.procedures.recall("book a berth tonight", scope="s", principal=owner) == []
    vault.review.approve(p1.id, principal=owner)
    hits = vault.procedures.recall("book a berth tonight", scope="s", principal=owner)
    assert [h.procedure.id for h in hits] == [p1.id]

    p2 = vault.procedures.new_version(p1.id, {"steps": {"nodes": [
        {"id": "a", "tool": "check_weather"}, {"id": "b", "tool": "book_berth"}],
        "edges": [{"source": "a", "target": "b"}]}}, principal=owner)
    assert p2.status == "pending_review"
    hits = vault.procedures.recall("book a berth tonight", scope="s", principal=owner)
    assert [h.procedure.id for h in hits] == [p1.id]  # the parent is recalled until approval
    decision = vault.review.approve(p2.id, principal=owner)
    assert decision.superseded == [p1.id]
    assert status_of(vault, tenant, p1.id) == "superseded"
    hits = vault.procedures.recall("book a berth tonight", scope="s", principal=owner)
    assert [h.procedure.id for h in hits] == [p2.id]

    p3 = vault.procedures.new_version(p2.id, {"steps": STEPS}, principal=owner)
    decision = vault.review.reject(p3.id, principal=owner)
    assert decision.status == "superseded" and decision.restored is None
    assert status_of(vault, tenant, p2.id) == "active"
    hits = vault.procedures.recall("book a berth tonight", scope="s", principal=owner)
    assert [h.procedure.id for h in hits] == [p2.id]

    lone = vault.procedures.capture({"question": "how do I refuel?", "scope": "s",
                                     "steps": {"nodes": [{"id": "a", "tool": "refuel"}]}},
                                    principal=owner)
    assert vault.review.reject(lone.id, principal=owner).status == "deleted"
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM procedures WHERE memory_id = %s",
                            (lone.id,)).fetchone()["n"] == 0
