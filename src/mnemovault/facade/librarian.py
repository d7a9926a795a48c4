"""``mv.librarian``: the consolidation job (:mod:`mnemovault.librarian`).

    res = mv.librarian.run()                      # every scope of the tenant
    res = mv.librarian.run(scope="support", dry_run=True)
    mv.librarian.run_all()                        # every live tenant (the schedule)
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING

from mnemovault.auth import Principal
from mnemovault.facade import Section

if TYPE_CHECKING:  # the job (numpy) is imported by a run, not by opening the vault
    from mnemovault.librarian import LibrarianResult
    from mnemovault.librarian.job import Progress


class LibrarianSection(Section):
    """Merge near-duplicates, distil facts, fade unused ones; see :func:`mnemovault.
    librarian.run`."""

    def run(self, *, scope: str | None = None, dry_run: bool = False,
            now: datetime | None = None, progress: Progress | None = None,
            principal: Principal | None = None,
            request_id: str | None = None) -> LibrarianResult:
        """One run over the principal's tenant (``memory:write`` + ``memory:forget``, an
        unlimited key); ``locked`` in the result when another run holds the tenant."""
        from mnemovault import librarian

        return librarian.run(self.rt, self._who(principal), scope=scope, dry_run=dry_run,
                             now=now, progress=progress, request_id=request_id)

    def run_all(self, *, dry_run: bool = False,
                now: datetime | None = None) -> builtins.list[LibrarianResult]:
        """One run per live tenant (operator path: the ``librarian_interval_hours``
        schedule)."""
        from mnemovault import librarian

        return librarian.run_all(self.rt, dry_run=dry_run, now=now)
