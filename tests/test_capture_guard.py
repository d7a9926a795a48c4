"""The capture guard (SPEC section 8) on every capture path, against the real PostgreSQL:
refused at and above ``BLOCK_AT_SEVERITY`` and passed below it, fail-closed on a detector
that throws or is too slow, and nothing stored when refused (row counts of memories, vault
entries and audit rows). The matched text never appears in an error, an event or a log."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from mnemovault.api import create_app
from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, Refused, Unavailable
from mnemovault.guard import capture
from mnemovault.guard.detectors import (
    Finding,
    GovernmentIdDetector,
    SecretsDetector,
    Severity,
)
from mnemovault.mcp import build_server
from mnemovault.vault import MemoryVault

AWS = "AKIAQX7ZR2LKVE3MB5TW"  # an AWS access key id shape (Critical)
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
       "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")  # High
MENTION = "my password is tulips2024"  # Medium
SSN = "536-90-4399"  # a valid US SSN (High)
SECRET_BITS = (AWS, JWT, "tulips2024", SSN, "hunter22", "s3cr3tpw")


@pytest.fixture
def configure(vault: MemoryVault) -> Iterator[Callable[..., None]]:
    """Replace settings for one test (the session's vault is shared); restored after."""
    original = vault.settings

    def set_(**updates: Any) -> None:
        vault.settings = original.model_copy(update=updates)

    yield set_
    vault.settings = original


@pytest.fixture
def events() -> Iterator[list[capture.GuardEvent]]:
    seen: list[capture.GuardEvent] = []
    capture.set_hook(seen.append)
    yield seen
    capture.set_hook(None)


def counts(vault: MemoryVault, tenant: str) -> dict[str, int]:
    """Rows of the tenant: memories, vault entries, audit rows."""
    with vault.db.transaction(tenant) as conn:
        return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"]
                for t in ("memories", "pii_values", "audit_log")}


def no_secret_in(*texts: str) -> None:
    for text in texts:
        for bit in SECRET_BITS:
            assert bit not in text, f"matched text leaked: {text[:300]}"


# -- detectors -----------------------------------------------------------------------------
SECRETS = {
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
    "aws_access_key": f"the key is {AWS} for prod",
    "aws_secret_key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "push with ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "openai_api_key": "OPENAI_API_KEY is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "anthropic_api_key": "sk-ant-api03-" + "aB3xY9" * 8,
    "stripe_live_key": "charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "mnemovault_api_key": "mvk_acme_" + "0f" * 16 + "_" + "a1" * 32,
    "slack_token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "google_api_key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "jwt": f"session {JWT}",
    "bearer_token": "curl -H 'Authorization: Bearer abcdef0123456789abcdef0123'",
    "url_credentials": "DATABASE_URL=postgres://admin:s3cr3tpw@db.example.com:5432/app",
    "password_assignment": "login with user=ops password=hunter22",
    "password_mention": MENTION,
}
GOVERNMENT = {
    "us_ssn": f"SSN {SSN}", "uk_nino": "NI number AB 12 34 56 C",
    "br_cpf": "CPF 390.533.447-05", "ca_sin": "my SIN is 123 456 782",
    "es_dni": "DNI 12345678Z", "es_nie": "NIE X1234567L",
    "it_codice_fiscale": "codice fiscale RSSMRA85T10A562S",
    "fr_nir": "NIR 2 95 10 99 126 111 93", "in_aadhaar": "Aadhaar 2345 6789 0124",
    "se_personnummer": "personnummer 811218-9876", "fi_hetu": "HETU 131052-308T",
    "fr_nir_bare": "numéro de sécurité sociale : 295109912611193",
    "kr_rrn": "RRN 971013-9019902", "de_idnr": "Steuer-ID 36574261809",
    "nl_bsn": "BSN: 111222333", "pl_pesel": "PESEL 44051401359",
}
BENIGN = [
    "Alice prefers green tea in the morning and coffee after lunch.",
    "Password reset links expire after 24 hours; the password policy needs 12 characters.",
    "Password: forgotten again, she asked IT for a reset.",
    "Set password=<redacted> and api_key=${API_KEY} in the template, secret: ********.",
    "The meeting moved to 2024-03-15 at 14:30, room 4B, call +1 415 555 0134.",
    "Order 123-456-7890 shipped; tracking 1Z999AA10123456784; invoice INV-2024-0042.",
    "Commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed the task-force-skeleton bug.",
    "The sk-learn tutorial and the task-scheduler-config were updated.",
    "Her card 4111 1111 1111 1111 and IBAN DE89 3704 0044 0532 0130 00 are on file.",
    "Request id 0190a3f2-7c4e-7b3a-9d2e-5f6a7b8c9d0e; version 1.2.3-rc.4; ISBN 978-3-16-148410-0.",
    "See https://docs.example.com/guide?token=abc for the API key rotation guide.",
    "The JWT spec (RFC 7519) says tokens start with eyJ when the header is JSON.",
    "Lat 52.520008, lon 13.404954; temperature 21.5 C; 3/4 cup of flour.",
    "He works on the ASIA desk and AKIA is not a word; ghp is short for 'go home please'.",
    "Use the ssh-keygen command to create a new key pair; never share the private key file.",
    "ssn column is varchar(11); SIN is the sine function; BSN is a Dutch abbreviation.",
    "Ticket 20240315-1234 replaced part 12345678Z; batch 811218-9876 ships from bay 185.",
    "IMEI 490154203237518 and serial 295109912611193 are on the box.",
]


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_kind_is_found(kind: str) -> None:
    found = SecretsDetector().scan({"content": SECRETS[kind]})
    assert kind in {f.kind for f in found}, found
    assert all(f.detector == "secrets" and f.field == "content" for f in found)


@pytest.mark.parametrize("kind", sorted(GOVERNMENT))
def test_each_government_id_kind_is_found(kind: str) -> None:
    found = GovernmentIdDetector().scan({"content": GOVERNMENT[kind]})
    assert [f.kind for f in found] == [kind.removesuffix("_bare")]
    assert found[0].severity is Severity.HIGH


def test_benign_text_has_no_findings() -> None:
    for text in BENIGN:
        found = [*SecretsDetector().scan({"c": text}), *GovernmentIdDetector().scan({"c": text})]
        assert found == [], (text, found)


def test_checksums_keep_lookalikes_out() -> None:
    # the shapes of the numbers above with a wrong check digit are not findings
    for text in ("SSN 078-05-1120", "CPF 390.533.447-06", "DNI 12345678A",
                 "Aadhaar 2345 6789 0125", "BSN: 111222334", "PESEL 44051401358"):
        assert GovernmentIdDetector().scan({"c": text}) == [], text


def test_severities_order_and_parse() -> None:
    assert Severity.LOW < Severity.MEDIUM < Severity.HIGH < Severity.CRITICAL
    assert Severity.parse("high") is Severity.HIGH and Severity.CRITICAL.label == "Critical"
    with pytest.raises(ValueError):
        Severity.parse("severe")


def test_settings_come_from_the_spec_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCK_AT_SEVERITY", "critical")
    monkeypatch.setenv("REQUIRE_REVIEW", "true")
    monkeypatch.setenv("MNEMOVAULT_CAPTURE_DETECTORS", '["secrets"]')
    s = Settings()
    assert (s.block_at_severity, s.require_review, s.capture_detectors) == (
        "critical", True, ["secrets"])
    monkeypatch.setenv("BLOCK_AT_SEVERITY", "severe")
    with pytest.raises(Exception, match="BLOCK_AT_SEVERITY"):
        Settings()


# -- remember and batch ------------------------------------------------------------------
def test_remember_is_refused_and_nothing_is_stored(vault: MemoryVault, tenant: str,
                                                   events: list[capture.GuardEvent]) -> None:
    who = vault.principal(tenant)
    vault.remember("A first, harmless memory.", scope="s", principal=who)
    before = counts(vault, tenant)
    with pytest.raises(Refused) as info:
        vault.remember(f"Write to ada@example.org; the deploy key is {AWS}.", scope="s",
                       principal=who)
    exc = info.value
    assert exc.status == 409 and exc.code == "refused" and exc.field == "content"
    assert exc.details["detector"] == "secrets" and exc.details["severity"] == "Critical"
    assert exc.details["kind"] == "aws_access_key"
    assert "secrets" in exc.message and "Critical" in exc.message
    no_secret_in(exc.message, json.dumps(exc.to_dict()))
    assert counts(vault, tenant) == before  # no memory, no vault entry (the email), no audit
    assert [(e.outcome, e.path, e.tenant, e.detector) for e in events] == [
        ("refused", "remember", tenant, "secrets")]


def test_a_secret_in_a_side_field_is_refused(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    for kwargs, field in (({"key": f"deploy-{AWS}"}, "key"),
                          ({"provenance": {"tags": ["ok", "pwd=hunter22"]}}, "tags"),
                          ({"provenance": {"agent": f"bot {JWT}"}}, "provenance.agent"),
                          ({"subject": SSN}, "subject")):
        with pytest.raises(Refused) as info:
            vault.remember("Nothing odd in the content.", scope="s", principal=who, **kwargs)
        assert info.value.field == field
    assert counts(vault, tenant)["memories"] == 0


def test_one_bad_item_refuses_the_whole_batch(vault: MemoryVault, tenant: str,
                                              events: list[capture.GuardEvent]) -> None:
    items = [{"content": f"Harmless note {n}.", "scope": "s"} for n in range(5)]
    items.insert(3, {"content": f"token: {JWT}", "scope": "s"})
    with pytest.raises(Refused) as info:
        vault.remember_many(items, principal=vault.principal(tenant))
    assert info.value.field == "items.3.content" and info.value.details["kind"] == "jwt"
    assert counts(vault, tenant) == {"memories": 0, "pii_values": 0, "audit_log": 0}
    assert events[-1].path == "batch"


def test_threshold_refuses_at_and_above_and_passes_below(
        vault: MemoryVault, tenant: str, configure: Callable[..., None]) -> None:
    who = vault.principal(tenant)
    # default High: Medium passes, High and Critical are refused
    vault.remember(MENTION, scope="s", principal=who)
    for text in (f"jwt {JWT}", f"key {AWS}"):
        with pytest.raises(Refused):
            vault.remember(text, scope="s", principal=who)
    assert counts(vault, tenant)["memories"] == 1
    configure(block_at_severity="Medium")
    with pytest.raises(Refused) as info:
        vault.remember(MENTION, scope="s", principal=who)
    assert info.value.details["severity"] == "Medium"
    configure(block_at_severity="critical")
    vault.remember(f"jwt {JWT}", scope="s", principal=who)  # High < Critical: passes
    with pytest.raises(Refused):
        vault.remember(f"key {AWS}", scope="s", principal=who)
    configure(block_at_severity="Low")
    with pytest.raises(Refused):
        vault.remember(MENTION, scope="s", principal=who)
    assert counts(vault, tenant)["memories"] == 2


def test_an_empty_detector_list_turns_the_guard_off(vault: MemoryVault, tenant: str,
                                                    configure: Callable[..., None]) -> None:
    configure(capture_detectors=[])
    vault.remember(f"key {AWS}", scope="s", principal=vault.principal(tenant))
    assert counts(vault, tenant)["memories"] == 1


# -- fail closed -------------------------------------------------------------------------
class Boom:
    name = "boom"

    def scan(self, fields: Mapping[str, str]) -> list[Finding]:
        raise RuntimeError(f"cannot scan {fields['content']}")  # would leak, if shown


class Slow:
    name = "slow"

    def __init__(self) -> None:
        self.release = threading.Event()

    def scan(self, fields: Mapping[str, str]) -> list[Finding]:
        self.release.wait(5)
        return []


class Low:
    name = "low"

    def scan(self, fields: Mapping[str, str]) -> list[Finding]:
        return [Finding(self.name, "odd", Severity.LOW, k) for k in fields]


@pytest.fixture
def plugged(configure: Callable[..., None]) -> Iterator[Callable[..., Any]]:
    names: list[str] = []

    def plug(detector: Any, timeout_ms: float = 500.0) -> Any:
        capture.register_detector(detector.name, lambda: detector)
        names.append(detector.name)
        configure(capture_detectors=["secrets", detector.name],
                  capture_detector_timeout_ms=timeout_ms)
        return detector

    yield plug
    for n in names:
        capture.unregister_detector(n)


def test_a_throwing_detector_fails_closed(vault: MemoryVault, tenant: str,
                                          plugged: Callable[..., Any],
                                          events: list[capture.GuardEvent],
                                          caplog: pytest.LogCaptureFixture) -> None:
    plugged(Boom())
    with caplog.at_level(logging.DEBUG), pytest.raises(Unavailable) as info:
        vault.remember(f"ada@example.org asked about {SSN}", scope="s",
                       principal=vault.principal(tenant))
    exc = info.value
    assert exc.status == 503 and exc.details == {"detector": "boom", "reason": "error"}
    assert "RuntimeError" in exc.message and "ada@" not in exc.message
    no_secret_in(exc.message, caplog.text)
    assert counts(vault, tenant) == {"memories": 0, "pii_values": 0, "audit_log": 0}
    assert [(e.outcome, e.detector, e.error) for e in events] == [
        ("error", "boom", "RuntimeError")]


def test_a_slow_detector_fails_closed(vault: MemoryVault, tenant: str,
                                      plugged: Callable[..., Any],
                                      events: list[capture.GuardEvent]) -> None:
    slow = plugged(Slow(), timeout_ms=100)
    started = time.monotonic()
    try:
        with pytest.raises(Unavailable) as info:
            vault.remember("A harmless memory.", scope="s", principal=vault.principal(tenant))
    finally:
        slow.release.set()
    assert time.monotonic() - started < 3  # the capture did not wait for the detector
    assert info.value.details == {"detector": "slow", "reason": "timeout"}
    assert counts(vault, tenant)["memories"] == 0
    assert [(e.outcome, e.detector) for e in events] == [("timeout", "slow")]


def test_findings_below_the_threshold_pass(vault: MemoryVault, tenant: str,
                                           plugged: Callable[..., Any]) -> None:
    plugged(Low())
    vault.remember("A harmless memory.", scope="s", principal=vault.principal(tenant))
    assert counts(vault, tenant)["memories"] == 1


def test_a_failing_hook_changes_nothing(vault: MemoryVault, tenant: str) -> None:
    def bad_hook(event: capture.GuardEvent) -> None:
        raise ValueError("hook down")

    capture.set_hook(bad_hook)
    try:
        with pytest.raises(Refused):
            vault.remember(f"key {AWS}", scope="s", principal=vault.principal(tenant))
    finally:
        capture.set_hook(None)


def test_default_hook_logs_ids_only(vault: MemoryVault, tenant: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mnemovault.guard.capture"), \
            pytest.raises(Refused):
        vault.remember(f"key {AWS}", scope="s", principal=vault.principal(tenant),
                       request_id="req-42")
    assert "refused" in caplog.text and tenant in caplog.text and "req-42" in caplog.text
    no_secret_in(caplog.text)


HOOKED: list[capture.GuardEvent] = []


def record_hook(event: capture.GuardEvent) -> None:
    """A hook named by MNEMOVAULT_CAPTURE_HOOK in the test below."""
    HOOKED.append(event)


def test_the_hook_setting_names_a_callable(vault: MemoryVault, tenant: str,
                                           configure: Callable[..., None]) -> None:
    configure(capture_hook="tests.test_capture_guard:record_hook")
    HOOKED.clear()
    with pytest.raises(Refused):
        vault.remember(f"SSN {SSN}", scope="s", principal=vault.principal(tenant))
    assert [(e.outcome, e.detector, e.severity) for e in HOOKED] == [
        ("refused", "government_ids", "High")]
    configure(capture_hook="tests.test_capture_guard:HOOKED")  # a list is not callable
    with pytest.raises(ConfigError):
        vault.remember(f"SSN {SSN}", scope="s", principal=vault.principal(tenant))
    assert counts(vault, tenant)["memories"] == 0


def test_detectors_load_from_dotted_paths(vault: MemoryVault, tenant: str,
                                          configure: Callable[..., None]) -> None:
    configure(capture_detectors=["mnemovault.guard.detectors:GovernmentIdDetector"])
    with pytest.raises(Refused) as info:
        vault.remember(f"SSN {SSN}", scope="s", principal=vault.principal(tenant))
    assert info.value.details["detector"] == "government_ids"
    vault.remember(f"key {AWS}", scope="s", principal=vault.principal(tenant))  # no secrets
    configure(capture_detectors=["mnemovault.nowhere:Nothing"])
    with pytest.raises(ConfigError):
        vault.remember("anything", scope="s", principal=vault.principal(tenant))
    assert counts(vault, tenant)["memories"] == 1


def test_check_capture_for_other_paths(vault: MemoryVault,
                                       events: list[capture.GuardEvent]) -> None:
    """The function procedures and runs call: named fields, None skipped."""
    capture.check_capture(vault.rt, path="procedure",
                          fields={"name": "search then book", "intent": None})
    with pytest.raises(Refused) as info:
        capture.check_capture(vault.rt, path="run",
                              fields={"name": "deploy", "intent": f"use {AWS}"})
    assert info.value.field == "intent"
    assert events[-1].path == "run"


# -- HTTP, chat, import, MCP -------------------------------------------------------------
@pytest.fixture(scope="module")
def client(vault: MemoryVault) -> TestClient:
    return TestClient(create_app(vault))


def _token(vault: MemoryVault, tenant: str, role: str = "member") -> str:
    return vault.create_key(tenant, role)[0]  # type: ignore[arg-type]


def test_http_answers_409_refused_without_the_text(vault: MemoryVault, tenant: str,
                                                   client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {_token(vault, tenant)}"}
    before = counts(vault, tenant)
    r = client.post("/v1/memories", json={"content": f"pw: {JWT}", "scope": "s"},
                    headers=auth)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "refused"
    assert r.json()["error"]["details"]["detector"] == "secrets"
    r2 = client.post("/v1/memories/batch", headers=auth, json={"items": [
        {"content": "fine", "scope": "s"}, {"content": f"SSN {SSN}", "scope": "s"}]})
    assert r2.status_code == 409 and r2.json()["error"]["field"] == "items.1.content"
    no_secret_in(r.text, r2.text)
    assert counts(vault, tenant) == before


def test_chat_refuses_to_store_and_does_not_answer(vault: MemoryVault, tenant: str,
                                                   client: TestClient) -> None:
    who = vault.principal(tenant)
    vault.remember("The staging database lives on db-2.", scope="s", principal=who)
    before = counts(vault, tenant)
    with pytest.raises(Refused):
        vault.chat(f"remember my GitHub token ghp_{'a1B2c3' * 6}", scope="s", principal=who)
    auth = {"Authorization": f"Bearer {_token(vault, tenant)}"}
    for path in ("/v1/chat", "/v1/chat/stream"):
        r = client.post(path, headers=auth, json={"message": f"my SSN is {SSN}", "scope": "s"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "refused", r.text
        no_secret_in(r.text)
    r = client.post("/v1/chat/completions", headers=auth, json={
        "model": "mnemovault:s", "messages": [{"role": "user", "content": f"SSN {SSN}"}]})
    assert r.status_code == 409 and r.json()["error"]["code"] == "refused", r.text
    no_secret_in(r.text)
    after = counts(vault, tenant)
    assert after["memories"] == before["memories"] and after["pii_values"] == before["pii_values"]
    # DO_NOT_STORE stores nothing, but the message would reach the model: refused too
    # (issue 20); without the secret it is answered
    with pytest.raises(Refused):
        vault.chat(f"DO_NOT_STORE: is {SSN} an SSN?", scope="s", principal=who)
    res = vault.chat("DO_NOT_STORE: where does the staging database live?", scope="s",
                     principal=who)
    assert res.stored is None and counts(vault, tenant)["memories"] == before["memories"]


def test_cli_import_skips_the_refused_record_and_stores_the_rest(
        tmp_path: Path, data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    """Issue 28: a record the guard refuses is skipped and named (line and detector, never
    the text), the others are stored, and the exit status (5) says some were refused
    (``--all-or-nothing`` keeps the old all-or-nothing import)."""
    from mnemovault.cli import app

    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"text": "Oskar: the radio works again.", "subject": "oskar"},
        {"text": "Lena: the wifi password=Harbour!2024 is on the fridge.", "subject": "lena"},
    ]) + "\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["--data-dir", str(data_dir), "--tenant", tenant, "import",
                                   str(f), "--scope", "harbour"])
    assert res.exit_code == 5, res.output
    assert "secrets" in res.output and "Harbour!2024" not in res.output
    assert counts(vault, tenant)["memories"] == 1
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM memories WHERE subject_id = 'lena'"
                            ).fetchone()["n"] == 0


def test_mcp_remember_is_refused_as_a_tool_error(vault: MemoryVault, tenant: str) -> None:
    who: Principal = vault.principal(tenant, "member")
    server = build_server(vault, lambda ctx: who)
    with anyio.from_thread.start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(Client(server)) as mcp_client:
        res = portal.call(mcp_client.call_tool, "remember",
                          {"content": f"deploy with {AWS}", "scope": "s"})
        assert res.is_error
        body = res.structured_content or {}
        assert body["error"]["code"] == "refused"
        assert body["error"]["details"]["detector"] == "secrets"
        no_secret_in(json.dumps(body))
        ok = portal.call(mcp_client.call_tool, "remember",
                         {"content": "The harbour opens at six.", "scope": "s"})
        assert not ok.is_error
    assert counts(vault, tenant)["memories"] == 1


def test_cli_remember_exit_code_is_5(data_dir: Path, tenant: str, vault: MemoryVault) -> None:
    from mnemovault.cli import app

    res = CliRunner().invoke(app, ["--data-dir", str(data_dir), "--tenant", tenant,
                                   "remember", f"key {AWS}", "--scope", "s"])
    assert res.exit_code == 5, res.output
    no_secret_in(res.output)
    assert counts(vault, tenant)["memories"] == 0


def test_unique_ids_in_the_events_only(vault: MemoryVault, tenant: str,
                                       events: list[capture.GuardEvent]) -> None:
    rid = str(uuid.uuid4())
    with pytest.raises(Refused):
        vault.remember(f"SSN {SSN}", scope="s", principal=vault.principal(tenant),
                       request_id=rid)
    event = events[-1]
    assert event.request_id == rid and event.findings[0].kind == "us_ssn"
    no_secret_in(repr(event))


def test_procedures_and_runs_are_guarded(vault: MemoryVault, tenant: str) -> None:
    who = vault.principal(tenant)
    steps = {"nodes": [{"id": "a", "tool": "deploy"}]}
    with pytest.raises(Refused) as info:
        vault.procedures.capture({"question": f"deploy with key {AWS}", "scope": "s",
                                  "steps": steps}, principal=who)
    assert info.value.details["kind"] == "aws_access_key"
    with pytest.raises(Refused):
        vault.procedures.capture({"question": "how do I deploy?", "name": f"SSN {SSN}",
                                  "scope": "s", "steps": steps}, principal=who)
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM procedures").fetchone()["n"] == 0
    assert counts(vault, tenant)["memories"] == 0


# -- evasions (issue 20, item 2): the guard reads the sanitiser's normalisation ----------------
HOMOGLYPH = dict(zip("acehijopsxyABCEHIJKMOPSTXY", "асеһіјорѕхуАВСЕНІЈКМОРЅТХУ", strict=True))
"""Latin letters and a Cyrillic lookalike of each."""


def _fullwidth(text: str) -> str:
    return "".join("\u3000" if c == " " else chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c
                   for c in text)


def _inside(text: str, s: int, e: int) -> int:
    """A position in (s, e), nearest the middle, between two characters that are not
    spaces (where a token can be split)."""
    mid = (s + e) // 2
    for p in sorted(range(s + 1, e), key=lambda p: abs(p - mid)):
        if not text[p - 1].isspace() and not text[p].isspace():
            return p
    raise AssertionError("no place to split")


def evade(how: str, text: str, s: int, e: int) -> tuple[str, int] | None:
    """``text`` with the evasion ``how`` applied to its match ``[s, e)``, and the position
    in the new text the evasion touched; None: not applicable."""
    if how in ("zero_width", "soft_hyphen", "line_break", "line_break_indented"):
        p = _inside(text, s, e)
        mark = {"zero_width": "\u200b", "soft_hyphen": "\u00ad", "line_break": "\n",
                "line_break_indented": "\n    "}[how]
        return text[:p] + mark + text[p:], p
    if how == "fullwidth":
        return _fullwidth(text), (s + e) // 2
    if how == "homoglyph":
        for p in range(s, e):
            if text[p] in HOMOGLYPH:
                return text[:p] + HOMOGLYPH[text[p]] + text[p + 1:], p
        return None
    if how == "dots":  # a national id with dots for its dashes
        dotted = re.sub(r"(?<=\d)-(?=\d)", ".", text[s:e])
        return (text[:s] + dotted + text[e:], s) if dotted != text[s:e] else None
    raise AssertionError(how)


EVASIONS = ("zero_width", "soft_hyphen", "fullwidth", "homoglyph", "line_break",
            "line_break_indented")
CASES = [(kind, how) for kind in sorted(SECRETS) for how in EVASIONS] + [
    (kind, how) for kind in sorted(GOVERNMENT) for how in (*EVASIONS, "dots")]


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_each_kind_is_found_through_each_evasion(kind: str, how: str, vault: MemoryVault,
                                                 configure: Callable[..., None]) -> None:
    text = SECRETS.get(kind) or GOVERNMENT[kind]
    detector = SecretsDetector() if kind in SECRETS else GovernmentIdDetector()
    want = kind.removesuffix("_bare")
    [found] = [f for f in detector.scan({"c": text}) if f.kind == want]
    assert found.start is not None and found.end is not None
    evaded = evade(how, text, found.start, found.end)
    if evaded is None or (how == "dots" and kind == "fi_hetu"):
        pytest.skip("not applicable: no letter with a lookalike in the match (a number "
                    "alone), or no dash (the Finnish dash is a century sign)")
    evaded_text, at = evaded
    assert evaded_text != text
    configure(block_at_severity="Low")  # password_mention is Medium
    with pytest.raises(Refused) as info:
        capture.check_capture(vault.rt, path="remember", fields={"content": evaded_text})
    hits = [f for f in info.value.details["findings"] if f["kind"] == want]
    assert hits, info.value.details
    # the offsets are the original text's: they reach the touched character (a key split
    # by a line break may already be found in its first line)
    assert 0 <= hits[0]["start"] <= at <= hits[0]["end"] <= len(evaded_text), hits[0]
    no_secret_in(info.value.message)


RUSSIAN = [
    "Привет! Мой пароль от почты я не помню, а токен доступа истёк вчера вечером.",
    "АКЦИЯ: скидка 20% на все товары до конца месяца, код заказа 4711, склад на Тверской.",
    "Секретарь положил ключ от сейфа в ящик; номер кабинета 305, телефон в приёмной.",
    "ΑΙΣΘΗΣΗ και ΚΑΛΟΚΑΙΡΙ: η ομάδα ΕΡΓΑΣΙΑΣ συναντιέται στις 10:30 στο γραφείο.",
]
_B64 = base64.b64encode(bytes(range(256)) * 4).decode()
BASE64_BLOB = "\n".join(_B64[i:i + 76] for i in range(0, len(_B64), 76))
MULTILINE = [
    BASE64_BLOB,
    "Dear team,\nthe invoice\n  INV-2024-0042\nis attached.\nAmounts: 971013.25 and\n"
    "150399.1234 EUR;\nversion 1.2.3-rc.4;\ncoordinates 52.520008,13.404954.",
    "def login(user, password):\n    return check(user,\n        password)\n",
    "Roses are red,\nviolets are blue,\nSIN is a function,\nand cosine is too.",
]


@pytest.mark.parametrize("text", [*RUSSIAN, *MULTILINE, *BENIGN])
def test_benign_text_stays_benign_after_normalisation(text: str, vault: MemoryVault,
                                                      configure: Callable[..., None]) -> None:
    configure(block_at_severity="Low")
    for variant in (text, _fullwidth(text), text.replace(". ", ".\n").replace(", ", ",\n")):
        capture.check_capture(vault.rt, path="remember", fields={"content": variant})


def test_views_map_back_to_the_original() -> None:
    from mnemovault.guard.normalise import views

    text = f"key: ＡＫ\u200bＩＡ{AWS[4:10]}\n   {AWS[10:]} done"
    first, joined = views(text)
    assert first.text == f"key: AKIA{AWS[4:10]}\n   {AWS[10:]} done"
    assert joined.text == f"key: {AWS} done"
    s = joined.text.index("AKIA")
    assert joined.origin(s, s + len(AWS)) == (5, text.index(" done"))
    plain = "nothing to map here"
    assert views(plain)[0].text is plain and views(plain)[0].origin(3, 7) == (3, 7)


# -- fail closed on a malformed answer (issue 20, item 3) ---------------------------------
class Answers:
    """A plugin detector that answers ``answer`` (a function of the fields)."""

    def __init__(self, name: str, answer: Callable[[Mapping[str, str]], Any]) -> None:
        self.name = name
        self.answer = answer

    def scan(self, fields: Mapping[str, str]) -> Any:
        return self.answer(fields)


MALFORMED: dict[str, Callable[[Mapping[str, str]], Any]] = {
    "none": lambda f: None,
    "dict": lambda f: {"content": "ok"},
    "tuple": lambda f: (),
    "generator": lambda f: (x for x in ()),
    "a_dict_finding": lambda f: [{"detector": "x", "kind": "k", "severity": "High",
                                  "field": "content"}],
    "a_string_finding": lambda f: ["nothing"],
    "int_severity": lambda f: [Finding("m", "k", 4, "content")],  # type: ignore[arg-type]
    "no_kind": lambda f: [Finding("m", "", Severity.LOW, "content")],
    "unknown_field": lambda f: [Finding("m", "k", Severity.LOW, "elsewhere")],
    "negative_start": lambda f: [Finding("m", "k", Severity.LOW, "content", -1, 2)],
    "end_past_text": lambda f: [Finding("m", "k", Severity.LOW, "content", 0,
                                        len(f["content"]) + 1)],
    "start_after_end": lambda f: [Finding("m", "k", Severity.LOW, "content", 3, 2)],
    "one_offset": lambda f: [Finding("m", "k", Severity.LOW, "content", 0, None)],
    "str_offsets": lambda f: [Finding("m", "k", Severity.LOW, "content",
                                      "0", "2")],  # type: ignore[arg-type]
    "bool_offsets": lambda f: [Finding("m", "k", Severity.LOW, "content", False, True)],
}


@pytest.mark.parametrize("how", sorted(MALFORMED))
def test_a_malformed_answer_fails_closed(how: str, vault: MemoryVault, tenant: str,
                                         plugged: Callable[..., Any],
                                         events: list[capture.GuardEvent]) -> None:
    plugged(Answers(f"odd_{how}", MALFORMED[how]))
    with pytest.raises(Unavailable) as info:
        vault.remember("A harmless memory.", scope="s", principal=vault.principal(tenant))
    assert info.value.status == 503
    assert info.value.details == {"detector": f"odd_{how}", "reason": "malformed"}
    assert f"odd_{how}" in info.value.message and "harmless" not in info.value.message
    assert counts(vault, tenant) == {"memories": 0, "pii_values": 0, "audit_log": 0}
    assert [(e.outcome, e.detector) for e in events] == [("malformed", f"odd_{how}")]


def test_well_formed_plugin_findings_with_offsets_pass_and_map_back(
        vault: MemoryVault, plugged: Callable[..., Any], configure: Callable[..., None]) -> None:
    def codename(fields: Mapping[str, str]) -> list[Finding]:
        return [Finding("codenames", "codename", Severity.HIGH, k, t.index("BLUEBIRD"),
                        t.index("BLUEBIRD") + 8) for k, t in fields.items() if "BLUEBIRD" in t]

    plugged(Answers("codenames", codename))
    text = "Project ＢＬＵＥ\u200bＢＩＲＤ ships"  # the plugin reads the normalised view too
    with pytest.raises(Refused) as info:
        capture.check_capture(vault.rt, path="remember", fields={"content": text})
    f = info.value.details["findings"][0]
    assert (f["kind"], f["start"], f["end"]) == ("codename", 8, 17)


# -- paths that skipped the guard (issue 20, item 4) --------------------------------------
def test_a_key_name_with_a_secret_is_refused(vault: MemoryVault, tenant: str) -> None:
    with vault.db.transaction(tenant) as conn:
        before = conn.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"]
    for kwargs in ({"name": f"deploy {AWS}"}, {"name": "ci", "scope": f"pw={JWT}"}):
        with pytest.raises(Refused) as info:
            vault.create_key(tenant, "member", **kwargs)  # type: ignore[arg-type]
        no_secret_in(info.value.message)
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"] == before
    vault.create_key(tenant, "member", name="deploy bot")


class Recording:
    """A chat provider that records every prompt it is sent."""

    name = "recording"

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def stream(self, prompt: Any) -> Iterator[str]:
        self.prompts.append(prompt)
        yield "noted"


@pytest.fixture
def model(vault: MemoryVault) -> Iterator[Recording]:
    original = vault.rt.llm
    vault.rt.llm = rec = Recording()
    yield rec
    vault.rt.llm = original


def test_chat_history_passes_the_guard_before_the_model(vault: MemoryVault, tenant: str,
                                                        client: TestClient,
                                                        model: Recording) -> None:
    who = vault.principal(tenant)
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": f"your key is {AWS}"}]
    for store in (True, False):  # nothing would be stored: the secret would still leave
        with pytest.raises(Refused) as info:
            vault.chat("thanks", scope="s", history=history, store=store, principal=who)
        assert info.value.field == "history.1.content"
    auth = {"Authorization": f"Bearer {_token(vault, tenant)}"}
    r = client.post("/v1/chat/completions", headers=auth, json={
        "model": "mnemovault:s", "store": False,
        "messages": [{"role": "user", "content": f"my SSN is {SSN}"},
                     {"role": "assistant", "content": "ok"},
                     {"role": "user", "content": "what did I say?"}]})
    assert r.status_code == 409 and r.json()["error"]["field"] == "history.0.content", r.text
    no_secret_in(r.text)
    assert model.prompts == []  # the model never saw any of it
    assert counts(vault, tenant)["memories"] == 0
    vault.chat("thanks", scope="s", history=[{"role": "user", "content": "hi"}],
               principal=who)
    assert len(model.prompts) == 1


def test_ids_with_dots_for_their_separators() -> None:
    for text, kind in (("NIE X.1234567.L", "es_nie"), ("DNI 12345678.Z", "es_dni"),
                       ("Aadhaar 2345.6789.0124", "in_aadhaar"), ("my SIN is 123.456.782",
                                                                  "ca_sin"),
                       ("RRN 971013.9019902", "kr_rrn"), ("SSN 536.90.4399", "us_ssn")):
        assert [f.kind for f in GovernmentIdDetector().scan({"c": text})] == [kind], text
    for text in ("ref 536.90-4399", "NIE X.1234567-L", "Aadhaar 2345.6789 0124",
                 "version 536.90.4399.1"):  # mixed separators, or part of a longer number
        assert GovernmentIdDetector().scan({"c": text}) == [], text


# -- look-alike digits and space-split keys (issue 20) -------------------------------------
def _digits(text: str, zero: int) -> str:
    """``text`` with its ASCII digits written in the script whose zero is ``zero``."""
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


@pytest.mark.parametrize("zero", [0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0xFF10, 0x1D7CE])
def test_digits_of_other_scripts_are_read_as_digits(zero: int, vault: MemoryVault,
                                                    tenant: str) -> None:
    """Arabic-Indic, Extended Arabic-Indic, Devanagari, Bengali, Thai, fullwidth and
    mathematical digits in a national id are the same number."""
    who = vault.principal(tenant)
    for text in (f"my SSN is {_digits(SSN, zero)}", f"CPF {_digits('390.533.447-05', zero)}"):
        with pytest.raises(Refused) as info:
            vault.remember(text, scope="s", principal=who)
        assert info.value.details["detector"] == "government_ids"
        found = info.value.details["findings"][0]
        assert text[found["start"]:found["end"]].replace(".", "").replace("-", "")
    assert counts(vault, tenant)["memories"] == 0


@pytest.mark.parametrize("split", [
    "AKIA QX7Z R2LK VE3M B5TW", "AKIA\tQX7Z\tR2LK\tVE3M\tB5TW", "AKIAQX7Z R2LKVE3M B5TW",
    "AKIAQX7ZR2LK VE3M B5TW",
])
def test_a_key_split_by_spaces_is_refused(split: str, vault: MemoryVault,
                                          tenant: str) -> None:
    who = vault.principal(tenant)
    text = f"the deploy key is {split} - keep it safe"
    with pytest.raises(Refused) as info:
        vault.remember(text, scope="s", principal=who)
    found = info.value.details["findings"][0]
    assert found["kind"] == "aws_access_key"
    assert text[found["start"]:found["end"]] == split  # offsets of the original text
    no_secret_in(info.value.message)
    assert counts(vault, tenant)["memories"] == 0


@pytest.mark.parametrize("text", [
    "I LOVE NEW YORK and THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG every day",
    "Meet at 10 AM on 2024 05 06 in room B12 C14 with the Q3 OKR doc",
    "Order IDs A1 B2 C3 D4 E5 F6 G7 H8 shipped; card ending 4242 4242",
])
def test_spaced_capitals_and_numbers_are_not_a_key(text: str, vault: MemoryVault,
                                                   configure: Callable[..., None]) -> None:
    configure(block_at_severity="Low")
    capture.check_capture(vault.rt, path="remember", fields={"content": text})
