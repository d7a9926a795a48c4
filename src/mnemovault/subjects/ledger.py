"""The erasure ledger outside the database, and reapplying it after a backup restore
(SPEC section 10's GOAL; issue 10, item 9).

Design. Every erase, forget, shred, rectification and reapply writes one row to the
``erasure_ledger`` table in its own transaction (:mod:`mnemovault.store.ledger`), keyed by
the seq of its audit row: ids, placeholders and keyed fingerprints, never content. A
restore of a backup rolls that table back with everything else, so after each commit the
new rows are also appended to a JSON Lines file outside the database, one per tenant:
``<ledger_dir>/<tenant>.jsonl`` (``MNEMOVAULT_LEDGER_DIR``, default ``<data dir>/ledger``;
``MNEMOVAULT_LEDGER_FILE=false`` turns the file off). Keep that directory (or a copy made
with ``mnemovault ledger export FILE``, which writes the file again from the table) apart
from the database backups, with the KEK. After restoring a backup,
``mnemovault reapply-erasures`` reads the file(s) and removes again, through the forget path
(audited as ``REAPPLY``), every memory the ledger lists that exists again, and shreds again
every listed placeholder that is live again; it is idempotent and reports what it removed,
and which rectified memories exist (a restore may have brought their old content back:
check and correct them again).

Line format (canonical JSON, :func:`mnemovault.audit.canonical.canonical_json`)::

    {"tenant": "acme", "audit_seq": 42, "id": "<uuid>", "kind": "erase", "at": "<UTC ts>",
     "request_id": "...", "subject_fp": "hmac-sha256:..." | null, "scope_fp": ... | null,
     "memory_ids": ["<uuid>", ...], "placeholders": ["{email:p_...}", ...],
     "rectified": ["<uuid>", ...]}

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
rows after it. When the last line's row is not in the table (the database was restored to
an older state) every line stays, being the record of erasures the restore undid, and every
table row whose ``id`` the file lacks is appended, so lines written after a restore are not
lost behind older seqs; how many lines have no row in the table is logged as a warning
(:data:`mnemovault.audit.jsonl.KEEP`). ``ledger export`` refuses to write over the live file
of the tenant (it would drop those lines).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from mnemovault.audit import jsonl
from mnemovault.audit import log as audit
from mnemovault.audit.canonical import canonical_json
from mnemovault.audit.chain import format_ts
from mnemovault.auth import Principal
from mnemovault.errors import ValidationError
from mnemovault.governance import forget as forget_mod
from mnemovault.runtime import Runtime
from mnemovault.store import ledger as store
from mnemovault.store import memories as memory_store
from mnemovault.store import pii as pii_store
from mnemovault.store.db import Database
from mnemovault.subjects.models import Reapplied

log = logging.getLogger(__name__)

BATCH = 1000
PURGES_FILE = "_purged.jsonl"
"""The system file of tenant purges in the ledger directory (module docstring)."""
LINE_KEYS = ("tenant", "audit_seq", "id", "kind", "at", "request_id", "subject_fp",
             "scope_fp", "memory_ids", "placeholders", "rectified")


def ledger_dir(rt: Runtime) -> Path:
    """``MNEMOVAULT_LEDGER_DIR``, else ``<data dir>/ledger``."""
    s = rt.settings
    return Path(s.ledger_dir or Path(s.data_dir).expanduser() / "ledger")


def line(row: dict[str, Any]) -> bytes:
    """One ledger row as its canonical JSON line (with the newline)."""
    return canonical_json({
        "tenant": row["tenant_id"], "audit_seq": int(row["audit_seq"]), "id": str(row["id"]),
        "kind": row["kind"], "at": format_ts(row["at"]), "request_id": row["request_id"],
        "subject_fp": row["subject_fp"], "scope_fp": row["scope_fp"],
        "memory_ids": [str(i) for i in row["memory_ids"]],
        "placeholders": list(row["placeholders"]),
        "rectified": [str(i) for i in row["rectified"]]}) + b"\n"


class LedgerFile(jsonl.TableFile[dict[str, Any]]):
    """The per-tenant JSON Lines copy of ``erasure_ledger``; a file ahead of the database
    is kept whole (module docstring)."""

    ahead = jsonl.KEEP
    batch = BATCH

    def table(self, tenant: str) -> jsonl.Table[dict[str, Any]]:
        return table(self.db, tenant)

    def after_commit(self, tenant: str) -> None:
        """The database's after-commit hook: sync when this context wrote a ledger row."""
        if store.take_pending(tenant):
            self.sync(tenant)


def table(db: Database, tenant: str) -> jsonl.Table[dict[str, Any]]:
    """The tenant's ``erasure_ledger`` as its file sees it."""

    def fetch(after: int, limit: int) -> list[dict[str, Any]]:
        with db.transaction(tenant) as conn:
            return store.after(conn, tenant, after, limit)

    return jsonl.Table(fetch=fetch, seq=lambda r: int(r["audit_seq"]),
                       ident=lambda r: str(r["id"]), render=line,
                       key=lambda e: (int(e["audit_seq"]), str(e["id"])))


def attach(rt: Runtime) -> None:
    """Append ledger rows to the ledger file after each commit (once per database;
    nothing with ``ledger_file`` off)."""
    if not rt.settings.ledger_file:
        return
    if any(isinstance(getattr(h, "__self__", None), LedgerFile) for h in rt.db.after_commit):
        return
    rt.db.after_commit.append(LedgerFile(rt.db, ledger_dir(rt)).after_commit)


def export(rt: Runtime, who: Principal, path: Path) -> int:
    """Write the tenant's whole ledger, from the table, to ``path`` (the operator's copy,
    replaced atomically); how many lines. Needs ``audit:read``.

    Raises:
        ValidationError: ``path`` is the tenant's live ledger file (field ``path``).
    """
    who.require("audit:read")
    who.require_unlimited("ledger export")
    live = LedgerFile(rt.db, ledger_dir(rt)).path(who.tenant)
    if Path(path).resolve() == live.resolve():
        raise ValidationError(f"path: {path} is the tenant's live ledger file; export "
                              "writes a copy elsewhere", field="path")
    return jsonl.dump(Path(path), table(rt.db, who.tenant), batch=BATCH)


def read(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The entries of ledger files, in file order.

    Raises:
        ValidationError: a path that is not a file, or a line that is not a ledger entry
            (field ``ledger``, naming the file and line number).
    """
    out = []
    for path in paths:
        if not Path(path).is_file():
            raise ValidationError(f"ledger: {path} is not a file", field="ledger")
        for n, _offset, raw in jsonl.lines(path):
            try:
                entry = orjson.loads(raw)
                ok = (isinstance(entry, dict) and set(LINE_KEYS) <= set(entry)
                      and isinstance(entry["tenant"], str))
                if ok:
                    entry["memory_ids"] = [uuid.UUID(i) for i in entry["memory_ids"]]
                    entry["rectified"] = [uuid.UUID(i) for i in entry["rectified"]]
            except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError):
                ok = False
            if not ok:
                raise ValidationError(f"ledger: {path} line {n} is not a ledger entry",
                                      field="ledger")
            out.append(entry)
    return out


def files(rt: Runtime, ledger: Path | None) -> list[Path]:
    """``ledger`` itself, else every tenant's ``*.jsonl`` of the ledger directory (not the
    system file of purges, :data:`PURGES_FILE`)."""
    if ledger is not None:
        return [ledger]
    d = ledger_dir(rt)
    return sorted(p for p in d.glob("*.jsonl")
                  if not p.name.startswith("_")) if d.is_dir() else []


def remove_tenant_file(rt: Runtime, tenant: str) -> None:
    """Delete the tenant's ledger file, its lock file and any side file (after the tenant's
    purge)."""
    LedgerFile(rt.db, ledger_dir(rt)).remove(tenant)


def record_purge(rt: Runtime, tenant: str, *, at: datetime, audit_seq: int | None) -> None:
    """Append the purge of ``tenant`` to :data:`PURGES_FILE` (module docstring); nothing
    with ``ledger_file`` off."""
    if not rt.settings.ledger_file:
        return
    entry = canonical_json({"kind": "purge", "tenant": tenant, "at": format_ts(at),
                            "audit_seq": audit_seq}) + b"\n"
    jsonl.TenantFiles(ledger_dir(rt)).append(PURGES_FILE.removesuffix(".jsonl"), [entry])


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


def reapply(rt: Runtime, who: Principal, entries: Sequence[dict[str, Any]], *,
            request_id: str | None = None) -> Reapplied:
    """Remove again what the ledger ``entries`` of the principal's tenant (others are
    skipped) say was erased and exists again: listed memories through the forget path,
    listed placeholders by shredding; one ``REAPPLY`` audit row and ledger row. Idempotent.
    Needs ``subject:erase`` on an unlimited key."""
    who.require("subject:erase")
    who.require_unlimited("reapply-erasures")
    mine = [e for e in entries if e["tenant"] == who.tenant]
    ids = sorted({i for e in mine for i in e["memory_ids"]})
    placeholders = sorted({p for e in mine for p in e["placeholders"]})
    rectified = sorted({i for e in mine for i in e["rectified"]})
    out = Reapplied(tenant=who.tenant, entries=len(mine))
    if not mine:
        return out
    with rt.db.transaction(who.tenant) as conn:
        back = sorted(memory_store.existing(conn, who.tenant, ids, scope=None,
                                            lock=False)) if ids else []
        live = sorted(pii_store.live_among(conn, who.tenant, placeholders)) if placeholders else []
        if not rt.settings.pii_pseudonymize:
            live = []
        if back:
            res = forget_mod.forget(
                conn, tenant=who.tenant, ids=back, actor=who.actor, agent=who.agent,
                trigger="reapply", request_id=request_id,
                pii=rt.pii if rt.settings.pii_pseudonymize else None, shred_values=live,
                operation="REAPPLY")
            out.removed, out.shredded, out.audit_seq = res.deleted, res.shredded, res.audit_seq
        elif live:
            out.shredded = rt.pii.shred(conn, live)
            out.audit_seq = audit.append(
                conn, tenant=who.tenant, operation="REAPPLY", actor=who.actor,
                agent=who.agent, trigger="reapply", request_id=request_id,
                details={"count": 0, "shredded": out.shredded, "entries": len(mine)})
            store.insert(conn, tenant=who.tenant, audit_seq=out.audit_seq, kind="reapply",
                         request_id=request_id, subject_fp=None, scope_fp=None,
                         memory_ids=[], placeholders=out.shredded)
        out.to_rectify = sorted(memory_store.existing(conn, who.tenant, rectified, scope=None,
                                                      lock=False)) if rectified else []
    return out
