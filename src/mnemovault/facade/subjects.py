"""``mv.subjects``: data-subject rights (:mod:`mnemovault.subjects`)::

    er = mv.subjects.erase("ada@example.org", scope="support")   # signed receipt in er.receipt
    mv.subjects.erase_scope("support")                           # every memory of the scope
    page = mv.subjects.list("ada@example.org", scope="support", limit=50)
    doc = mv.subjects.export("ada@example.org", scope="support", reveal=False)
    mv.subjects.rectify(memory_id, "Ada prefers green tea")
    mv.subjects.verify_receipt(er.receipt)                       # offline check
    mv.subjects.export_ledger(Path("ledger.jsonl"))
    mv.subjects.reapply_erasures()                               # after a backup restore
    mv.subjects.ledger_status()            # where the ledger is; what the start re-erased
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from mnemovault.auth import Principal
from mnemovault.facade import Section
from mnemovault.models import Page
from mnemovault.runtime import Runtime
from mnemovault.subjects import access, erase, ledger, receipt, rectify
from mnemovault.subjects import keys as content_keys
from mnemovault.subjects.models import Erasure, Reapplied, Rectified, StartCheck


class SubjectsSection(Section):
    """Erase, list, export and rectify a subject's memories; the erasure ledger."""

    @staticmethod
    def wire(rt: Runtime) -> Runtime:
        """Attach the erasure ledger's after-commit file hook to ``rt`` (once); ``rt``."""
        ledger.attach(rt)
        return rt

    @staticmethod
    def on_start(rt: Runtime) -> StartCheck:
        """Compare the erasure ledger with the database and re-erase what a database
        restored from a backup lacks; see :func:`mnemovault.subjects.ledger.check_on_start`
        (``MemoryVault.open`` calls it). Then the content keys' start work: rows not
        sealed yet are sealed, rows under destroyed keys deleted
        (:func:`mnemovault.subjects.keys.on_start`)."""
        report = ledger.check_on_start(rt)
        content_keys.on_start(rt)
        return report

    def ensure_checked(self) -> StartCheck:
        """:meth:`on_start` unless it ran for this database in this process (a server
        given a vault made from parts calls it before serving)."""
        return ledger.ensure_checked(self.rt)

    def ledger_status(self) -> dict[str, Any]:
        """Where the ledger is and what the start check found; see
        :func:`mnemovault.subjects.ledger.status`."""
        return ledger.status(self.rt)

    def verify_ledger(self, path: Path | None = None, *,
                      principal: Principal | None = None) -> dict[str, Any]:
        """Check ledger files (default: every tenant's) line by line: ``{file: {"lines":
        n, "problems": [...]}}``; see :func:`mnemovault.subjects.ledger.check`. Needs
        ``audit:read`` on an unlimited key."""
        who = self._who(principal)
        who.require("audit:read")
        who.require_unlimited("ledger verify")
        out: dict[str, Any] = {}
        for p in ledger.files(self.rt, path):
            c = ledger.check(p)
            out[str(p)] = {"lines": len(c.lines), "problems": c.problems}
        return out

    def erase(self, subject: str, *, scope: str, principal: Principal | None = None,
              trigger: str = "api", request_id: str | None = None,
              scrub: bool = False) -> Erasure:
        """Erase every memory of ``subject`` in ``scope`` (``scrub``: then rewrite the
        tables and retire the WAL); see :func:`mnemovault.subjects.erase.erase`."""
        return erase.erase(self.rt, self._who(principal), scope=scope, subject=subject,
                           trigger=trigger, request_id=request_id, scrub=scrub)

    def erase_scope(self, scope: str, *, principal: Principal | None = None,
                    trigger: str = "api", request_id: str | None = None,
                    scrub: bool = False) -> Erasure:
        """Erase every memory of ``scope``; see :func:`mnemovault.subjects.erase.erase`."""
        return erase.erase(self.rt, self._who(principal), scope=scope, subject=None,
                           trigger=trigger, request_id=request_id, scrub=scrub)

    def list(self, subject: str, *, scope: str, limit: int = 50,
             cursor: uuid.UUID | str | None = None,
             principal: Principal | None = None) -> Page:
        """A page of what an erase would remove; see
        :func:`mnemovault.subjects.access.list_memories`."""
        return access.list_memories(self.rt, self._who(principal), subject, scope=scope,
                                    limit=limit, cursor=cursor)

    def export(self, subject: str, *, scope: str, reveal: bool = False,
               principal: Principal | None = None,
               request_id: str | None = None) -> dict[str, Any]:
        """The subject's export document; see :func:`mnemovault.subjects.access.export`."""
        return access.export(self.rt, self._who(principal), subject, scope=scope,
                             reveal=reveal, request_id=request_id)

    def rectify(self, memory_id: uuid.UUID | str, content: str, *,
                principal: Principal | None = None, trigger: str = "api",
                request_id: str | None = None) -> Rectified:
        """Correct a memory's content in place; see
        :func:`mnemovault.subjects.rectify.rectify`."""
        return rectify.rectify(self.rt, self._who(principal), memory_id, content,
                               trigger=trigger, request_id=request_id)

    def verify_receipt(self, doc: Any, *, public_key: Path | None = None) -> dict[str, Any]:
        """Check an erasure receipt; see :func:`mnemovault.subjects.receipt.verify_with`."""
        return receipt.verify_with(self.rt.settings, doc, public_key)

    def export_ledger(self, path: Path, *, principal: Principal | None = None) -> int:
        """Write the tenant's erasure ledger to ``path``; see
        :func:`mnemovault.subjects.ledger.export`."""
        return ledger.export(self.rt, self._who(principal), path)

    def erasures(self, *, before: int | None = None, limit: int = 20,
                 principal: Principal | None = None) -> dict[str, Any]:
        """The erasure ledger's rows newest first; see
        :func:`mnemovault.subjects.ledger.recent`."""
        return ledger.recent(self.rt, self._who(principal), before=before, limit=limit)

    def reapply_erasures(self, path: Path | None = None, *,
                         principal: Principal | None = None) -> Reapplied:
        """Remove again what the ledger file(s) list; see
        :func:`mnemovault.subjects.ledger.reapply`."""
        entries = ledger.read(ledger.files(self.rt, path))
        return ledger.reapply(self.rt, self._who(principal), entries)
