"""Recall (SPEC section 5): the ``k`` best memories of a scope for a query.

Hybrid: the ``recall_candidates`` nearest by cosine distance (HNSW index, with
``hnsw.iterative_scan`` so filters still yield enough rows; at most 1,000, what the index
can return) and the same number by BM25 over the stored full-text vectors, with the
scope's maintained corpus statistics (:mod:`mnemovault.store.search`), are fused
(:func:`mnemovault.recall.ranking.fuse`: by default a convex combination whose lexical
share is gated by how much of the query the best text match covers) with recency and pin
terms, lent to the best hits' neighbouring turns in their conversation (the same
provenance ``run_id``: conversation context, ``recall_context``;
:mod:`mnemovault.store.neighbours`), then optionally re-ranked
(:mod:`mnemovault.recall.rerankers`). The two candidate lists are found side by side
(:func:`_dense_beside`): the query is embedded on a worker thread while the BM25 SQL runs,
and the nearest rows are read on a spare connection if the BM25 side is still running
then. Archived,
superseded and pending-review memories are excluded unless ``filters.include_archived``
(archived only; the others never). Note that with ``include_archived`` or the other
filters, BM25's statistics are still those of the scope's live memories.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from mnemovault import validation as checked
from mnemovault import visibility
from mnemovault.auth import Principal
from mnemovault.errors import MnemoError, ValidationError
from mnemovault.models import Hit, Memory, RecallFilters
from mnemovault.pii import service as pii
from mnemovault.recall import multihop, rerankers
from mnemovault.recall import terms as lexical_terms
from mnemovault.recall.ranking import fuse, rerank
from mnemovault.runtime import Runtime
from mnemovault.store import librarian as store_librarian
from mnemovault.store import memories as memory_store
from mnemovault.store import neighbours
from mnemovault.store.search import filter_sql, text_candidates, vector_candidates
from mnemovault.validation import TIME_RULE, Timestamp, validation_error_from_pydantic

log = logging.getLogger(__name__)

HNSW_MAX_CANDIDATES = 1000
"""pgvector's ``hnsw.ef_search`` limit: an HNSW scan cannot return more rows than that."""


def candidate_count(configured: int, k: int) -> int:
    """Candidates per list: ``recall_candidates``, at least ``k``, at most
    :data:`HNSW_MAX_CANDIDATES` (what the index can return)."""
    return max(1, min(max(configured, k), HNSW_MAX_CANDIDATES))


DENSE_THREADS = 16
"""Recalls' dense sides in flight at once on worker threads, per process; a recall that
finds every one busy embeds on its own thread, after its lexical side (nothing queues)."""

_workers: ThreadPoolExecutor | None = None
_slots = threading.BoundedSemaphore(DENSE_THREADS)
_workers_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: it makes its own pool and lock."""
    global _workers, _slots, _workers_lock
    _workers, _slots, _workers_lock = (None, threading.BoundedSemaphore(DENSE_THREADS),
                                       threading.Lock())


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Dense:
    """Recall's dense side: ``result()`` gives ``(query vector, nearest rows or None)``;
    ``settle()`` waits until no work of it runs any more (after the lexical side failed)."""

    def __init__(self, future: Future[tuple[Any, list[dict[str, Any]] | None]] | None,
                 inline: Callable[[], Any] | None = None) -> None:
        self._future, self._inline = future, inline

    def result(self) -> tuple[Any, list[dict[str, Any]] | None]:
        if self._future is None:
            assert self._inline is not None
            return self._inline()[0], None
        return self._future.result()

    def settle(self) -> None:
        if self._future is None:
            return
        if self._future.cancel():  # it never ran: its slot is still taken
            _slots.release()
        else:
            wait([self._future])


def _dense_beside(rt: Runtime, tenant: str, query: str, where: str, params: dict[str, Any],
                  n: int, lexical_done: threading.Event) -> _Dense:
    """Recall's dense side on a worker thread while the caller runs the lexical side's SQL
    on its own connection: the query's embedding, then, if the lexical side is still
    running, the nearest rows on a spare connection (:meth:`~mnemovault.store.db.Database.
    spare_transaction`); else, with no spare free, or if the spare's query fails, None for
    them, and the caller runs that query itself once its connection is free. The embedder
    (torch, or a remote service) and the database each work or wait on their own, so a
    recall costs about the longer of its two sides instead of their sum (issue 27, item 5).
    With all :data:`DENSE_THREADS` busy the caller embeds on its own thread instead.

    The nearest rows read on the spare connection are candidate ids only: the caller
    reads the rows it returns in its own transaction, through the visibility rule (each
    statement has its own snapshot under read committed anyway). The caller's context
    variables (request id, spans) go with the work; an embedder's error is raised where
    the result is read. A forked child makes its own pool (:func:`_after_fork_in_child`)."""
    global _workers
    embed = functools.partial(rt.embedder.embed, [query])
    if not _slots.acquire(blocking=False):
        return _Dense(None, inline=embed)
    try:
        with _workers_lock:
            if _workers is None:
                _workers = ThreadPoolExecutor(max_workers=DENSE_THREADS,
                                              thread_name_prefix="mv-recall-dense")
            workers = _workers
    except BaseException:
        _slots.release()
        raise

    def dense() -> tuple[Any, list[dict[str, Any]] | None]:
        try:
            qvec = embed()[0]
            if lexical_done.is_set():
                return qvec, None
            try:
                with rt.db.spare_transaction(tenant) as spare:
                    if spare is None:
                        return qvec, None
                    return qvec, vector_candidates(spare, qvec, where, params, n,
                                                   ef_search=rt.settings.hnsw_ef_search)
            except MnemoError as exc:  # the caller's own connection tries again
                log.debug("recall: the spare connection's query failed (%s)",
                          type(exc).__name__)
                return qvec, None
        finally:
            _slots.release()

    return _Dense(workers.submit(contextvars.copy_context().run, dense))


def checked_time(value: datetime | str | None, field: str) -> datetime | None:
    """A caller's timestamp (a datetime, or ISO 8601 text; naive: UTC) within the bounds
    of every timestamp (:mod:`mnemovault.validation`).

    Raises:
        ValidationError: names ``field``.
    """
    if value is None:
        return None
    try:
        return TypeAdapter(Timestamp).validate_python(value)
    except PydanticValidationError:
        raise ValidationError(f"{field}: must be an ISO 8601 timestamp (naive: UTC) and "
                              f"{TIME_RULE}", field=field) from None


def recall(rt: Runtime, who: Principal, query: str, *, scope: str, k: int = 10,
           filters: RecallFilters | dict[str, Any] | None = None, touch: bool = True,
           reveal: bool = False, request_id: str | None = None,
           as_of: datetime | str | None = None) -> list[Hit]:
    """The ``k`` best memories in ``scope`` for ``query``, best first (module docstring).

    By default the current versions only (what is true now). ``as_of`` (a timestamp, or
    its ISO 8601 text) asks what was true at that time: the versions of each key whose
    valid interval ``[valid_from, valid_to)`` contains it and the unkeyed memories valid
    from (created) at or before it (:mod:`mnemovault.memories.valid_time`; which statuses
    that read sees is the visibility rule's ``as_of`` purpose).

    The query, scope and subject are pseudonymised like stored text (lookups only), so a
    query naming a known person finds the memories stored under their placeholder. Output
    shows placeholders; ``reveal=True`` (permission ``pii:reveal``) shows the original
    values and is audited. ``touch`` counts an access of each hit (in a short transaction
    of its own after the read, so concurrent recalls never queue behind each other's row
    locks; see :func:`mnemovault.store.memories.touch`). With a re-ranker configured
    (``recall_reranker``), the first ``recall_rerank_depth`` fused hits are re-scored by
    it before the cut to ``k``.

    Raises:
        ValidationError: blank query, k outside 1..100, bad filter, ``as_of`` not a
            timestamp in range.
        Forbidden: missing ``memory:read`` or a scope the key is not limited to.
    """
    who.require("memory:read")
    scope = checked.name(scope, "scope")
    who.check_scope(scope)
    query = checked.query(query)
    if not isinstance(k, int) or not 1 <= k <= 100:
        raise ValidationError("k: must be an integer in 1..100", field="k")
    if isinstance(filters, dict):
        try:
            filters = RecallFilters.model_validate(filters)
        except PydanticValidationError as exc:
            raise validation_error_from_pydantic(exc, prefix="filters") from None
    f = filters or RecallFilters()
    when = checked_time(as_of, "as_of")
    if who.subject is not None:
        f = f.model_copy(update={"subject": who.subject})
    if reveal:
        who.require("pii:reveal")
    n = candidate_count(rt.settings.recall_candidates, k)
    with rt.db.transaction(who.tenant) as conn:
        # the query, scope and subject as they would have been stored (placeholders)
        tr = pii.Translator(rt, conn, who.tenant)
        query = tr(query) or query
        scope = tr(scope) or scope
        subject = tr(f.subject)
        where, params = filter_sql(who.tenant, scope, include_archived=f.include_archived,
                                   subject=subject, types=list(f.types or []),
                                   tags=pii.stored_tags(rt, conn, who.tenant,
                                                        list(f.tags or [])),
                                   since=f.since, until=f.until,
                                   statuses=visibility.recall_statuses(when), as_of=when)
        key = lexical_terms.tenant_key(rt.pii, conn, who.tenant, create=False)
        terms = lexical_terms.query(key, query) if key is not None else None
        # the dense side (embed the query, then its nearest rows) beside the lexical side,
        # started once this thread's Python work before its SQL is done (the two threads
        # share the GIL; this one waits on the database from here on)
        lexical_done = threading.Event()
        dense = _dense_beside(rt, who.tenant, query, where, params, n, lexical_done)
        try:
            trows = (text_candidates(conn, terms, where, params, n)
                     if terms is not None else [])  # no secret yet: no keyed terms either
        except BaseException:
            lexical_done.set()
            dense.settle()  # no work of this recall outlives it
            raise
        lexical_done.set()
        qvec, vrows = dense.result()
        if vrows is None:  # this connection was free first, or no spare one was
            vrows = vector_candidates(conn, qvec, where, params, n,
                                      ef_search=rt.settings.hnsw_ef_search)
        candidates = {r["id"]: r for r in (*vrows, *trows)}
        meta = {i: (r["created_at"], r["pinned"]) for i, r in candidates.items()}
        vh = [(r["id"], 1.0 - float(r["distance"])) for r in vrows]
        th = [(r["id"], float(r["score"])) for r in trows]
        now, w = datetime.now(UTC), rt.weights
        tmax = float(trows[0]["qmax"]) if trows else None
        boosted = [i for i, r in candidates.items() if r["rank_boost"]]  # librarian's facts
        boost = store_librarian.boosts(conn, who.tenant, boosted) if boosted else {}
        fused = fuse(vh, th, meta, now, w, text_max=tmax, boosts=boost)
        if rt.settings.recall_context and w.context and fused:
            # conversation context: the best hits' neighbours in remembered order
            # the candidates' conversations: the anchors', and the hold's (ranking.py)
            conv = neighbours.conversations_of(candidates.values())
            nrows = neighbours.adjacent(
                conn, where, params, [(x.id, meta[x.id][0]) for x in fused[:w.context_anchors]],
                window=w.context_window,
                max_gap=timedelta(seconds=rt.settings.recall_context_gap_seconds), known=conv)
            near: dict[Any, list[tuple[Any, int]]] = {}
            for r in nrows:
                near.setdefault(r["anchor"], []).append((r["id"], int(r["offset"])))
                meta.setdefault(r["id"], (r["created_at"], r["pinned"]))
                conv.setdefault(r["id"], conv[r["anchor"]])  # a turn of its anchor's
            if near:  # without lent turns the fusion is the plain one already
                fused = fuse(vh, th, meta, now, w, text_max=tmax, neighbours=near,
                             conversations=conv, boosts=boost)
        if rt.settings.recall_multihop and fused:  # the second step (recall/multihop.py)
            fused = multihop.second_step(
                conn, fused, qvec, terms, where, params, n, now, w,
                hits=rt.settings.recall_multihop_hits, expand=rt.settings.recall_multihop_terms,
                weight=rt.settings.recall_multihop_weight * multihop.gate(th, tmax, w),
                ef_search=rt.settings.hnsw_ef_search)
        reranker = rerankers.configured(rt.settings)
        if reranker is not None and fused:
            depth = max(k, rt.settings.recall_rerank_depth)
            head = memory_store.by_ids(conn, who.tenant, [x.id for x in fused[:depth]], touch=False)
            fused = rerank(fused, {r["id"]: r["content"] for r in head}, query, reranker,
                           depth=depth)
        fused = fused[:k]
        ids = [x.id for x in fused]
        if not ids:
            return []
        rows = memory_store.by_ids(conn, who.tenant, ids, touch=False)
        by_id = {m.id: m for m in visibility.view(
            rt, conn, who, visibility.recall_purpose(when), tr=tr, as_of=when).render(
            [Memory.from_row(r) for r in rows], reveal=reveal, request_id=request_id)}
    if touch:  # access statistics: a short transaction of its own, off the read path
        with rt.db.transaction(who.tenant) as conn:
            memory_store.touch(conn, who.tenant, ids)
    return [Hit(memory=by_id[x.id], score=x.score, similarity=x.similarity,
                vector_rank=x.vector_rank, text_rank=x.text_rank)
            for x in fused if x.id in by_id]
