"""The erasure ledger outside the database, and re-erasing a database restored from a backup
(SPEC section 10's GOAL; issue 10, item 9; issue 21).

Design. Every erase, forget, shred, rectification and reapply writes one row to the
``erasure_ledger`` table in its own transaction (:mod:`mnemovault.store.ledger`), keyed by
the seq of its audit row: ids (memories; and, by kind, what erase contributors removed
that is not a memory: a subject's procedure runs on other owners' procedures, with their
feedback), placeholders and keyed fingerprints, never content. A restore of a backup rolls
that table back with everything else, so after each commit the new rows are also appended
to a JSON Lines file outside the database, one per tenant: ``<ledger dir>/<tenant>.jsonl``.

Where (:func:`ledger_dir`). ``MNEMOVAULT_LEDGER_DIR`` when set; else
``<user state dir>/ledger/<database id>`` (``~/.local/state/mnemovault/ledger/<uuid>`` on
Linux, ``XDG_STATE_HOME`` honoured): outside the data directory, so a copy of the data
directory (the obvious backup) does not hold it and restoring one does not roll it back.
The database id is stored in the database (``mv_meta`` key ``ledger``), so it travels with
every kind of backup (a copy of the data directory, ``pg_dump``, ``pg_basebackup``) and a
restore to another path or server finds the same ledger; a database without one (new, or
made before this) gets a UUID derived from where it lives (the data directory's path, or
the server's host, port and database name), so a backup taken before the id existed and
restored in the same place gets the same one. ``MNEMOVAULT_LEDGER_FILE=false`` turns the
file off. A ledger written by an earlier version in ``<data dir>/ledger`` is read at the
next start: its lines the new file lacks are appended (signed), and the old file is
renamed ``<tenant>.jsonl.migrated-<UTC time>``.

Lines (canonical JSON, :func:`mnemovault.audit.canonical.canonical_json`), append-only,
chained and signed::

    {"tenant": "acme", "audit_seq": 42, "id": "<uuid>", "kind": "erase", "at": "<UTC ts>",
     "request_id": "...", "subject_fp": "hmac-sha256:..." | null, "scope_fp": ... | null,
     "memory_ids": ["<uuid>", ...], "placeholders": ["{email:p_...}", ...],
     "rectified": ["<uuid>", ...], "contributed": {"procedure_runs": ["<uuid>", ...]},
     "prev": "<hex SHA-256 of the previous line, newline included>" | null (first line),
     "key_id": "<hex C2SP key id>", "sig": "<base64 Ed25519 signature>"}

``sig`` signs the canonical JSON of the line without ``sig`` with the audit log's Ed25519
key (the deployment's, ``<data dir>/audit_signing.key``: outside the database). What the
check (:func:`check`, ``mnemovault ledger verify``) guarantees: a line that was changed, or
added by anyone without that key, fails its signature; a line removed, inserted or moved
anywhere before the last one breaks the next line's ``prev``. A cut at the end of the file
is found only while the database still holds the rows cut (they are written back, with a
warning); a ledger cut or restored from an old copy *together with* the database cannot
be told from one that never had the lines: keep the ledger directory apart from the
backups of the database. (The signature key lives in the data directory: a copy of it
there is harmless, it never changes.)

Every start compares the ledger with the database (:func:`check_on_start`, called by
:meth:`mnemovault.MemoryVault.open`, which every interface opens through, before anything
is served). Per tenant file: its last line is the table's newest row (one indexed query) in
the usual case, and nothing else is read. Otherwise, when the file lists entries the table
lacks, the database is behind the ledger (a backup restore): every such entry that is
signed by this deployment's key is re-erased at once, through the forget path
(:func:`mnemovault.governance.forget.reapply`: memories, the contributors' ids by kind with
their counters, live placeholders shredded), audited as ``REAPPLY`` (trigger ``restore``)
with a ``reapply`` ledger row even when nothing was left to remove: the record that this
database was brought level, so the next start is the cheap one again. The log and
``mnemovault db info`` report it (tenants, ids and counts; no content). Entries that are
not signed are not acted on (reported; ``reapply-erasures`` applies what an operator
vouches for). ``mnemovault reapply-erasures`` remains: it reads the file(s), removes again
every listed memory, run and live placeholder that exists again (idempotent) and reports
what it removed, and which rectified memories exist (a restore may have brought their old
content back: check and correct them again).

Tenant purges (issue 10 item 7, and the restore case). The hard delete of a tenant
(:func:`mnemovault.tenants.lifecycle.purge_expired`) removes the tenant's ledger file with
the tenant (it lists every id, placeholder and subject fingerprint the tenant ever erased:
nothing of a purged tenant may stay), and records the purge itself in the system file
``<ledger_dir>/_purged.jsonl`` (:data:`PURGES_FILE`), one canonical JSON line per purge::

    {"kind": "purge", "tenant": "acme", "at": "<UTC ts>", "audit_seq": 12}

(``audit_seq``: the ``TENANT_PURGE`` row of the system chain). No tenant id can start with
``_``, so the name never collides with a tenant's file, and :func:`files` skips it. A
restore of a backup taken before the purge brings the whole tenant back, and with its
ledger file gone there is nothing per tenant to reapply; instead every purge run (the
scheduled job) first finds each recorded tenant that exists again and was created before
its purge (so a tenant id reused for a new customer later is left alone), marks it due
and purges it again in the same run (:func:`mnemovault.tenants.lifecycle.reapply_purges`;
:func:`mnemovault.tenants.lifecycle.restored_purges` lists them for a report).

Appending follows ``audit_seq`` (the file mechanics, lock, fsync and atomic rewrite, are
:mod:`mnemovault.audit.jsonl`'s): writers take an ``fcntl`` lock on ``<file>.lock``, compare
the file's last line with the table's row at its seq (same ``id``), and append the table's
rows after it, each chained to the line before. When the last line's row is not in the
table (the database was restored to an older state) every line stays, being the record of
erasures the restore undid, and every table row whose ``id`` the file lacks is appended, so
lines written after a restore are not lost behind older seqs
(:data:`mnemovault.audit.jsonl.KEEP`). ``ledger export`` refuses to write over the live
file of the tenant (it would drop those lines).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import time
import uuid
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import platformdirs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg.conninfo import conninfo_to_dict

from mnemovault.audit import jsonl
from mnemovault.audit import log as audit
from mnemovault.audit.canonical import canonical_json
from mnemovault.audit.chain import format_ts
from mnemovault.audit.checkpoint import key_id
from mnemovault.auth import Principal
from mnemovault.errors import Unavailable, ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as store
from mnemovault.store import memories as memory_store
from mnemovault.store import pii as pii_store
from mnemovault.store import tenants as tenant_store
from mnemovault.store.db import Database, owner_connection
from mnemovault.subjects.models import Reapplied, StartCheck, TenantCheck
from mnemovault.subjects.receipt import strict_b64decode

log = logging.getLogger(__name__)

BATCH = 1000
PURGES_FILE = "_purged.jsonl"
"""The system file of tenant purges in the ledger directory (module docstring)."""
LINE_KEYS = ("tenant", "audit_seq", "id", "kind", "at", "request_id", "subject_fp",
             "scope_fp", "memory_ids", "placeholders", "rectified")
"""The keys every ledger line has (lines of earlier versions: these only)."""
CHAIN_KEYS = ("prev", "key_id", "sig")
META_KEY = "ledger"
"""``mv_meta`` key of the database's ledger id."""
LEGACY = "ledger"
"""``<data dir>/ledger``: where earlier versions kept the ledger by default."""
START_ACTOR = "system:ledger"
_NAMESPACE = uuid.UUID("6f1d2c1e-5a43-4b8e-9a57-4c0d3a1e2b71")
_ids: weakref.WeakKeyDictionary[Database, str] = weakref.WeakKeyDictionary()
_checks: weakref.WeakKeyDictionary[Database, StartCheck] = weakref.WeakKeyDictionary()


# -- where ------------------------------------------------------------------------------------
def default_root() -> Path:
    """``<user state dir>/ledger`` (``~/.local/state/mnemovault/ledger``; XDG_STATE_HOME)."""
    return Path(platformdirs.user_state_dir("mnemovault", appauthor=False)) / "ledger"


def location(rt: Runtime) -> str:
    """Where the database lives, as a stable text: ``embedded:<data dir, resolved>`` or
    ``postgresql://<host>:<port>/<dbname>`` (no user, no password)."""
    if not rt.settings.database_url:
        return "embedded:" + str(Path(rt.settings.data_dir).expanduser().resolve())
    p = conninfo_to_dict(rt.settings.database_url)
    return f"postgresql://{p.get('host') or ''}:{p.get('port') or 5432}/{p.get('dbname') or ''}"


def database_id(rt: Runtime) -> str:
    """The database's ledger id (``mv_meta`` key ``ledger``), recorded on first use: a
    UUID derived from :func:`location` (module docstring)."""
    with rt.db.unscoped() as conn:
        value = store.meta(conn, META_KEY)
    if value is None:
        made = str(uuid.uuid5(_NAMESPACE, location(rt)))
        with owner_connection(rt.db.url, autocommit=True) as conn:
            value = store.meta_first(conn, META_KEY, {"id": made})
    return str(value["id"])


def ledger_dir(rt: Runtime) -> Path:
    """``MNEMOVAULT_LEDGER_DIR``, else ``<user state dir>/ledger/<database id>`` (module
    docstring); the database id is read once per database."""
    return _resolve(rt)[0]


def _resolve(rt: Runtime) -> tuple[Path, str | None]:
    s = rt.settings
    if s.ledger_dir:
        return Path(s.ledger_dir).expanduser(), None
    found = _ids.get(rt.db)
    if found is None:
        found = _ids[rt.db] = database_id(rt)
    return default_root() / found, found


def legacy_dir(rt: Runtime) -> Path:
    """``<data dir>/ledger``, the default of earlier versions."""
    return Path(rt.settings.data_dir).expanduser() / LEGACY


# -- lines ------------------------------------------------------------------------------------
def entry(row: dict[str, Any]) -> dict[str, Any]:
    """A ledger row as its line's fields (without the chain fields)."""
    return {
        "tenant": row["tenant_id"], "audit_seq": int(row["audit_seq"]), "id": str(row["id"]),
        "kind": row["kind"], "at": format_ts(row["at"]), "request_id": row["request_id"],
        "subject_fp": row["subject_fp"], "scope_fp": row["scope_fp"],
        "memory_ids": [str(i) for i in row["memory_ids"]],
        "placeholders": list(row["placeholders"]),
        "rectified": [str(i) for i in row["rectified"]],
        "contributed": {k: [str(i) for i in v]
                        for k, v in sorted((row.get("contributed") or {}).items())}}


def render(fields: dict[str, Any], prev: bytes | None) -> bytes:
    """The line of ``fields`` (:func:`entry`) after the line ``prev`` (without its newline;
    None: the file's first line), chained and signed with the audit log's key (unsigned,
    ``sig`` null, when none is configured), newline included."""
    key = audit.config.signing_key()
    body = {k: v for k, v in fields.items() if k not in CHAIN_KEYS}
    body["prev"] = hashlib.sha256(prev + b"\n").hexdigest() if prev is not None else None
    body["key_id"] = key_id(audit.config.origin, key.public_key()).hex() if key else None
    sig = base64.b64encode(key.sign(canonical_json(body))).decode("ascii") if key else None
    return canonical_json({**body, "sig": sig}) + b"\n"


def line(row: dict[str, Any], prev: bytes | None = None) -> bytes:
    """One ledger row as its line after ``prev`` (:func:`render`)."""
    return render(entry(row), prev)


@dataclass
class Line:
    """One line of a ledger file as :func:`check` found it: its number, its fields, whether
    its signature verifies with the deployment's key (``signed``) and whether its ``prev``
    names the line before it (``linked``)."""

    n: int
    entry: dict[str, Any]
    signed: bool
    linked: bool


@dataclass
class Checked:
    """A ledger file checked (:func:`check`): its ``lines`` (those that parse) and the
    ``problems`` found (line numbers and rules, never content)."""

    lines: list[Line] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(path: Path, public_key: Ed25519PublicKey | None = None,
          origin: str | None = None) -> Checked:
    """Check a ledger file line by line (module docstring: what this guarantees): each
    line's form, its ``prev`` against the line before it, its signature against
    ``public_key`` (default: the deployment's audit key) under ``origin``'s key id.
    Reads the whole file; never raises for a bad line (it is a problem)."""
    if public_key is None:
        key = audit.config.signing_key()
        public_key = key.public_key() if key else None
    origin = origin or audit.config.origin
    want_id = key_id(origin, public_key).hex() if public_key else None
    out = Checked()
    prev: bytes | None = None
    for n, _offset, raw in jsonl.lines(path):
        text = raw.rstrip(b"\n")
        try:
            e = orjson.loads(text)
            ok = isinstance(e, dict) and set(LINE_KEYS) <= set(e)
        except orjson.JSONDecodeError:
            ok = False
        if not ok:
            out.problems.append(f"line {n}: not a ledger entry")
            prev = text
            continue
        expected = hashlib.sha256(prev + b"\n").hexdigest() if prev is not None else None
        linked = "prev" in e and e["prev"] == expected
        if "sig" not in e:
            out.problems.append(f"line {n}: not signed (an earlier version's line?)")
        elif not linked:
            out.problems.append(f"line {n}: its prev does not name the line before it (a "
                                "line before it was removed, changed or inserted)")
        signed = False
        if "sig" in e and isinstance(e["sig"], str) and public_key is not None:
            body = {k: v for k, v in e.items() if k != "sig"}
            try:
                public_key.verify(strict_b64decode(e["sig"]), canonical_json(body))
                signed = e.get("key_id") == want_id and canonical_json(e) == text
            except (InvalidSignature, binascii.Error, ValueError, TypeError):
                signed = False
            if not signed:
                out.problems.append(f"line {n}: its signature does not verify with this "
                                    "deployment's key (changed, or written elsewhere)")
        out.lines.append(Line(n=n, entry=e, signed=signed, linked=linked))
        prev = text
    return out


class LedgerFile(jsonl.TableFile[dict[str, Any]]):
    """The per-tenant JSON Lines copy of ``erasure_ledger``, chained and signed; a file
    ahead of the database is kept whole (module docstring)."""

    ahead = jsonl.KEEP
    batch = BATCH

    def table(self, tenant: str) -> jsonl.Table[dict[str, Any]]:
        return table(self.db, tenant)

    def after_commit(self, tenant: str) -> None:
        """The database's after-commit hook: sync when this context wrote a ledger row."""
        if store.take_pending(tenant):
            self.sync(tenant)

    def synced(self, tenant: str) -> jsonl.Synced:
        """:meth:`sync` with the whole report."""
        return self.files.sync(tenant, self.table(tenant), ahead=self.ahead)


def table(db: Database, tenant: str) -> jsonl.Table[dict[str, Any]]:
    """The tenant's ``erasure_ledger`` as its file sees it."""

    def fetch(after: int, limit: int) -> list[dict[str, Any]]:
        with db.transaction(tenant) as conn:
            return store.after(conn, tenant, after, limit)

    return jsonl.Table(fetch=fetch, seq=lambda r: int(r["audit_seq"]),
                       ident=lambda r: str(r["id"]), render=line,
                       key=lambda e: (int(e["audit_seq"]), str(e["id"])), link=line)


def _file(rt: Runtime) -> LedgerFile:
    return LedgerFile(rt.db, ledger_dir(rt))


def attach(rt: Runtime) -> None:
    """Append ledger rows to the ledger file after each commit (once per database;
    nothing with ``ledger_file`` off)."""
    if not rt.settings.ledger_file:
        return
    if any(isinstance(getattr(h, "__self__", None), LedgerFile) or getattr(h, "ledger", False)
           for h in rt.db.after_commit):
        return
    try:
        rt.db.after_commit.append(_file(rt).after_commit)
    except Unavailable:  # the database does not answer yet: find the file on first use
        found: list[LedgerFile] = []

        def lazy(*args: Any, **kwargs: Any) -> Any:
            if not found:
                found.append(_file(rt))
            return found[0].after_commit(*args, **kwargs)

        lazy.ledger = True  # type: ignore[attr-defined]
        rt.db.after_commit.append(lazy)


def export(rt: Runtime, who: Principal, path: Path) -> int:
    """Write the tenant's whole ledger, from the table, to ``path`` (the operator's copy,
    chained and signed, replaced atomically); how many lines. Needs ``audit:read``.

    Raises:
        ValidationError: ``path`` is the tenant's live ledger file (field ``path``).
    """
    who.require("audit:read")
    who.require_unlimited("ledger export")
    live = _file(rt).path(who.tenant)
    if Path(path).resolve() == live.resolve():
        raise ValidationError(f"path: {path} is the tenant's live ledger file; export "
                              "writes a copy elsewhere", field="path")
    return jsonl.dump(Path(path), table(rt.db, who.tenant), batch=BATCH)


def _parsed(raw: bytes) -> dict[str, Any] | None:
    try:
        e = orjson.loads(raw)
        if not (isinstance(e, dict) and set(LINE_KEYS) <= set(e)
                and isinstance(e["tenant"], str)):
            return None
        e["memory_ids"] = [uuid.UUID(i) for i in e["memory_ids"]]
        e["rectified"] = [uuid.UUID(i) for i in e["rectified"]]
        extra = e.get("contributed") or {}
        if not isinstance(extra, dict):
            return None
        e["contributed"] = {str(k): [uuid.UUID(i) for i in v] for k, v in extra.items()}
        return e
    except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError):
        return None


def read(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The entries of ledger files, in file order (ids as UUIDs; ``contributed`` ``{}``
    for lines of earlier versions).

    Raises:
        ValidationError: a path that is not a file, or a line that is not a ledger entry
            (field ``ledger``, naming the file and line number).
    """
    out = []
    for path in paths:
        if not Path(path).is_file():
            raise ValidationError(f"ledger: {path} is not a file", field="ledger")
        for n, _offset, raw in jsonl.lines(path):
            e = _parsed(raw)
            if e is None:
                raise ValidationError(f"ledger: {path} line {n} is not a ledger entry",
                                      field="ledger")
            out.append(e)
    return out


def files(rt: Runtime, ledger: Path | None) -> list[Path]:
    """``ledger`` itself, else every tenant's ``*.jsonl`` of the ledger directory (not the
    system file of purges, :data:`PURGES_FILE`), and of ``<data dir>/ledger`` when an
    earlier version's files are still there (not yet migrated)."""
    if ledger is not None:
        return [ledger]
    out: list[Path] = []
    for d in dict.fromkeys([ledger_dir(rt), legacy_dir(rt)]):
        if d.is_dir():
            out += sorted(p for p in d.glob("*.jsonl") if not p.name.startswith("_"))
    return out


def remove_tenant_file(rt: Runtime, tenant: str) -> None:
    """Delete the tenant's ledger file, its lock file and any side file (after the tenant's
    purge)."""
    _file(rt).remove(tenant)


def record_purge(rt: Runtime, tenant: str, *, at: datetime, audit_seq: int | None) -> None:
    """Append the purge of ``tenant`` to :data:`PURGES_FILE` (module docstring); nothing
    with ``ledger_file`` off."""
    if not rt.settings.ledger_file:
        return
    entry_ = canonical_json({"kind": "purge", "tenant": tenant, "at": format_ts(at),
                             "audit_seq": audit_seq}) + b"\n"
    jsonl.TenantFiles(ledger_dir(rt)).append(PURGES_FILE.removesuffix(".jsonl"), [entry_])


def purges(rt: Runtime) -> list[dict[str, Any]]:
    """The recorded tenant purges (:data:`PURGES_FILE`), oldest first: ``tenant``, ``at``
    (a datetime), ``audit_seq``; lines that do not parse are skipped (and logged)."""
    path = ledger_dir(rt) / PURGES_FILE
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for n, _offset, raw in jsonl.lines(path):
        try:
            e = orjson.loads(raw)
            out.append({"tenant": str(e["tenant"]), "audit_seq": e.get("audit_seq"),
                        "at": datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00"))})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("ledger: %s line %d is not a purge record; skipped", path, n)
    return out


# -- reapplying -------------------------------------------------------------------------------
def reapply(rt: Runtime, who: Principal, entries: Sequence[dict[str, Any]], *,
            request_id: str | None = None) -> Reapplied:
    """Remove again what the ledger ``entries`` (:func:`read`) of the principal's tenant
    (others are skipped) say was erased and exists again: listed memories through the
    forget path, listed contributors' ids (procedure runs, their counters adjusted again),
    listed placeholders by shredding; one ``REAPPLY`` audit row and ledger row. Idempotent
    (nothing to remove: nothing written). Needs ``subject:erase`` on an unlimited key."""
    who.require("subject:erase")
    who.require_unlimited("reapply-erasures")
    return _apply(rt, who.tenant, entries, actor=who.actor, agent=who.agent,
                  trigger="reapply", request_id=request_id)


def _apply(rt: Runtime, tenant: str, entries: Sequence[dict[str, Any]], *, actor: str,
           agent: str | None, trigger: str, request_id: str | None, marker: bool = False,
           details: dict[str, Any] | None = None) -> Reapplied:
    mine = [e for e in entries if e["tenant"] == tenant]
    ids = sorted({i for e in mine for i in e["memory_ids"]})
    placeholders = sorted({p for e in mine for p in e["placeholders"]})
    rectified = sorted({i for e in mine for i in e["rectified"]})
    contributed: dict[str, set[uuid.UUID]] = {}
    for e in mine:
        for kind, listed in (e.get("contributed") or {}).items():
            contributed.setdefault(kind, set()).update(listed)
    out = Reapplied(tenant=tenant, entries=len(mine))
    if not mine and not marker:
        return out
    pseudo = rt.settings.pii_pseudonymize
    with rt.db.transaction(tenant) as conn:
        live = sorted(pii_store.live_among(conn, tenant, placeholders)) if (
            placeholders and pseudo) else []
        res = forget_mod.reapply(
            conn, tenant=tenant, ids=ids,
            contributed={k: sorted(v) for k, v in sorted(contributed.items())},
            shred_values=live, actor=actor, agent=agent, trigger=trigger,
            request_id=request_id, pii=rt.pii if pseudo else None, marker=marker,
            details={"entries": len(mine), **(details or {})})
        out.removed, out.shredded, out.audit_seq = res.deleted, res.shredded, res.audit_seq
        out.runs_removed = _removed_runs(res)
        out.to_rectify = sorted(memory_store.existing(conn, tenant, rectified, scope=None,
                                                      lock=False)) if rectified else []
    return out


def _removed_runs(res: forget_mod.ForgetOutcome) -> list[uuid.UUID]:
    return list(res.removed.get("procedure_runs", []))


# -- every start ------------------------------------------------------------------------------
def check_on_start(rt: Runtime) -> StartCheck:
    """Compare every tenant's ledger file with the database and re-erase what a database
    behind the ledger lacks (module docstring); the report, also kept for
    :func:`last_check`. Migrates an earlier version's ``<data dir>/ledger`` first.
    Failures are logged, never raised: a start is not refused for its ledger (the
    operator's ``reapply-erasures`` remains)."""
    t0 = time.perf_counter()
    if not rt.settings.ledger_file:
        report = StartCheck(enabled=False)
        _checks[rt.db] = report
        return report
    d, db_id = _resolve(rt)
    report = StartCheck(dir=str(d), database_id=db_id)
    if _inside(d, Path(rt.settings.data_dir).expanduser()):
        log.warning("erasure ledger: %s is inside the data directory: a copy of the data "
                    "directory holds it, and restoring that copy rolls it back too; set "
                    "MNEMOVAULT_LEDGER_DIR elsewhere (or unset it)", d)
    lf = _file(rt)
    fresh = not d.is_dir()
    report.migrated = _migrate_legacy(rt, lf)
    names = sorted(p.name.removesuffix(".jsonl") for p in d.glob("*.jsonl")
                   if not p.name.startswith("_")) if d.is_dir() else []
    if fresh:  # a new ledger directory: every tenant's rows from the table (once)
        names = sorted(set(names) | set(_tenants_with_rows(rt)))
        d.mkdir(parents=True, exist_ok=True)
    for tenant in names:
        report.checked += 1
        try:
            found = _check_tenant(rt, lf, tenant)
        except Exception:  # logged; the next start (or reapply-erasures) tries again
            log.exception("erasure ledger: the start check of tenant %s failed", tenant)
            continue
        if found is not None:
            report.tenants.append(found)
    report.ms = round((time.perf_counter() - t0) * 1000, 2)
    _checks[rt.db] = report
    for t in report.tenants:
        _log(t)
    return report


def last_check(rt: Runtime) -> StartCheck | None:
    """The report of this database's start check in this process, if one ran."""
    return _checks.get(rt.db)


def ensure_checked(rt: Runtime) -> StartCheck:
    """:func:`check_on_start` unless it ran for this database already (a server given a
    vault made from parts calls this before it serves)."""
    return _checks.get(rt.db) or check_on_start(rt)


def _check_tenant(rt: Runtime, lf: LedgerFile, tenant: str) -> TenantCheck | None:
    path = lf.path(tenant)
    if _unsigned_format(path):
        _sign_in_place(lf, tenant)
    raw = jsonl.last_line(path)
    key = jsonl._key(lf.table(tenant), raw) if raw is not None else None
    with rt.db.transaction(tenant) as conn:
        head = store.head(conn, tenant)
        if head is not None and key == (int(head["audit_seq"]), str(head["id"])):
            return None  # level: the usual case, one indexed query
        if head is None and raw is None:
            return None
        exists = tenant_store.lifecycle(conn, tenant) is not None
    if not exists:
        return TenantCheck(tenant=tenant, state="no_tenant")
    synced = lf.synced(tenant)
    if not synced.unmatched:
        return TenantCheck(tenant=tenant, state="file_behind", written=synced.written)
    checked = check(path)
    by_id = {str(ln.entry["id"]): ln for ln in checked.lines}
    with rt.db.transaction(tenant) as conn:
        present = {str(i) for i in store.ids_among(
            conn, tenant, [uuid.UUID(i) for i in by_id if _is_uuid(i)])}
    lost = [ln for i, ln in by_id.items() if i not in present and ln.entry["tenant"] == tenant]
    trusted = [_parsed(canonical_json(ln.entry)) for ln in lost if ln.signed]
    entries = [e for e in trusted if e is not None]
    out = TenantCheck(tenant=tenant, state="behind", lost=len(lost),
                      unverified=len(lost) - len(entries), written=synced.written,
                      problems=checked.problems[:20])
    out.reapplied = _apply(
        rt, tenant, entries, actor=START_ACTOR, agent=None, trigger="restore",
        request_id=f"ledger-start-{uuid.uuid4()}", marker=True,
        details={"on_start": True, "lost": len(lost), "unverified": out.unverified})
    return out


def _unsigned_format(path: Path) -> bool:
    """Whether the file's first line is an earlier version's (no ``sig``)."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        first = f.readline()
    try:
        e = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(e, dict) and "sig" not in e


def _sign_in_place(lf: LedgerFile, tenant: str) -> None:
    """Rewrite an earlier version's ledger file (``MNEMOVAULT_LEDGER_DIR`` kept) in the
    chained, signed format, line for line, atomically."""
    with lf.files.locked(tenant) as path:
        prev: bytes | None = None
        out = []
        for n, _o, raw in jsonl.lines(path):
            e = _parsed(raw)
            if e is None:
                log.warning("erasure ledger: %s line %d is not a ledger entry; dropped from "
                            "the signed file", path, n)
                continue
            rendered = render(_strings(e), prev)
            out.append(rendered)
            prev = rendered.rstrip(b"\n")
        jsonl.write_atomic(path, out)
    log.warning("erasure ledger: %s rewritten in the signed, chained format (%d lines)",
                path, len(out))


def _strings(e: dict[str, Any]) -> dict[str, Any]:
    """A parsed entry (:func:`_parsed`) with its ids as text again."""
    return {**e, "memory_ids": [str(i) for i in e["memory_ids"]],
            "rectified": [str(i) for i in e["rectified"]],
            "contributed": {k: [str(i) for i in v] for k, v in sorted(e["contributed"].items())}}


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
        return True
    except (ValueError, TypeError):
        return False


def _log(t: TenantCheck) -> None:
    if t.state == "behind" and t.reapplied is not None:
        r = t.reapplied
        log.warning(
            "erasure ledger: tenant %s: the database is behind its ledger (restored from a "
            "backup?): %d entries it lacks re-erased (REAPPLY audit seq %s): %d memories %s, "
            "%d procedure runs %s, %d vault values %s; %d entries not signed by this "
            "deployment's key were not applied", t.tenant, t.lost - t.unverified,
            r.audit_seq, len(r.removed), [str(i) for i in r.removed[:10]],
            len(r.runs_removed), [str(i) for i in r.runs_removed[:10]], len(r.shredded),
            r.shredded[:10], t.unverified)
        if r.to_rectify:
            log.warning("erasure ledger: tenant %s: %d rectified memories are back with "
                        "their old content; correct them again: %s", t.tenant,
                        len(r.to_rectify), [str(i) for i in r.to_rectify[:10]])
    elif t.state == "file_behind":
        log.warning("erasure ledger: tenant %s: %d rows the ledger file lacked were written "
                    "again (it was cut back, or a process stopped before appending)",
                    t.tenant, t.written)
    elif t.state == "no_tenant":
        log.warning("erasure ledger: tenant %s has a ledger file but is not in the database "
                    "(restored from before it existed?): nothing to re-erase", t.tenant)
    for p in t.problems:
        log.error("erasure ledger: tenant %s: %s", t.tenant, p)


def _tenants_with_rows(rt: Runtime) -> list[str]:
    """Tenants with erasure-ledger rows (owner path, for a new ledger directory)."""
    with owner_connection(rt.db.url, autocommit=True) as conn:
        return store.tenants_with_rows(conn)


def _migrate_legacy(rt: Runtime, lf: LedgerFile) -> list[str]:
    """Append the lines of an earlier version's ``<data dir>/ledger/*.jsonl`` that the
    ledger lacks (re-rendered: chained and signed), then rename the old files; the tenants
    (and ``_purged``) migrated."""
    old = legacy_dir(rt)
    if not old.is_dir() or old.resolve() == lf.directory.resolve():
        return []
    done = []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    for src in sorted(old.glob("*.jsonl")):
        name = src.name.removesuffix(".jsonl")
        if not jsonl.SAFE_NAME.match(name):
            continue
        with lf.files.locked(name) as dst:
            if name.startswith("_"):
                have = {raw for _n, _o, raw in jsonl.lines(dst)}
                chunk = b"".join(raw for _n, _o, raw in jsonl.lines(src) if raw not in have)
            else:
                have_ids = {str(k[1]) for k in jsonl._keys(lf.table(name), dst)}
                prev = jsonl.last_line(dst)
                out = []
                for n, _o, raw in jsonl.lines(src):
                    e = _parsed(raw)
                    if e is None:
                        log.warning("erasure ledger: %s line %d is not a ledger entry; not "
                                    "migrated", src, n)
                        continue
                    if str(e["id"]) in have_ids:
                        continue
                    rendered = render(_strings(e), prev)
                    out.append(rendered)
                    prev = rendered.rstrip(b"\n")
                chunk = b"".join(out)
            if chunk:
                with open(dst, "ab") as f:
                    f.write(chunk)
                    f.flush()
        src.rename(src.with_name(f"{src.name}.migrated-{stamp}"))
        done.append(name)
        log.warning("erasure ledger: %s migrated to %s (renamed %s.migrated-%s)", src, dst,
                    src.name, stamp)
    return done


def status(rt: Runtime) -> dict[str, Any]:
    """The ledger as ``mnemovault db info`` shows it: ``dir``, ``database_id``, whether an
    earlier version's ``<data dir>/ledger`` is still there (``legacy_dir``), this process's
    start check (:class:`~mnemovault.subjects.models.StartCheck`, as JSON), and per tenant
    file the latest ``reapply`` row (``at``, ``audit_seq``, ``trigger`` restore or
    reapply, counts)."""
    if not rt.settings.ledger_file:
        return {"enabled": False}
    d, db_id = _resolve(rt)
    check_ = last_check(rt)
    old = legacy_dir(rt)
    out: dict[str, Any] = {
        "enabled": True, "dir": str(d), "database_id": db_id,
        "legacy_dir": str(old) if old.is_dir() and any(old.glob("*.jsonl")) and
        old.resolve() != d.resolve() else None,
        "inside_data_dir": _inside(d, Path(rt.settings.data_dir).expanduser()),
        "start": check_.model_dump(mode="json") if check_ else None, "last_reapply": []}
    for p in sorted(d.glob("*.jsonl")) if d.is_dir() else []:
        tenant = p.name.removesuffix(".jsonl")
        if tenant.startswith("_"):
            continue
        with rt.db.transaction(tenant) as conn:
            row = store.last_reapply(conn, tenant)
        if row is not None:
            out["last_reapply"].append({
                "tenant": tenant, "at": format_ts(row["at"]), "audit_seq": row["audit_seq"],
                "restore": str(row["request_id"] or "").startswith("ledger-start-"),
                "memories": len(row["memory_ids"]), "placeholders": len(row["placeholders"]),
                "procedure_runs": len((row["contributed"] or {}).get("procedure_runs", []))})
    return out


def _inside(d: Path, data_dir: Path) -> bool:
    try:
        d.resolve().relative_to(data_dir.resolve())
        return True
    except ValueError:
        return False


def recent(rt: Runtime, who: Principal, *, before: int | None = None,
           limit: int = 20) -> dict[str, Any]:
    """The tenant's ledger rows newest first (ids, counts and fingerprints, never content):
    ``{"items": [{"audit_seq", "kind", "at", "request_id", "subject_fp", "scope_fp",
    "memories", "placeholders", "rectified"}], "next_before"}`` (keyset on ``audit_seq``).
    Needs ``subject:erase`` and a key not limited to a scope or subject (the ledger spans
    the tenant).

    Raises:
        Forbidden: missing ``subject:erase``, or a limited key.
        ValidationError: ``limit`` outside 1..100.
    """
    who.require("subject:erase")
    who.require_unlimited("erasure ledger")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
        raise ValidationError("limit: must be an integer in 1..100", field="limit")
    with rt.db.transaction(who.tenant) as conn:
        rows = store.before(conn, who.tenant, before, limit + 1)
    items = [{"audit_seq": int(r["audit_seq"]), "kind": r["kind"], "at": r["at"],
              "request_id": r["request_id"], "subject_fp": r["subject_fp"],
              "scope_fp": r["scope_fp"], "memories": len(r["memory_ids"] or []),
              "placeholders": len(r["placeholders"] or []),
              "rectified": len(r["rectified"] or [])} for r in rows[:limit]]
    return {"items": items,
            "next_before": items[-1]["audit_seq"] if len(rows) > limit else None}
