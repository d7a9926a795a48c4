"""KEK rotation on a live deployment (SPEC section 3; issue 29).

``mnemovault kek rotate [--retire]`` may run while servers, workers and other CLI commands
use the same database and key file. What makes that safe:

1. **Every process follows the key file.** :class:`~mnemovault.pii.crypto.KeyRing` picks
   the version to wrap under from the file's newest state (one ``stat`` per wrap) and
   re-reads the file when it meets a version it lacks, so a server started before the
   rotation keeps answering and wraps new data keys under the new version.
2. **The new version is added before anything uses it, the old ones stay.** The key file
   is replaced atomically (temp file, fsync, rename, fsync of the directory) with the new
   version current and every old version still in it; only then are the tenants rewrapped,
   one per transaction (its secret, its DEKs and its ``KEK_ROTATE`` audit row commit
   together: on Citus one shard, no two-phase commit). Each tenant's audit rows go to the
   JSON Lines mirror as soon as its transaction commits.
3. **Retire only what nothing uses, checked under a lock writers take.** A writer takes the
   wrap lock in share mode before it picks a KEK version
   (:func:`mnemovault.store.pii.lock_wrap`), also before it creates a content key in the
   key store (:mod:`mnemovault.pii.keystore`). The retire takes it exclusively: once it holds
   it, every wrap under an old version made by a writer that read the key file before the
   rotation has committed (a content key is in the key store before its writer commits);
   it then checks that no data key, tenant secret or content key is left under another
   version than the new one. If some are (such late writes), it lets go, rewraps
   their tenants and checks again; when none are, it rewrites the key file without the old
   versions *while still holding the lock*, so no writer can wrap under them any more.
4. **One rotation at a time** (a session advisory lock on the owner's connection; a second
   one is refused with :class:`~mnemovault.errors.Conflict`).

Interrupted at any point (an error, SIGKILL, a lost connection), a rotation leaves every
value readable: the old versions stay in the key file until the check of step 3 passed,
and each tenant is wholly under its old or its new version. Running it again finishes it
(it adds one more version and rewraps whatever is not under that one; ``--retire`` then
destroys every older version, those of the interrupted run included).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from mnemovault.audit import log as audit
from mnemovault.errors import Conflict, Unavailable
from mnemovault.pii.crypto import Sealed, dek_aad, open_sealed, seal, secret_aad
from mnemovault.runtime import Runtime
from mnemovault.store import pii as store

log = logging.getLogger(__name__)

# the retire's exclusive lock waits this long for writers in flight (new writers queue
# behind it meanwhile), and rewraps late writes at most this many rounds
RETIRE_LOCK_TIMEOUT_MS = 5000
RETIRE_ROUNDS = 20

Conn = psycopg.Connection[Any]


def rotate_kek(rt: Runtime, *, retire: bool = False) -> dict[str, Any]:
    """Operator path (the database owner's connection): make a new KEK version current and
    rewrap every DEK and tenant secret under it, one tenant per transaction, then every
    content key of the key store (each replaced atomically on its own); ciphertexts are
    not touched. With ``retire`` the other versions are then destroyed (removed from the key
    file), so a wrapped DEK left in old table pages, WAL or a backup can no longer be
    opened; only once a final check under the wrap lock finds nothing under them (module
    docstring). Safe while other processes read and write.

    Returns ``{"kek_version": new, "rewrapped": DEKs rewrapped, "tenants": tenants
    rewrapped, "content_keys": key-store keys rewrapped, "retired": [destroyed versions]}``.

    Raises:
        ConfigError: the KEKs come from ``MNEMOVAULT_KEK`` (no key file to rotate), or the
            key file cannot be read back; nothing was changed.
        Conflict: another rotation is running; nothing was changed.
        Unavailable: the retire could not get its lock, or late writes kept coming, for
            :data:`RETIRE_ROUNDS` rounds (every value is readable; run it again).
    """
    from psycopg.rows import dict_row

    from mnemovault.store.db import owner_connection

    keyring = rt.keyring
    keyring.refresh()
    counts: dict[str, int] = {}
    with owner_connection(rt.db.url, row_factory=dict_row, autocommit=True) as conn:
        if not store.try_lock_rotation(conn):
            raise Conflict("kek: another KEK rotation is running; nothing was changed")
        new = keyring.add_version()  # the old versions stay in the file
        log.info("kek: version %d is current; rewrapping", new)
        _rewrap(rt, conn, new, store.tenants_not_under(conn, new), counts, retire)
        content_keys = rt.sealer.store.rewrap(new)
        log.info("kek: %d content key(s) in the key store rewrapped", content_keys)
        retired = _retire(rt, conn, new, counts) if retire else []
    return {"kek_version": new, "rewrapped": sum(counts.values()),
            "tenants": len(counts), "content_keys": content_keys, "retired": retired}


def _rewrap(rt: Runtime, conn: Conn, new: int, tenants: list[str], counts: dict[str, int],
            retire: bool) -> None:
    for t in tenants:
        n = _rewrap_tenant(rt, conn, t, new, retire)
        if n is not None:
            counts[t] = counts.get(t, 0) + n
            _after_commit(rt, t)


def _rewrap_tenant(rt: Runtime, conn: Conn, t: str, new: int, retire: bool) -> int | None:
    """Rewrap ``t``'s secret and DEKs under ``new`` in one transaction with its audit row;
    the number of DEKs rewrapped, or None when nothing was left to do."""
    keyring = rt.keyring
    new_key = keyring.kek(new)
    with conn.transaction():
        secrets_done = 0
        for r in store.secrets_not_under(conn, new, t):
            secret = open_sealed(keyring.kek(r["kek_version"]),
                                 Sealed(bytes(r["nonce"]), bytes(r["wrapped_secret"])),
                                 secret_aad(t, r["kek_version"]))
            sealed = seal(new_key, secret, secret_aad(t, new))
            store.rewrap_secret(conn, t, new, sealed.nonce, sealed.ciphertext)
            secrets_done += 1
        n = 0
        for r in store.deks_not_under(conn, new, t):
            ph = r["placeholder"]
            dek = open_sealed(keyring.kek(r["kek_version"]),
                              Sealed(bytes(r["nonce"]), bytes(r["wrapped_dek"])),
                              dek_aad(t, ph, r["kek_version"]))
            sealed = seal(new_key, dek, dek_aad(t, ph, new))
            store.rewrap_dek(conn, t, ph, new, sealed.nonce, sealed.ciphertext)
            n += 1
        if not (n or secrets_done):
            return None
        store.set_tenant(conn, t)
        audit.append(conn, tenant=t, operation="KEK_ROTATE", actor="operator",
                     details={"kek_version": new, "rewrapped": n,
                              "secret": bool(secrets_done), "retire": retire})
    return n


def _retire(rt: Runtime, conn: Conn, new: int, counts: dict[str, int]) -> list[int]:
    """Destroy every version but ``new`` once nothing is wrapped under them, checked and
    done while holding the wrap lock exclusively (module docstring, step 3)."""
    keyring = rt.keyring
    waited = 0
    for _ in range(RETIRE_ROUNDS):
        try:
            with conn.transaction():
                store.lock_retire(conn, RETIRE_LOCK_TIMEOUT_MS)
                left = store.tenants_not_under(conn, new)
                late_keys = rt.sealer.store.not_under(new)  # the key store too, same lock
                if not left and not late_keys:
                    old = sorted(v for v in keyring.keys if v != new)
                    keyring.retire(old)  # the key file is replaced while the lock is held
                    log.info("kek: destroyed versions %s", old)
                    return old
        except psycopg.errors.LockNotAvailable:
            waited += 1
            log.warning("kek: writers held the wrap lock for %d ms; trying again",
                        RETIRE_LOCK_TIMEOUT_MS)
            continue
        log.info("kek: %d tenant(s) and %d content key(s) were written under an old version "
                 "during the rotation; rewrapping them", len(left), len(late_keys))
        _rewrap(rt, conn, new, left, counts, True)
        rt.sealer.store.rewrap(new)
    raise Unavailable(
        f"kek: the old versions were not retired (in {RETIRE_ROUNDS} rounds, writers held "
        f"the wrap lock {waited} times or kept writing under an old version); every value "
        f"is readable and version {new} is current: run `mnemovault kek rotate --retire` "
        "again")


def _after_commit(rt: Runtime, tenant: str) -> None:
    """The database's after-commit hooks for ``tenant`` (its JSON Lines audit mirror), as
    :meth:`~mnemovault.store.db.Database.transaction` runs them: the rotation commits on
    the owner's connection, which runs none."""
    for hook in rt.db.after_commit:
        try:
            hook(tenant)
        except Exception:  # a mirror failure never undoes a commit
            log.exception("after-commit hook failed for a tenant")
