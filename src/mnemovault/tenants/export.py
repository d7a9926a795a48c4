"""Tenant export (SPEC section 10): request a job, follow it, and the archive writer the
outbox worker runs.

:func:`request` (``admin:export``, typed confirmation ``DELETE-<tenant>``) writes, in one
transaction, a ``tenant_exports`` row (``queued``), a ``TENANT_EXPORT`` outbox event naming
the job and a ``TENANT_EXPORT`` audit row; it returns the job id. The worker
(:mod:`mnemovault.tenants.worker`) later calls :func:`run` under the tenant's row-level
security, and the job goes ``running`` then ``done`` (or back to ``queued`` after a failed
attempt, ``failed`` after the last one); :func:`status` reports the state and progress.

The archive (format ``mnemovault-tenant-export/1``), one directory or S3 prefix per job,
``<tenant>/<job id>/``:

==========================  ===========================================================
``memories.jsonl``          every memory, one JSON object a line, by id: every column
                            (content and side fields pseudonymised, as stored) except
                            the embedding and the derived full-text columns. Embeddings
                            are left out: they are a function of the stored text and
                            the embedder, several times the size of the rest, and
                            re-made on import by whatever model the importer runs.
``vault.jsonl``             every vault entry as stored, still encrypted: placeholder,
                            kind, times, AES-256-GCM nonce and ciphertext, keyed
                            fingerprint, and its wrapped data key (KEK version, nonce,
                            wrapped DEK); shredded entries as tombstones. Bytes in base64.
``vault_keys.jsonl``        the tenant's secret, wrapped under the KEK. Decrypting any
                            of it needs the deployment's KEK, which is never exported.
``audit.jsonl``             the tenant's audit chain up to the job's start, in the JSON
                            Lines form ``python -m mnemovault.audit.verify`` checks.
``checkpoints.jsonl``       every signed checkpoint of that chain (size, root, C2SP note).
``audit_public_key.txt``    the deployment's checkpoint verifier key, when it has one.
``manifest.json``           format, tenant, job, time, and for each file its name, size,
                            rows and SHA-256 (hex); written last. Its own SHA-256 is in
                            the job's status (``manifest_sha256``).
==========================  ===========================================================

Destination: with ``EXPORT_BUCKET`` set, S3 (boto3; ``MNEMOVAULT_EXPORT_ENDPOINT_URL`` for an
S3-compatible server, credentials from boto3's usual chain), keys
``<MNEMOVAULT_EXPORT_PREFIX><tenant>/<job>/<file>``, every object uploaded with
``ServerSideEncryption=AES256``; otherwise the local directory ``MNEMOVAULT_EXPORT_DIR``
(default ``<data dir>/exports``), written under a ``.partial`` name and renamed when whole.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from mnemovault import validation as checked
from mnemovault.audit import log as audit
from mnemovault.audit.chain import export_line
from mnemovault.audit.service import signing_key_path
from mnemovault.auth import Principal
from mnemovault.config import Settings
from mnemovault.errors import NotFound, Unavailable
from mnemovault.runtime import Runtime
from mnemovault.store import audit as audit_store
from mnemovault.store import outbox
from mnemovault.store import tenants as store
from mnemovault.tenants.common import check_confirmation, local_root, own_tenant

KIND = "TENANT_EXPORT"
FORMAT = "mnemovault-tenant-export/1"
BATCH = 1000
DATA_FILES = ("memories.jsonl", "vault.jsonl", "vault_keys.jsonl", "audit.jsonl",
              "checkpoints.jsonl")
SSE = "AES256"

Progress = Callable[[int, int], None]
"""``progress(rows_done, rows_total)``, called after each batch a job writes."""

Heartbeat = Callable[[Any], None]
"""``heartbeat(conn)``, called in the transaction that records each batch's progress (the
worker renews its lease on the event there)."""


def destination(settings: Settings, tenant: str, job_id: uuid.UUID) -> str:
    """Where a job's archive goes: ``s3://<bucket>/<prefix><tenant>/<job>/`` with
    ``EXPORT_BUCKET`` set, else the local directory's path."""
    if settings.export_bucket:
        return f"s3://{settings.export_bucket}/{_s3_prefix(settings, tenant, job_id)}"
    return str(local_root(settings) / tenant / str(job_id))


def _s3_prefix(settings: Settings, tenant: str, job_id: uuid.UUID) -> str:
    base = settings.export_prefix.strip("/")
    return f"{base}/{tenant}/{job_id}/" if base else f"{tenant}/{job_id}/"


def request(rt: Runtime, who: Principal, tenant: str, *, confirm: str | None,
            request_id: str | None = None) -> dict[str, Any]:
    """Queue an export of the caller's tenant (``admin:export``; typed confirmation).
    Returns ``{"job_id", "state": "queued", "destination", "audit_seq"}``.

    Raises:
        Forbidden: the caller lacks ``admin:export`` or its key is limited.
        ValidationError: ``tenant`` is not a tenant id.
        NotFound: another tenant than the caller's.
        Refused: a wrong confirmation (the message says what to type).
    """
    own_tenant(who, tenant, "admin:export", "tenant export")
    check_confirmation(tenant, confirm)
    job_id = uuid.uuid4()
    where = destination(rt.settings, tenant, job_id)
    with rt.db.transaction(tenant) as conn:
        store.insert_export(conn, tenant, job_id, destination=where, requested_by=who.actor)
        event = outbox.insert(conn, tenant, KIND, {"job_id": str(job_id)})
        seq = audit.append(conn, tenant=tenant, operation=KIND, actor=who.actor,
                           agent=who.agent, request_id=request_id,
                           details={"job_id": str(job_id), "outbox_id": event,
                                    "destination": "s3" if rt.settings.export_bucket
                                    else "local"})
    return {"job_id": str(job_id), "state": "queued", "destination": where, "audit_seq": seq}


def status(rt: Runtime, who: Principal, tenant: str, job_id: uuid.UUID | str) -> dict[str, Any]:
    """An export job of the caller's tenant (``admin:export``): ``job_id``, ``state``
    (``queued``, ``running``, ``done``, ``failed``), ``progress`` (``rows_done``,
    ``rows_total``, ``files_done``, ``files_total``, ``percent``), ``destination``,
    ``manifest_sha256`` (when done), ``error`` (the last failed attempt's kind and message),
    ``attempts`` and times.

    Raises:
        Forbidden, ValidationError (also a ``job_id`` that is not a UUID), NotFound (no
            such job for this tenant).
    """
    own_tenant(who, tenant, "admin:export", "tenant export")
    jid = checked.parse_id(job_id, "job_id")
    with rt.db.transaction(tenant) as conn:
        job = store.export_job(conn, tenant, jid)
    if job is None:
        raise NotFound("job_id: no export job with this id", field="job_id")
    total, done = int(job["rows_total"]), int(job["rows_done"])
    percent = 100.0 if job["state"] == "done" else (
        round(100.0 * done / total, 1) if total else 0.0)
    return {"job_id": str(job["job_id"]), "tenant": tenant, "state": job["state"],
            "progress": {"rows_done": done, "rows_total": total,
                         "files_done": job["files_done"], "files_total": job["files_total"],
                         "percent": percent},
            "destination": job["destination"], "manifest_sha256": job["manifest_sha256"],
            "error": job["error"], "attempts": job["attempts"],
            "created_at": job["created_at"], "started_at": job["started_at"],
            "finished_at": job["finished_at"]}


# -- the archive writer ----------------------------------------------------------------------
@dataclass
class _File:
    """One archive file being written, hashed as it goes."""

    path: Path
    rows: int = 0
    size: int = 0
    _h: Any = field(default_factory=hashlib.sha256)
    _f: IO[bytes] | None = None

    def __enter__(self) -> _File:
        self._f = open(self.path, "wb")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._f is not None
        self._f.close()

    def line(self, data: bytes, rows: int = 1) -> None:
        assert self._f is not None
        self._f.write(data)
        self._h.update(data)
        self.size += len(data)
        self.rows += rows

    def obj(self, value: Any) -> None:
        self.line(orjson.dumps(value, default=_b64) + b"\n")

    def entry(self) -> dict[str, Any]:
        return {"name": self.path.name, "bytes": self.size, "rows": self.rows,
                "sha256": self._h.hexdigest()}


def _b64(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(type(value).__name__)


@dataclass
class Outcome:
    """A finished archive: where it is, its manifest and the manifest's SHA-256."""

    destination: str
    manifest: dict[str, Any]
    manifest_sha256: str
    rows: int
    files: int


class _Tracker:
    """Counts rows written and records progress (a short transaction per batch)."""

    def __init__(self, rt: Runtime, tenant: str, job_id: uuid.UUID, total: int,
                 progress: Progress | None, heartbeat: Heartbeat | None) -> None:
        self.rt, self.tenant, self.job_id, self.total = rt, tenant, job_id, total
        self.progress, self.heartbeat = progress, heartbeat
        self.rows = 0
        self.files = 0

    def advance(self, rows: int = 0, files: int = 0) -> None:
        self.rows += rows
        self.files += files
        with self.rt.db.transaction(self.tenant) as conn:
            store.export_progress(conn, self.tenant, self.job_id, rows_done=self.rows,
                                  files_done=self.files)
            if self.heartbeat is not None:
                self.heartbeat(conn)
        if self.progress is not None:
            self.progress(self.rows, max(self.total, self.rows))


def start(rt: Runtime, tenant: str, job_id: uuid.UUID) -> dict[str, int] | None:
    """Mark the job ``running`` with its totals: the row counts per kind, or None when the
    job is missing or already finished (nothing to do)."""
    with rt.db.transaction(tenant) as conn:
        job = store.export_job(conn, tenant, job_id)
        if job is None or job["state"] in ("done", "failed"):
            return None
        counts = store.export_counts(conn, tenant)
        store.start_export(conn, tenant, job_id, rows_total=sum(counts.values()),
                           files_total=len(DATA_FILES) + 1)
    return counts


def run(rt: Runtime, tenant: str, job_id: uuid.UUID, counts: dict[str, int], *,
        progress: Progress | None = None, heartbeat: Heartbeat | None = None) -> Outcome:
    """Write the job's archive (under the tenant's row-level security) to its destination;
    ``progress`` and ``heartbeat`` are called after each batch.

    Raises:
        Unavailable: the destination refused a write (S3 error, disk full), naming the
            cause's kind; the staging copy is removed.
    """
    s = rt.settings
    track = _Tracker(rt, tenant, job_id, sum(counts.values()), progress, heartbeat)
    sink: _Sink = (_S3(s, tenant, job_id) if s.export_bucket
                   else _Local(local_root(s), tenant, job_id))
    try:
        entries = _write_files(rt, tenant, sink.staging, track)
        pub = Path(str(signing_key_path(s)) + ".pub")
        if pub.is_file():
            target = sink.staging / "audit_public_key.txt"
            shutil.copyfile(pub, target)
            entries.append({"name": target.name, "bytes": target.stat().st_size, "rows": 1,
                            "sha256": hashlib.sha256(target.read_bytes()).hexdigest()})
        manifest = {"format": FORMAT, "tenant": tenant, "job_id": str(job_id),
                    "created_at": datetime.now(UTC).isoformat(), "files": entries,
                    "embeddings": "excluded",
                    "encryption": "vault values and keys as stored: AES-256-GCM under "
                                  "per-value data keys wrapped by the deployment's KEK, "
                                  "which is not in this archive"}
        body = orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        (sink.staging / "manifest.json").write_bytes(body)
        where = sink.commit([e["name"] for e in entries] + ["manifest.json"])
    except OSError as exc:
        sink.abort()
        raise Unavailable(f"export: could not write the archive ({type(exc).__name__}: "
                          f"{exc.strerror or exc})") from exc
    except BaseException:
        sink.abort()
        raise
    track.advance(files=1)
    return Outcome(destination=where, manifest=manifest,
                   manifest_sha256=hashlib.sha256(body).hexdigest(), rows=track.rows,
                   files=len(entries) + 1)


def finish(conn: Any, tenant: str, job_id: uuid.UUID, outcome: Outcome) -> None:
    """In the worker's closing transaction: the job ``done`` and a ``TENANT_EXPORT_DONE``
    audit row (job, manifest hash, counts)."""
    store.finish_export(conn, tenant, job_id, manifest_sha256=outcome.manifest_sha256,
                        destination=outcome.destination, rows_done=outcome.rows,
                        files_done=outcome.files)
    audit.append(conn, tenant=tenant, operation="TENANT_EXPORT_DONE", actor="system:worker",
                 trigger="outbox",
                 details={"job_id": str(job_id), "manifest_sha256": outcome.manifest_sha256,
                          "rows": outcome.rows, "files": outcome.files})


def fail(conn: Any, tenant: str, job_id: uuid.UUID, error: str, *, final: bool) -> None:
    """Record a failed attempt on the job (``failed`` when ``final``, else ``queued``)."""
    store.fail_export(conn, tenant, job_id, error=error, final=final)


def _write_files(rt: Runtime, tenant: str, staging: Path,
                 track: _Tracker) -> list[dict[str, Any]]:
    db = rt.db
    entries = []
    with _File(staging / "memories.jsonl") as f:
        after: uuid.UUID | None = None
        while True:
            with db.transaction(tenant) as conn:
                batch = store.memories_after(conn, tenant, after, BATCH)
            for r in batch:
                f.obj(r["row"])
            if not batch:
                break
            after = batch[-1]["id"]
            track.advance(rows=len(batch))
        entries.append(f.entry())
    track.advance(files=1)
    with _File(staging / "vault.jsonl") as f:
        last = ""
        while True:
            with db.transaction(tenant) as conn:
                vbatch = store.vault_after(conn, tenant, last, BATCH)
            for r in vbatch:
                f.obj(dict(r))
            if not vbatch:
                break
            last = vbatch[-1]["placeholder"]
            track.advance(rows=len(vbatch))
        entries.append(f.entry())
    track.advance(files=1)
    with _File(staging / "vault_keys.jsonl") as f:
        with db.transaction(tenant) as conn:
            for r in store.wrapped_secrets(conn, tenant):
                f.obj(dict(r))
        entries.append(f.entry())
    track.advance(files=1)
    with _File(staging / "audit.jsonl") as f:
        with db.transaction(tenant) as conn:
            head = audit_store.head_seq(conn, tenant)
        seq = 0
        while seq < head:
            with db.transaction(tenant) as conn:
                rows = audit_store.rows_between(conn, tenant, seq, head, BATCH)
            if not rows:
                break
            f.line(b"".join(export_line(bytes(r["row_bytes"]), bytes(r["prev_hash"]),
                                        bytes(r["row_hash"])) for r in rows), len(rows))
            seq = rows[-1]["seq"]
            track.advance(rows=len(rows))
        entries.append(f.entry())
    track.advance(files=1)
    with _File(staging / "checkpoints.jsonl") as f:
        with db.transaction(tenant) as conn:
            cps = store.checkpoints(conn, tenant)
        for cp in cps:
            f.obj({"size": cp["size"], "root": bytes(cp["root"]).hex(), "note": cp["note"],
                   "created_at": cp["created_at"]})
        track.advance(rows=len(cps))
        entries.append(f.entry())
    track.advance(files=1)
    return entries


# -- destinations ------------------------------------------------------------------------------
class _Sink:
    staging: Path

    def commit(self, names: list[str]) -> str:
        raise NotImplementedError

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class _Local(_Sink):
    """A directory: written as ``.<job>.partial``, renamed to ``<job>`` when whole."""

    def __init__(self, root: Path, tenant: str, job_id: uuid.UUID) -> None:
        self.final = root / tenant / str(job_id)
        self.staging = root / tenant / f".{job_id}.partial"
        shutil.rmtree(self.staging, ignore_errors=True)  # a crashed attempt's leftovers
        self.staging.mkdir(parents=True, mode=0o700)

    def commit(self, names: list[str]) -> str:
        if self.final.exists():
            shutil.rmtree(self.final)
        self.staging.rename(self.final)
        return str(self.final)


class _S3(_Sink):
    """An S3 bucket: files staged in a temporary directory, then uploaded with server-side
    encryption (AES256), the manifest last."""

    def __init__(self, settings: Settings, tenant: str, job_id: uuid.UUID) -> None:
        self.settings = settings
        self.bucket = str(settings.export_bucket)
        self.prefix = _s3_prefix(settings, tenant, job_id)
        self.staging = Path(tempfile.mkdtemp(prefix="mnemovault-export-"))

    def commit(self, names: list[str]) -> str:
        import boto3
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto3.client("s3", endpoint_url=self.settings.export_endpoint_url,
                              region_name=self.settings.export_region)
        try:
            for name in names:
                ctype = "application/json" if name.endswith(".json") else (
                    "application/x-ndjson" if name.endswith(".jsonl") else "text/plain")
                client.upload_file(str(self.staging / name), self.bucket, self.prefix + name,
                                   ExtraArgs={"ServerSideEncryption": SSE,
                                              "ContentType": ctype})
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise Unavailable(f"export: S3 refused the upload ({code})") from exc
        except (BotoCoreError, Boto3Error) as exc:
            raise Unavailable(f"export: S3 upload failed ({type(exc).__name__})") from exc
        finally:
            self.abort()
        return f"s3://{self.bucket}/{self.prefix}"
