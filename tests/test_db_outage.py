"""The pool when the database goes away and comes back (issue 29 item 4, issue 22 item 3).

The application pool reaches the session's embedded server through a TCP proxy of this
test's own; stopping the proxy (listener closed, every connection cut) is the database
going down, starting it again on the same port is the database back after a restart."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mnemovault.api import create_app
from mnemovault.errors import Unavailable
from mnemovault.store.db import Database
from mnemovault.vault import MemoryVault


class Proxy:
    """TCP on 127.0.0.1 -> the server's unix socket; ``stop`` cuts everything."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.port = ls.getsockname()[1]
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the accept() in the other thread
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.fixture
def proxied(vault: MemoryVault) -> Iterator[tuple[Database, Proxy]]:
    params = conninfo_to_dict(vault.db.app_url)
    sock = Path(str(params["host"])) / f".s.PGSQL.{params.get('port') or 5432}"
    proxy = Proxy(str(sock))
    proxy.start()
    app_url = make_conninfo(**{**params, "host": "127.0.0.1", "port": str(proxy.port)})
    db = Database(vault.db.url, app_role=vault.db.app_role, app_url=app_url, pool_max_size=4,
                  connect_timeout=1.0, pool_timeout=30.0)
    db.open()
    try:
        yield db, proxy
    finally:
        proxy.stop()
        db.close()


def _fill_pool(db: Database, n: int) -> None:
    """Make the pool hold ``n`` connections (``n`` transactions open at once)."""
    barrier = threading.Barrier(n)

    def hold() -> None:
        with db.unscoped() as conn:
            conn.execute("SELECT 1")
            barrier.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_a_down_database_answers_unavailable_within_seconds_not_the_pool_timeout(
        proxied: tuple[Database, Proxy], vault: MemoryVault, tenant: str) -> None:
    db, proxy = proxied
    db.ping()
    proxy.stop()
    t0 = time.monotonic()
    with pytest.raises(Unavailable):
        db.ping()
    assert time.monotonic() - t0 < 4.0  # pool_timeout is 30 s
    mv = MemoryVault(db, vault.embedder, vault.settings, vault.keyring)
    client = TestClient(create_app(mv), raise_server_exceptions=False)
    t0 = time.monotonic()
    r = client.get("/health")
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    assert time.monotonic() - t0 < 4.0
    t0 = time.monotonic()
    with pytest.raises(Unavailable), db.transaction(tenant) as conn:
        conn.execute("SELECT 1")
    assert time.monotonic() - t0 < 4.0


def test_after_a_restart_no_request_fails_on_a_stale_pooled_connection(
        proxied: tuple[Database, Proxy]) -> None:
    db, proxy = proxied
    _fill_pool(db, 4)  # four pooled connections, all cut by the restart
    proxy.stop()
    time.sleep(1.5)  # idle for longer than CHECK_AFTER_IDLE_SECONDS
    proxy.start()  # back, on the same port
    failures = 0
    for _ in range(12):
        try:
            db.ping()
        except Unavailable:
            failures += 1
    assert failures == 0


def test_a_busy_pool_still_waits_for_a_connection(proxied: tuple[Database, Proxy]) -> None:
    """The fast failure is for a server that does not answer: with every connection in use
    for longer than connect_timeout, a request waits for one (the server answers)."""
    db, _ = proxied
    release = threading.Event()
    held = threading.Barrier(5)

    def hold() -> None:
        with db.unscoped() as conn:
            conn.execute("SELECT 1")
            held.wait(10)
            release.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    held.wait(10)
    timer = threading.Timer(2.5, release.set)  # longer than connect_timeout (1 s)
    timer.start()
    t0 = time.monotonic()
    db.ping()
    assert time.monotonic() - t0 >= 2.0
    for t in threads:
        t.join(10)
