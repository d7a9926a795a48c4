"""``mv.lexical``: the keyed lexical terms (:mod:`mnemovault.recall.terms`, migration
0014)::

    mv.lexical.pending()                        # rows still indexed with plain lexemes
    mv.lexical.reindex(progress=callback)       # rewrite them (MemoryVault.open does)
"""

from __future__ import annotations

from mnemovault.facade import Section
from mnemovault.recall import reindex
from mnemovault.runtime import Runtime


class LexicalSection(Section):
    """The re-index of terms written before migration 0014 (operator maintenance)."""

    @staticmethod
    def on_start(rt: Runtime, *, run: bool = True) -> reindex.Report | None:
        """Re-index what is left before anything is served (``MemoryVault.open``; not when
        ``run`` is false: ``mnemovault db reindex-terms`` does it with a progress bar)."""
        return reindex.run(rt) if run else None

    def pending(self) -> dict[str, int]:
        """Rows left to re-index, by tenant; see :func:`mnemovault.recall.reindex.pending`."""
        return reindex.pending(self.rt)

    def reindex(self, *, batch: int = reindex.BATCH,
                progress: reindex.Progress | None = None) -> reindex.Report:
        """Re-index every row whose terms are plain; see :func:`mnemovault.recall.reindex.run`."""
        return reindex.run(self.rt, batch=batch, progress=progress)
