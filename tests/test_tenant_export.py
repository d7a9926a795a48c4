"""Tenant export (SPEC section 10, issue 10 item 6): the typed confirmation, the job and
its outbox event, the worker writing the archive under the tenant's row-level security,
manifest hashes that verify, and S3 (moto's server on 127.0.0.1) with every object
uploaded with server-side encryption AES256."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from mnemovault.api import create_app
from mnemovault.audit.verify import verify_file
from mnemovault.auth import Principal
from mnemovault.errors import Forbidden, NotFound, Refused, ValidationError
from mnemovault.vault import MemoryVault

FILES = {"memories.jsonl", "vault.jsonl", "vault_keys.jsonl", "audit.jsonl",
         "checkpoints.jsonl", "manifest.json"}


def _fill(vault: MemoryVault, tenant: str) -> list[str]:
    who = Principal.local(tenant)
    emails = [f"lee{i}.{tenant}@example.org" for i in range(3)]
    for i, e in enumerate(emails):
        vault.remember(f"Mail {e} about order {i}.", scope="orders", subject="lee",
                       principal=who)
    vault.audit.checkpoint(who, sign_now=True)
    return emails


def _events(vault: MemoryVault, tenant: str) -> list[dict[str, Any]]:
    with psycopg.connect(vault.db.url) as conn:
        return [dict(zip(("kind", "payload", "processed_at"), r, strict=True))
                for r in conn.execute("SELECT kind, payload, processed_at FROM outbox "
                                      "WHERE tenant_id = %s ORDER BY id", (tenant,))]


def _check_manifest(files: dict[str, bytes], tenant: str, job_id: str,
                    manifest_sha256: str) -> dict[str, Any]:
    raw = files["manifest.json"]
    assert hashlib.sha256(raw).hexdigest() == manifest_sha256
    manifest = json.loads(raw)
    assert manifest["tenant"] == tenant and manifest["job_id"] == job_id
    listed = {f["name"] for f in manifest["files"]}
    assert listed | {"manifest.json"} == set(files)
    for f in manifest["files"]:
        data = files[f["name"]]
        assert hashlib.sha256(data).hexdigest() == f["sha256"], f["name"]
        assert len(data) == f["bytes"], f["name"]
    return dict(manifest)


def test_wrong_confirmation_is_refused(vault: MemoryVault, tenant: str) -> None:
    for wrong in (None, "", "DELETE", f"DELETE-{tenant}x", tenant):
        with pytest.raises(Refused) as exc:
            vault.tenants.export(tenant, confirm=wrong)
        assert f"type exactly DELETE-{tenant} to confirm" in exc.value.message
    assert _events(vault, tenant) == []
    client = TestClient(create_app(vault))
    token, _ = vault.create_key(tenant, "admin")
    r = client.post(f"/v1/admin/tenants/{tenant}/export", json={"confirm": "please"},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "refused" and f"DELETE-{tenant}" in err["message"]
    assert _events(vault, tenant) == []


def test_permissions_and_tenant(vault: MemoryVault, tenant: str) -> None:
    with pytest.raises(Forbidden) as exc:
        vault.tenants.export(tenant, confirm=f"DELETE-{tenant}",
                             principal=Principal.local(tenant, "member"))
    assert exc.value.details["permission"] == "admin:export"
    other = f"{tenant}-o"
    vault.ensure_tenant(other)
    with pytest.raises(NotFound):
        vault.tenants.export(other, confirm=f"DELETE-{other}",
                             principal=Principal.local(tenant))
    with pytest.raises(ValidationError):
        vault.tenants.export_status(tenant, "not-a-uuid")
    with pytest.raises(NotFound):
        vault.tenants.export_status(tenant, "00000000-0000-4000-8000-000000000000")


def test_local_export_over_http_writes_an_archive_whose_hashes_verify(
        vault: MemoryVault, tenant: str) -> None:
    emails = _fill(vault, tenant)
    other = f"{tenant}-other"
    vault.ensure_tenant(other)
    vault.remember("The other tenant's note.", scope="orders", principal=Principal.local(other))
    token, _ = vault.create_key(tenant, "admin")
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    r = client.post(f"/v1/admin/tenants/{tenant}/export", json={"confirm": f"DELETE-{tenant}"},
                    headers=h)
    assert r.status_code == 202, r.text
    job = r.json()["job_id"]
    (event,) = _events(vault, tenant)
    assert event["kind"] == "TENANT_EXPORT" and event["payload"] == {"job_id": job}
    assert event["processed_at"] is None
    queued = client.get(f"/v1/admin/tenants/{tenant}/export/{job}", headers=h).json()
    assert queued["state"] == "queued" and queued["progress"]["rows_done"] == 0
    # another tenant's worker pass does not touch it; this tenant's does
    assert vault.tenants.process_outbox(tenant=other) == []
    seen: list[tuple[int, int]] = []
    (res,) = vault.tenants.process_outbox(tenant=tenant,
                                          progress=lambda d, t: seen.append((d, t)))
    assert res["state"] == "done", res
    assert seen and seen[-1][0] == seen[-1][1] > 0
    st = client.get(f"/v1/admin/tenants/{tenant}/export/{job}", headers=h).json()
    assert st["state"] == "done" and st["progress"]["percent"] == 100.0
    assert st["progress"]["files_done"] == st["progress"]["files_total"]
    assert _events(vault, tenant)[0]["processed_at"] is not None
    assert vault.tenants.process_outbox(tenant=tenant) == []  # processed once

    root = Path(st["destination"])
    assert root.is_dir() and root.name == job
    files = {p.name: p.read_bytes() for p in root.iterdir()}
    assert set(files) >= FILES
    manifest = _check_manifest(files, tenant, job, st["manifest_sha256"])
    rows = {f["name"]: f["rows"] for f in manifest["files"]}
    mems = [json.loads(line) for line in files["memories.jsonl"].splitlines()]
    assert len(mems) == rows["memories.jsonl"] == 3
    assert all("embedding" not in m and "tenant_id" not in m for m in mems)
    blob = b"".join(files.values())
    for e in emails:  # personal values only as ciphertext
        assert e.encode() not in blob
    assert b"other tenant" not in blob
    vault_rows = [json.loads(line) for line in files["vault.jsonl"].splitlines()]
    assert {v["kind"] for v in vault_rows} >= {"email"}
    assert all(v["ciphertext"] and v["wrapped_dek"] for v in vault_rows)
    # the audit chain verifies against its last checkpoint, with the deployment's key
    audit_path = root / "audit.jsonl"
    cps = [json.loads(line) for line in files["checkpoints.jsonl"].splitlines()]
    assert cps
    result = verify_file(audit_path, cps[-1]["note"],
                         public_key=root / "audit_public_key.txt")
    assert result.ok, result.error
    assert result.rows == rows["audit.jsonl"] and result.checkpoint_signature_verified
    # the request and the completion are audited in the tenant's chain
    import orjson

    ops = [orjson.loads(x)["operation"]
           for x in b"".join(vault.audit.export(Principal.local(tenant))).splitlines()]
    assert "TENANT_EXPORT" in ops and "TENANT_EXPORT_DONE" in ops
    # a tampered file no longer matches the manifest
    files["memories.jsonl"] = files["memories.jsonl"].replace(b"orders", b"Orders", 1)
    with pytest.raises(AssertionError):
        _check_manifest(files, tenant, job, st["manifest_sha256"])


def test_export_jobs_are_under_row_level_security(vault: MemoryVault, tenant: str) -> None:
    vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    with psycopg.connect(vault.db.url) as conn:
        (rls,) = conn.execute("SELECT relrowsecurity FROM pg_class "
                              "WHERE relname = 'tenant_exports'").fetchone()
    assert rls
    other = f"{tenant}-rls"
    vault.ensure_tenant(other)
    with vault.db.transaction(other) as conn:
        assert conn.execute("SELECT count(*) AS n FROM tenant_exports").fetchone()["n"] == 0
    with vault.db.transaction(tenant) as conn:
        assert conn.execute("SELECT count(*) AS n FROM tenant_exports").fetchone()["n"] == 1


# -- S3 (moto's server, on loopback) ---------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, vault: MemoryVault) -> Iterator[Any]:
    pytest.importorskip("moto")
    import boto3
    from moto.server import ThreadedMotoServer

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_SESSION_TOKEN": "testing"}.items():
        monkeypatch.setenv(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    client.create_bucket(Bucket="mv-exports")
    saved = vault.settings
    vault.settings = saved.model_copy(update={"export_bucket": "mv-exports",
                                              "export_endpoint_url": url,
                                              "export_region": "us-east-1"})
    try:
        yield client
    finally:
        vault.settings = saved
        server.stop()


def test_s3_export_every_object_encrypted_and_hashes_verify(
        vault: MemoryVault, tenant: str, s3: Any) -> None:
    _fill(vault, tenant)
    job = vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    assert job["destination"] == f"s3://mv-exports/mnemovault-exports/{tenant}/{job['job_id']}/"
    (res,) = vault.tenants.process_outbox(tenant=tenant)
    assert res["state"] == "done", res
    st = vault.tenants.export_status(tenant, job["job_id"])
    prefix = f"mnemovault-exports/{tenant}/{job['job_id']}/"
    listed = s3.list_objects_v2(Bucket="mv-exports", Prefix=prefix)["Contents"]
    names = {o["Key"].removeprefix(prefix) for o in listed}
    assert names >= FILES
    files = {}
    for o in listed:
        head = s3.head_object(Bucket="mv-exports", Key=o["Key"])
        assert head.get("ServerSideEncryption") == "AES256", o["Key"]
        files[o["Key"].removeprefix(prefix)] = s3.get_object(
            Bucket="mv-exports", Key=o["Key"])["Body"].read()
    _check_manifest(files, tenant, job["job_id"], st["manifest_sha256"])


def test_s3_failure_is_recorded_and_retried_later(vault: MemoryVault, tenant: str,
                                                  s3: Any) -> None:
    vault.settings = vault.settings.model_copy(update={"export_bucket": "no-such-bucket"})
    job = vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    (res,) = vault.tenants.process_outbox(tenant=tenant)
    assert res["state"] == "queued" and res["error"]["code"] == "unavailable"
    st = vault.tenants.export_status(tenant, job["job_id"])
    assert st["state"] == "queued" and st["attempts"] == 1 and "unavailable" in st["error"]
    assert vault.tenants.process_outbox(tenant=tenant) == []  # backing off, not spinning
    (event,) = _events(vault, tenant)
    assert event["processed_at"] is None


def test_cli_export_and_worker(vault: MemoryVault, tenant: str, settings: Any) -> None:
    from typer.testing import CliRunner

    from mnemovault.cli import app

    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, ["--data-dir", str(settings.data_dir), *args])

    _fill(vault, tenant)
    refused = cli("tenant", "export", tenant, "--confirm", "no")
    assert refused.exit_code == 5 and f"DELETE-{tenant}" in refused.output
    done = cli("tenant", "export", tenant, "--confirm", f"DELETE-{tenant}", "--json")
    assert done.exit_code == 0, done.output
    st = json.loads(done.stdout)
    assert st["state"] == "done" and Path(st["destination"], "manifest.json").is_file()
    queued = cli("tenant", "export", tenant, "--confirm", f"DELETE-{tenant}", "--no-wait",
                 "--json")
    assert queued.exit_code == 0 and json.loads(queued.stdout)["state"] == "queued"
    job = json.loads(queued.stdout)["job_id"]
    once = cli("worker", "--once", "--json")
    assert once.exit_code == 0, once.output
    handled = [e for e in json.loads(once.stdout)["events"] if e["job_id"] == job]
    assert [e["state"] for e in handled] == ["done"]
    status = cli("tenant", "export-status", tenant, job, "--json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "done"


def test_two_workers_never_take_the_same_event(vault: MemoryVault, tenant: str) -> None:
    import threading

    _fill(vault, tenant)
    job = vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    barrier = threading.Barrier(2)
    results: list[list[dict[str, Any]]] = []

    def run() -> None:
        barrier.wait()
        results.append(vault.tenants.process_outbox(tenant=tenant))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    handled = [r for rs in results for r in rs if r["job_id"] == job["job_id"]]
    assert [r["state"] for r in handled] == ["done"]
    assert vault.tenants.export_status(tenant, job["job_id"])["attempts"] == 1


def test_an_event_whose_worker_died_is_taken_up_after_its_lease(vault: MemoryVault,
                                                                 tenant: str) -> None:
    from mnemovault.store import outbox

    job = vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    with vault.db.transaction(tenant) as conn:  # a worker claims it, then dies
        assert outbox.claim(conn, tenant, ["TENANT_EXPORT"], 600) is not None
    assert vault.tenants.process_outbox(tenant=tenant) == []  # leased: left alone
    with psycopg.connect(vault.db.url) as conn:  # ... until the lease has run out
        conn.execute("UPDATE outbox SET claimed_until = now() - interval '1 second' "
                     "WHERE tenant_id = %s", (tenant,))
    (res,) = vault.tenants.process_outbox(tenant=tenant)
    assert res["state"] == "done" and res["job_id"] == job["job_id"]


def test_the_background_worker_writes_a_queued_export(vault: MemoryVault, tenant: str) -> None:
    import time

    from mnemovault.tenants.schedule import Background

    job = vault.tenants.export(tenant, confirm=f"DELETE-{tenant}")
    with Background(vault.rt, poll_seconds=0.05, purge_interval_hours=0):
        deadline = time.monotonic() + 60
        while vault.tenants.export_status(tenant, job["job_id"])["state"] != "done":
            assert time.monotonic() < deadline, "the background worker did not finish"
            time.sleep(0.1)


def test_a_missing_confirmation_is_refused_too(vault: MemoryVault, tenant: str) -> None:
    token, _ = vault.create_key(tenant, "owner")
    client = TestClient(create_app(vault))
    h = {"Authorization": f"Bearer {token}"}
    for path in ("export", "delete"):
        for kwargs in ({}, {"json": {}}, {"json": {"confirm": None}}):
            r = client.post(f"/v1/admin/tenants/{tenant}/{path}", headers=h, **kwargs)
            assert r.status_code == 409, (path, kwargs, r.text)
            assert f"type exactly DELETE-{tenant}" in r.json()["error"]["message"]
        bad = client.post(f"/v1/admin/tenants/{tenant}/{path}", headers=h,
                          json={"confirm": 1})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "confirm"
    assert _events(vault, tenant) == []
    assert vault.tenants.status(tenant)["deleted"] is False
