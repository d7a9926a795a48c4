"""The visibility rule (:mod:`mnemovault.visibility`, issue 19) on the library, where each
case is cheapest to state: reveal through a record that carries the value, never through a
quoted placeholder; a limited key's writes that confirm nothing outside its limits; pending
records for reviewers only; previews that withhold what the caller may not see.

The generated matrix over every interface is ``tests/test_visibility_matrix.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mnemovault.errors import NotFound
from mnemovault.llm.base import ChatPrompt
from mnemovault.vault import MemoryVault


class RepeatsPrompt:
    """A chat model that repeats the user's message (so a quoted placeholder comes back)."""

    name = "repeats"

    def stream(self, prompt: ChatPrompt) -> Iterator[str]:
        yield f"You said: {prompt.question}"


@pytest.fixture
def world(vault: MemoryVault, tenant: str) -> dict[str, Any]:
    """An outside value (only in scope ``other``), and owner keys limited to scope ``mine``
    and to subject ``sam``."""
    owner = vault.principal(tenant)
    outside = vault.remember("Write to zed.secret@example.org about the lease",
                             scope="other", subject="zed", principal=owner)
    ph = outside.placeholders[0]
    scoped = vault.authenticate(vault.create_key(tenant, "owner", scope="mine")[0])
    person = vault.authenticate(vault.create_key(tenant, "owner", subject="sam")[0])
    return {"owner": owner, "ph": ph, "value": "zed.secret@example.org", "scoped": scoped,
            "person": person, "outside_id": outside.id}


def _texts(obj: Any) -> str:
    return repr(obj)


def test_quoting_an_outside_placeholder_reveals_nothing(vault: MemoryVault,
                                                        world: dict[str, Any]) -> None:
    ph, value = world["ph"], world["value"]
    for who, scope in ((world["scoped"], "mine"), (world["person"], "notes")):
        r = vault.remember(f"Remember {ph} for later", scope=scope, principal=who)
        got = vault.get(r.id, reveal=True, principal=who)
        assert ph in got.content and value not in got.content
        hits = vault.recall("remember for later", scope=scope, reveal=True, principal=who)
        assert hits and value not in _texts(hits) and ph in _texts(hits)
        with pytest.raises(NotFound):  # quoting it: not found, like a made-up placeholder
            vault.vault_entry(ph, reveal=True, principal=who)
        assert value not in _texts(vault.placeholder_outputs([ph], reveal=True,
                                                             principal=who))
    # the unlimited owner reveals it, through any record
    assert vault.vault_entry(ph, reveal=True, principal=world["owner"])["value"] == value


def test_rectify_quoting_an_outside_placeholder_reveals_nothing(
        vault: MemoryVault, world: dict[str, Any]) -> None:
    who, ph, value = world["person"], world["ph"], world["value"]
    r = vault.remember("Sam likes tea", scope="notes", principal=who)
    vault.subjects.rectify(r.id, f"Sam likes tea and writes to {ph}", principal=who)
    got = vault.get(r.id, reveal=True, principal=who)
    assert ph in got.content and value not in got.content
    export = vault.subjects.export("sam", scope="notes", reveal=True, principal=who)
    assert value not in _texts(export)


def test_chat_repeating_a_quoted_placeholder_reveals_nothing(
        vault: MemoryVault, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vault, "llm", RepeatsPrompt())
    ph, value = world["ph"], world["value"]
    out = vault.chat(f"What is {ph}?", scope="mine", reveal=True, store=False,
                     principal=world["scoped"])
    assert ph in out.reply and value not in out.reply, out.reply
    out = vault.chat(f"What is {ph}?", scope="mine", reveal=True, store=False,
                     principal=world["owner"])
    assert value in out.reply  # an unlimited owner reveals what it quotes


def test_a_value_written_by_the_limited_key_itself_is_revealed(
        vault: MemoryVault, world: dict[str, Any]) -> None:
    who, value = world["scoped"], world["value"]
    r = vault.remember(f"My landlord is {value}", scope="mine", principal=who)
    assert r.placeholders == [world["ph"]]  # listed as created: nothing tells it existed
    mine = vault.get(r.id, reveal=True, principal=who)
    assert value in mine.content
    # the entry's date is its first use within the limits, not when it was first seen
    assert vault.vault_entry(world["ph"], principal=who)["created_at"] == mine.created_at
    assert vault.vault_entry(world["ph"], principal=world["owner"])["created_at"] < \
        mine.created_at
    assert [e["created_at"] for e in vault.vault_entries(principal=who)
            if e["placeholder"] == world["ph"]] == [mine.created_at]
    again = vault.remember(f"Call {value} again", scope="mine", principal=who)
    assert again.placeholders == []  # now used within its limits


def test_a_name_known_only_outside_is_not_confirmed_to_a_limited_key(
        vault: MemoryVault, world: dict[str, Any]) -> None:
    owner = world["owner"]
    vault.remember("Met Quillon Varga at the fair", scope="other", principal=owner,
                   entities=[{"kind": "person", "value": "Quillon Varga"}])
    mine = vault.remember("Quillon Varga called", scope="mine", principal=world["scoped"])
    assert "Quillon Varga" in vault.get(mine.id, principal=world["scoped"]).content
    # the tenant-wide owner's writes still recognise it everywhere
    theirs = vault.remember("Quillon Varga called again", scope="mine", principal=owner)
    assert "Quillon Varga" not in vault.get(theirs.id, principal=owner).content


@pytest.fixture
def held(vault: MemoryVault, tenant: str,
         monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A pending record (the review gate on while it is written) and callers."""
    monkeypatch.setattr(vault.rt.settings, "require_review", True)
    owner = vault.principal(tenant)
    r = vault.remember("Pending canary okapi", scope="s", principal=owner)
    monkeypatch.setattr(vault.rt.settings, "require_review", False)
    member = vault.authenticate(vault.create_key(tenant, "member")[0])
    admin = vault.authenticate(vault.create_key(tenant, "admin")[0])
    return {"id": r.id, "member": member, "admin": admin}


def test_pending_records_are_for_reviewers_only(vault: MemoryVault,
                                                held: dict[str, Any]) -> None:
    member, admin, mid = held["member"], held["admin"], held["id"]
    with pytest.raises(NotFound):
        vault.get(mid, principal=member)
    assert mid not in [m.id for m in vault.list(scope="s", principal=member).items]
    assert vault.get(mid, principal=admin).status == "pending_review"
    assert mid in [m.id for m in vault.list(scope="s", principal=admin).items]
    for who in (member, admin):  # no model and no recall sees it before approval
        assert mid not in [h.memory.id for h in vault.recall("okapi", scope="s",
                                                             principal=who)]


def test_previews_withhold_what_the_caller_may_not_see(vault: MemoryVault,
                                                       held: dict[str, Any]) -> None:
    member, admin, mid = held["member"], held["admin"], held["id"]
    row = vault.forget_preview([mid], principal=member)[0]
    assert row["excerpt"] is None and row["withheld"] == "pending_review"
    assert "okapi" not in _texts(vault.forget_preview([mid], principal=member))
    row = vault.forget_preview([mid], principal=admin)[0]
    assert "okapi" in row["excerpt"] and row["withheld"] is None


def test_a_derived_record_outside_the_limits_is_withheld_in_a_preview(
        vault: MemoryVault, tenant: str) -> None:
    owner = vault.principal(tenant)
    src = vault.remember("Source canary", scope="s", subject="sam", principal=owner)
    vault.remember("Derived canary wombat", scope="s", subject="kim", type="fact",
                   derived_from=[src.id], principal=owner)
    scoped = vault.authenticate(vault.create_key(tenant, "owner", subject="sam")[0])
    rows = vault.forget_preview([src.id], principal=scoped)
    assert {r["withheld"] for r in rows} == {None, "outside_limits"}
    assert "wombat" not in _texts(rows)


def test_view_purposes_are_the_documented_table() -> None:
    from mnemovault.visibility import _statuses

    assert _statuses("read", False) == ("active", "superseded")
    assert _statuses("read", True) == ("active", "superseded", "pending_review")
    assert _statuses("recall", True) == ("active",)
    assert _statuses("as_of", True) == ("active", "superseded")  # within their intervals
    assert _statuses("review", False) == ()
    assert _statuses("subject", False) is None
