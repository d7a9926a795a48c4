"""The console's sessions: an API key exchanged for a server-side session, in this process's
memory.

Why memory and not PostgreSQL. A session holds the API key it was opened with, so every
console request authenticates afresh through :meth:`MemoryVault.authenticate`, exactly as
an HTTP request with a bearer key does: a revoked key, a narrowed key or a soft-deleted
tenant takes effect on the console's next request, and the console has no second idea of
who may do what. Keeping a key's token in a database table would store a secret the API
otherwise never stores (only its hash), and looking a session up before its tenant is known
would need another path around row-level security. The limitation, documented in
``docs/console.md``: sessions end when the server restarts, and with several server
processes behind a balancer a session lives in one of them (pin the console to one process,
or sign in again).

A session ends after ``console_idle_minutes`` without a request and
``console_absolute_hours`` after sign-in, whichever comes first, and at sign-out. Only the
SHA-256 of its id is kept as the lookup key; the id travels in the cookie alone. Each
session has its own CSRF token (the synchronizer-token pattern, OWASP CSRF Prevention Cheat
Sheet), compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_SESSIONS = 10_000
"""Sessions kept at most; the least recently used goes first beyond it."""
MAX_RECEIPTS = 1_000
"""Erasure receipts kept per tenant for download (the newest)."""


@dataclass
class Session:
    """One signed-in key: its token (to authenticate each request), tenant and key id,
    the CSRF token of its forms, when it began and was last used (monotonic seconds), and
    one-time messages for the next page (``flash``)."""

    token: str
    tenant: str
    key_id: str | None
    csrf: str
    created: float
    seen: float
    flash: list[dict[str, Any]] = field(default_factory=list)

    def csrf_ok(self, given: str | None) -> bool:
        """Whether ``given`` is this session's CSRF token (constant-time)."""
        return bool(given) and hmac.compare_digest(str(given).encode(), self.csrf.encode())


def _hash(sid: str) -> bytes:
    return hashlib.sha256(sid.encode()).digest()


class SessionStore:
    """Sessions by id, thread-safe (FastAPI runs sync routes in a thread pool).
    ``clock`` (monotonic seconds) is replaceable for tests of the timeouts."""

    def __init__(self, *, idle_seconds: float, absolute_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()
        self._receipts: dict[str, OrderedDict[int, dict[str, Any]]] = {}

    def create(self, token: str, tenant: str, key_id: str | None) -> tuple[str, Session]:
        """A new session for ``token``: ``(session id for the cookie, session)``."""
        sid = secrets.token_urlsafe(32)
        now = self.clock()
        s = Session(token=token, tenant=tenant, key_id=key_id,
                    csrf=secrets.token_urlsafe(32), created=now, seen=now)
        with self._lock:
            self._sessions[_hash(sid)] = s
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return sid, s

    def get(self, sid: str | None) -> Session | None:
        """The live session of ``sid`` (its idle clock restarted), or None: unknown,
        signed out, or past its idle or absolute timeout (then it is removed)."""
        if not sid:
            return None
        h = _hash(sid)
        now = self.clock()
        with self._lock:
            s = self._sessions.get(h)
            if s is None:
                return None
            if now - s.seen > self.idle_seconds or now - s.created > self.absolute_seconds:
                del self._sessions[h]
                return None
            s.seen = now
            self._sessions.move_to_end(h)
            return s

    def revoke(self, sid: str | None) -> bool:
        """End the session of ``sid``; whether there was one."""
        if not sid:
            return False
        with self._lock:
            return self._sessions.pop(_hash(sid), None) is not None

    def revoke_key(self, tenant: str, key_id: str) -> int:
        """End every session opened with the key ``key_id`` of ``tenant`` (the key was
        revoked); how many."""
        with self._lock:
            gone = [h for h, s in self._sessions.items()
                    if s.tenant == tenant and s.key_id == key_id]
            for h in gone:
                del self._sessions[h]
        return len(gone)

    def __len__(self) -> int:
        return len(self._sessions)

    # -- erasure receipts issued through the console, for download ----------------------
    def keep_receipt(self, tenant: str, receipt: dict[str, Any]) -> None:
        """Keep ``receipt`` (by its ``audit_seq``) for the tenant's later download."""
        with self._lock:
            kept = self._receipts.setdefault(tenant, OrderedDict())
            kept[int(receipt["audit_seq"])] = receipt
            while len(kept) > MAX_RECEIPTS:
                kept.popitem(last=False)

    def receipt(self, tenant: str, audit_seq: int) -> dict[str, Any] | None:
        """The receipt of the erase audited at ``audit_seq``, if this process issued it."""
        with self._lock:
            return self._receipts.get(tenant, OrderedDict()).get(audit_seq)
