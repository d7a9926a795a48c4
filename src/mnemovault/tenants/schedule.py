"""The background jobs of a serving process: the outbox worker, the periodic purge and
the PII watch.

:class:`Background` runs up to three daemon threads until :meth:`Background.stop`:

* the outbox worker: :func:`mnemovault.tenants.worker.process_pending` every
  ``MNEMOVAULT_WORKER_POLL_SECONDS`` (default 5);
* the purge: :func:`mnemovault.tenants.lifecycle.purge_expired` once
  ``purge_delay_seconds`` after start (default 60), then every
  ``MNEMOVAULT_TENANT_PURGE_INTERVAL_HOURS`` (default 6; 0 turns the in-process purge off).
  Every process may run it: a PostgreSQL advisory lock lets one purge at a time, the
  others skip that round.

A plain thread loop rather than APScheduler: fixed intervals need no cron syntax and no
job store, and the advisory lock (not the scheduler) is what keeps processes apart.
``mnemovault serve`` runs one around the HTTP server; ``mnemovault worker`` runs one alone.
Failures are logged (ids and error kinds only) and the loop goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from mnemovault.pii import watch
from mnemovault.runtime import Runtime
from mnemovault.tenants import lifecycle, worker

log = logging.getLogger(__name__)


class Background:
    """The outbox worker and the purge schedule as daemon threads (a context manager)."""

    def __init__(self, rt: Runtime, *, poll_seconds: float | None = None,
                 purge_interval_hours: float | None = None,
                 purge_delay_seconds: float = 60.0,
                 watch_interval_hours: float | None = None,
                 watch_delay_seconds: float | None = None) -> None:
        s = rt.settings
        self.rt = rt
        self.poll = s.worker_poll_seconds if poll_seconds is None else poll_seconds
        hours = s.tenant_purge_interval_hours if purge_interval_hours is None \
            else purge_interval_hours
        self.purge_interval = hours * 3600.0
        self.purge_delay = purge_delay_seconds
        hours = s.pii_watch_interval_hours if watch_interval_hours is None \
            else watch_interval_hours
        self.watch_interval = hours * 3600.0
        self.watch_delay = s.pii_watch_delay_seconds if watch_delay_seconds is None \
            else watch_delay_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.runs = {"outbox": 0, "purge": 0, "pii_watch": 0}

    def start(self) -> Background:
        if self._threads:
            return self
        self._stop.clear()
        loops: list[tuple[str, Callable[[], None]]] = [("outbox", self._outbox_loop)]
        if self.purge_interval > 0:
            loops.append(("purge", self._purge_loop))
        if self.watch_interval > 0:
            loops.append(("pii-watch", self._watch_loop))
        for name, target in loops:
            t = threading.Thread(target=target, name=f"mnemovault-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def __enter__(self) -> Background:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _outbox_loop(self) -> None:
        while not self._stop.is_set():
            try:
                worker.process_pending(self.rt)
            except Exception as exc:
                log.error("outbox worker pass failed: %s", type(exc).__name__)
            self.runs["outbox"] += 1
            self._stop.wait(self.poll)

    def _purge_loop(self) -> None:
        delay = self.purge_delay
        while not self._stop.wait(delay):
            try:
                result = lifecycle.purge_expired(self.rt)
                if result["purged"]:
                    log.info("purged %d expired tenant(s)", len(result["purged"]))
            except Exception as exc:
                log.error("tenant purge failed: %s", type(exc).__name__)
            self.runs["purge"] += 1
            delay = self.purge_interval

    def _watch_loop(self) -> None:
        delay = self.watch_delay
        while not self._stop.wait(delay):
            try:
                result = watch.run_all(self.rt)
                if result.rewritten:
                    log.info("pii watch: rewrote %d record(s) in %d tenant(s)",
                             result.rewritten, len(result.tenants))
            except Exception as exc:
                log.error("pii watch failed: %s", type(exc).__name__)
            self.runs["pii_watch"] += 1
            delay = self.watch_interval
