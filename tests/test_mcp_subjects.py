"""The MCP subject-rights and audit tools (issue 24 item 5), driven by the SDK's own
in-process client; each call's principal is authenticated from a real API key, so the
permissions, limits and tenant isolation are the facade's (the same calls the HTTP API
makes). The visibility matrix covers what ``subject_memories`` and ``subject_export`` may
show to every kind of caller; here: the round trips, the receipts and the refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio.from_thread
import pytest
from mcp import Client

from mnemovault.audit.merkle import verify_inclusion
from mnemovault.auth import Principal
from mnemovault.mcp.server import build_server
from mnemovault.vault import MemoryVault

Portal = anyio.from_thread.BlockingPortal


class Session:
    def __init__(self, portal: Portal, client: Any, holder: dict[str, Principal]) -> None:
        self.portal, self.client, self.holder = portal, client, holder

    def as_(self, who: Principal) -> Session:
        self.holder["who"] = who
        return self

    def call(self, tool: str, **arguments: Any) -> Any:
        return self.portal.call(self.client.call_tool, tool, arguments)

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        res = self.call(tool, **arguments)
        assert not res.is_error, res.content
        return res.structured_content  # type: ignore[no-any-return]

    def error(self, tool: str, **arguments: Any) -> dict[str, Any]:
        res = self.call(tool, **arguments)
        assert res.is_error, res.structured_content
        return res.structured_content["error"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def portal() -> Iterator[Portal]:
    with anyio.from_thread.start_blocking_portal() as p:
        yield p


@pytest.fixture(scope="module")
def session(vault: MemoryVault, portal: Portal) -> Iterator[Session]:
    holder: dict[str, Principal] = {}
    server = build_server(vault, lambda ctx: holder["who"])
    with portal.wrap_async_context_manager(Client(server, read_timeout_seconds=120)) as c:
        yield Session(portal, c, holder)


def _who(vault: MemoryVault, tenant: str, role: str = "owner", **limits: str) -> Principal:
    return vault.authenticate(vault.create_key(tenant, role, **limits)[0])  # type: ignore[arg-type]


def test_tools_are_listed_with_true_annotations(session: Session) -> None:
    tools = {t.name: t for t in session.portal.call(session.client.list_tools).tools}
    hints = {n: (t.annotations.read_only_hint, t.annotations.destructive_hint,  # type: ignore[union-attr]
                 t.annotations.idempotent_hint) for n, t in tools.items()  # type: ignore[union-attr]
             if n in ("subject_memories", "subject_export", "rectify", "subject_erase",
                      "audit_verify", "audit_inclusion_proof")}
    assert hints == {
        "subject_memories": (True, False, True), "subject_export": (False, False, True),
        "rectify": (False, True, False), "subject_erase": (False, True, True),
        "audit_verify": (True, False, True), "audit_inclusion_proof": (True, False, True)}
    assert "IRREVERSIBLE" in (tools["subject_erase"].description or "")
    assert "receipt" in (tools["subject_erase"].description or "")
    assert "confirm" in (tools["forget"].description or "") or "ids" in (
        tools["forget"].description or "")
    assert "pending_review" in (tools["remember"].description or "")
    for name in hints:
        assert tools[name].input_schema.get("additionalProperties") is False, name


def test_list_export_rectify_erase_round_trip(session: Session, vault: MemoryVault,
                                              tenant: str) -> None:
    s = session.as_(_who(vault, tenant))
    a = s.ok("remember", content="Ada (ada.l@example.org) keeps bees.", scope="sup",
             subject="ada.l@example.org")
    b = s.ok("remember", content="Ada prefers green tea.", scope="sup",
             subject="ada.l@example.org")
    other = s.ok("remember", content="Bob likes coffee.", scope="sup", subject="bob")

    page = s.ok("subject_memories", subject="ada.l@example.org", scope="sup")
    assert sorted(m["id"] for m in page["items"]) == sorted([a["id"], b["id"]])
    assert "ada.l@example.org" not in json.dumps(page)  # placeholders, not the value
    doc = s.ok("subject_export", subject="ada.l@example.org", scope="sup")
    assert doc["format"].startswith("mnemovault-subject-export/")
    assert {m["id"] for m in doc["memories"]} >= {a["id"], b["id"]}
    revealed = s.ok("subject_export", subject="ada.l@example.org", scope="sup", reveal=True)
    assert "ada.l@example.org" in json.dumps(revealed)

    fixed = s.ok("rectify", memory_id=b["id"], content="Ada prefers mint tea.")
    assert fixed["id"] == b["id"] and fixed["version"] == 2
    assert vault.get(b["id"], principal=s.holder["who"]).content == "Ada prefers mint tea."

    assert fixed["history"]  # the stretch before the correction (valid time, issue 23)

    er = s.ok("subject_erase", subject="ada.l@example.org", scope="sup")
    assert sorted(er["deleted"]) == sorted([a["id"], b["id"], fixed["history"]])
    assert er["shredded"]  # the e-mail only Ada's memories used
    assert vault.subjects.verify_receipt(er["receipt"])["tenant"] == tenant
    assert s.ok("subject_memories", subject="ada.l@example.org", scope="sup")["items"] == []
    assert [h["id"] for h in s.ok("recall", query="bees tea", scope="sup", k=10)["hits"]] == [
        other["id"]]
    again = s.ok("subject_erase", subject="ada.l@example.org", scope="sup")
    assert again["deleted"] == []  # repeating removes nothing more


def test_permissions_and_limits_are_the_facades(session: Session, vault: MemoryVault,
                                                tenant: str) -> None:
    s = session.as_(_who(vault, tenant))
    mid = s.ok("remember", content="Cy likes rain.", scope="in", subject="cy")["id"]
    s.ok("remember", content="Dee likes snow.", scope="out", subject="dee")
    s.as_(_who(vault, tenant, "member"))
    for tool, args in (("subject_export", {"subject": "cy", "scope": "in"}),
                       ("subject_erase", {"subject": "cy", "scope": "in"}),
                       ("rectify", {"memory_id": mid, "content": "Cy likes sun."})):
        e = s.error(tool, **args)
        assert (e["code"], e["details"]["permission"]) == ("forbidden", "subject:erase"), tool
    assert s.error("audit_verify")["details"]["permission"] == "audit:read"
    assert [m["id"] for m in s.ok("subject_memories", subject="cy", scope="in")["items"]] == [
        mid]  # member: memory:read
    s.as_(_who(vault, tenant, "owner", scope="in"))
    assert s.error("subject_erase", subject="dee", scope="out")["code"] == "forbidden"
    assert s.error("subject_memories", subject="dee", scope="out")["code"] == "forbidden"
    # another tenant's owner: the memory is not there
    s.as_(_who(vault, tenant + "x"))
    vault.ensure_tenant(tenant + "x")
    assert s.error("rectify", memory_id=mid, content="Cy likes sun.")["code"] == "not_found"
    assert vault.get(mid, principal=vault.principal(tenant)).content == "Cy likes rain."
    assert s.error("subject_erase", subject="cy", scope="in", confirm=True)["field"] == \
        "confirm"  # unknown arguments are refused with the envelope


def test_audit_verify_and_inclusion_proof(session: Session, vault: MemoryVault,
                                          tenant: str) -> None:
    s = session.as_(_who(vault, tenant))
    r = s.ok("remember", content="Eve waters the plants on Fridays.", scope="e")
    s.ok("remember", content="Eve walks the dog.", scope="e")
    status = s.ok("audit_verify")
    assert status["ok"] is True and status["rows"] >= 2 and status["tenant_id"] == tenant
    cp = vault.audit.checkpoint(s.holder["who"], sign_now=True)
    signed = s.ok("audit_verify")
    assert signed["ok"] and signed["checkpoint_checked"] is True
    assert signed["checkpoint"]["signature_verified"] is True
    assert signed["checkpoint"]["root_hash"] == cp["root"]

    proof = s.ok("audit_inclusion_proof", seq=r["audit_seq"], size=cp["size"])
    verify_inclusion(proof["leaf_index"], cp["size"], bytes.fromhex(proof["leaf_hash"]),
                     [bytes.fromhex(h) for h in proof["proof"]], bytes.fromhex(cp["root"]))
    with pytest.raises(Exception, match="root"):  # the check can fail
        verify_inclusion(proof["leaf_index"], cp["size"], bytes(32),
                         [bytes.fromhex(h) for h in proof["proof"]],
                         bytes.fromhex(cp["root"]))
    current = s.ok("audit_inclusion_proof", seq=1)
    assert current["size"] >= cp["size"]
    assert s.error("audit_inclusion_proof", seq=10_000)["code"] == "validation"
