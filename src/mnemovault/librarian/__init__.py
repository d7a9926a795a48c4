"""The librarian (SPEC section 5, consolidation; issue 23 items 1 and 3): a job that turns a
tenant's episodes into facts, one run per tenant at a time.

==============  =========================================================================
:mod:`.job`     the run: advisory lock, scopes, plan, write, fade, audit (``LIBRARIAN``)
:mod:`.merge`   near-duplicate episodes -> one fact (stored embeddings + a lexical check)
:mod:`.distil`  a subject's episodes -> topical facts (extractive, or the chat model)
:mod:`.fade`    facts nothing recalls or wakes lose rank; retention then archives them
:mod:`.common`  episodes, drafts, dates as facts render them
==============  =========================================================================

Every fact is written through the write path (:func:`mnemovault.memories.write.
remember_many`: guard, pseudonymisation, sealing, lineage, audit) with ``derived_from``
naming each source, so the forget path removes it with any of them (SPEC section 4, the
lineage cascade) and a subject's erase with the subject. The librarian reads stored text
only: it holds placeholders, never a personal value, and that is all a model sees.
"""

from mnemovault.librarian.job import LibrarianResult, run, run_all

__all__ = ["LibrarianResult", "run", "run_all"]
