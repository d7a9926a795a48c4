"""An embedder that lets concurrent callers share one model call (issue 29).

A server embeds each remember's content and each recall's query one request at a time, on
request threads that run side by side. A model call on the CPU costs far more per text
alone than in a batch (all-MiniLM-L6-v2, one torch thread: ~17 ms for one short text,
~7-9 ms a text in a batch of 4-32), and two calls at once compete for the same cores.
:class:`CoalescingEmbedder` is group commit for embeddings: a caller that finds the model
idle runs its own texts at once (a lone caller waits for nothing); callers that arrive
while it runs queue, and when it returns the oldest of them runs every queued text in one
call (up to ``max_batch`` texts) and hands each caller its own rows.

What each caller gets is what the inner embedder gives for its texts: the same model, the
same view, rows in the caller's order. A batch pads its texts to a common length under an
attention mask, so a vector can differ from the one computed alone in the last bits of a
float32 (~1e-7), as it already does between batch sizes of one bulk import. If a shared
call fails, each caller of it runs its own texts alone, so an error is the caller's own.
Calls of ``max_batch`` texts or more (an import's batches) go straight to the inner
embedder, without waiting for a turn.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from mnemovault.embed.base import Embedder

if TYPE_CHECKING:
    from mnemovault.embed.base import Vectors


class _Job:
    __slots__ = ("alone", "done", "result", "taken", "texts")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.taken = False  # in a call that runs (its own or another caller's)
        self.done = False
        self.result: Any = None
        self.alone = False  # the shared call failed: embed these texts alone


class CoalescingEmbedder:
    """Wraps ``inner`` so that concurrent :meth:`embed` calls share model calls: at most
    ``concurrency`` inner calls run at once; callers beyond that queue and are embedded
    together by the next free one, at most ``max_batch`` texts a call. ``model``,
    ``dimension`` and other public attributes are the inner embedder's."""

    def __init__(self, inner: Embedder, *, max_batch: int = 64, concurrency: int = 1) -> None:
        if max_batch < 1 or concurrency < 1:
            raise ValueError("max_batch and concurrency must be at least 1")
        self.inner = inner
        self.model = inner.model
        self.max_batch = max_batch
        self.concurrency = concurrency
        self._cv = threading.Condition()
        self._queue: list[_Job] = []
        self._running = 0
        self.calls = 0  # inner calls made for queued callers (for tests and benchmarks)
        self.shared = 0  # of them, calls that embedded more than one caller's texts

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: list[str]) -> Vectors:
        if not texts or len(texts) >= self.max_batch:
            return self.inner.embed(texts)
        job = _Job(list(texts))
        with self._cv:
            self._queue.append(job)
            while not job.done and (job.taken or self._running >= self.concurrency):
                self._cv.wait()
            if job.done:
                return self._finish(job)
            batch = self._take(job)
            self._running += 1
            self.calls += 1
            self.shared += len(batch) > 1
        try:
            self._run(batch)
        finally:
            with self._cv:
                self._running -= 1
                for j in batch:
                    j.done = True
                self._cv.notify_all()
        return self._finish(job)

    def _take(self, job: _Job) -> list[_Job]:
        """``job`` and the oldest other queued jobs, at most ``max_batch`` texts in all
        (``job`` alone if it is that large), out of the queue. Under the lock."""
        batch, size = [job], len(job.texts)
        for other in self._queue:
            if other is not job and size + len(other.texts) <= self.max_batch:
                batch.append(other)
                size += len(other.texts)
        for j in batch:
            j.taken = True
        self._queue = [j for j in self._queue if not j.taken]
        return batch

    def _run(self, batch: list[_Job]) -> None:
        if len(batch) == 1:
            try:
                batch[0].result = self.inner.embed(batch[0].texts)
            except BaseException as exc:  # handed to its caller by _finish
                batch[0].result = exc
            return
        try:
            vectors = self.inner.embed([t for j in batch for t in j.texts])
        except BaseException:
            for j in batch:
                j.alone = True
            return
        start = 0
        for j in batch:
            j.result = vectors[start:start + len(j.texts)]
            start += len(j.texts)

    def _finish(self, job: _Job) -> Vectors:
        if job.alone:
            return self.inner.embed(job.texts)
        if isinstance(job.result, BaseException):
            raise job.result
        return job.result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never dunders or private names (copy, pickle, probes)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CoalescingEmbedder({self.inner!r}, concurrency={self.concurrency})"
