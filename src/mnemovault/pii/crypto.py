"""Envelope encryption for the PII vault, and the key-encryption keys (KEKs).

Each original value is encrypted with AES-256-GCM (NIST SP 800-38D) under its own random
256-bit data key (DEK); the DEK is wrapped (AES-256-GCM again) under the tenant's current
KEK version. Associated data binds what a ciphertext belongs to, so a ciphertext or a
wrapped DEK moved to another placeholder, tenant or KEK version fails to decrypt:

- value:       AAD = enc("mnemovault/pii/value/v1", tenant, placeholder)
- wrapped DEK: AAD = enc("mnemovault/pii/dek/v1", tenant, placeholder, kek_version)
- tenant secret (the HMAC key for placeholders and fingerprints), wrapped like a DEK:
               AAD = enc("mnemovault/pii/tenant-secret/v1", tenant, kek_version)

``enc`` is an unambiguous encoding: each field as a 4-byte big-endian length and its UTF-8
bytes. KEKs never enter the database: they come from ``MNEMOVAULT_KEK`` (base64 of 32 bytes,
version 1) or a key file (``MNEMOVAULT_KEK_FILE``, default ``<data_dir>/kek.json``, created
with mode 0600 on first use): ``{"current": 2, "keys": {"1": "<b64>", "2": "<b64>"}}``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mnemovault.errors import ConfigError, MnemoError, Unavailable

log = logging.getLogger(__name__)

NONCE_BYTES = 12
KEY_BYTES = 32


class DecryptionError(MnemoError):
    """A ciphertext or wrapped key failed authentication (tampered, moved, or wrong key)."""

    code = "decryption"
    status = 500


def encode_aad(*fields: str) -> bytes:
    """Length-prefixed concatenation: no two field lists encode to the same bytes."""
    out = bytearray()
    for f in fields:
        b = f.encode("utf-8")
        out += struct.pack(">I", len(b)) + b
    return bytes(out)


def value_aad(tenant: str, placeholder: str) -> bytes:
    return encode_aad("mnemovault/pii/value/v1", tenant, placeholder)


def dek_aad(tenant: str, placeholder: str, kek_version: int) -> bytes:
    return encode_aad("mnemovault/pii/dek/v1", tenant, placeholder, str(kek_version))


def secret_aad(tenant: str, kek_version: int) -> bytes:
    return encode_aad("mnemovault/pii/tenant-secret/v1", tenant, str(kek_version))


@dataclass(frozen=True)
class Sealed:
    """Nonce (12 bytes) and ciphertext with its 16-byte GCM tag."""

    nonce: bytes
    ciphertext: bytes


def seal(key: bytes, plaintext: bytes, aad: bytes) -> Sealed:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return Sealed(nonce, AESGCM(key).encrypt(nonce, plaintext, aad))


def open_sealed(key: bytes, sealed: Sealed, aad: bytes) -> bytes:
    """Raises:
        DecryptionError: authentication failed."""
    try:
        return AESGCM(key).decrypt(sealed.nonce, sealed.ciphertext, aad)
    except InvalidTag:
        raise DecryptionError("vault: authentication failed (tampered or moved data)") from None


class KekUnavailable(DecryptionError):
    """A wrapped key names a KEK version the key ring does not have (retired or unknown),
    also after re-reading the key file."""

    code = "kek_unavailable"


FileStamp = tuple[int, int, int, int]  # (st_dev, st_ino, st_mtime_ns, st_size)


def _stamp(st: os.stat_result) -> FileStamp:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class _State:
    keys: dict[int, bytes]
    current: int
    stamp: FileStamp | None


class KeyRing:
    """KEK versions (version -> 32-byte key) and the current version. Never stored in the
    database.

    A file-backed ring follows its key file: every process that uses the file (a running
    ``serve``, a worker, the CLI) notices a rotation made by another one. Before choosing
    the version to wrap under (:meth:`wrapping_key`) the file's identity (device, inode,
    mtime, size: one ``stat``) is compared with the one loaded, and a change reloads it; a
    wrapped key under a version the ring lacks (:meth:`kek`) re-reads the file once before
    failing; and a lookup re-checks the file at most every :data:`RECHECK_SECONDS`, so a
    retired version leaves a process's memory soon after it left the file. A key file that
    changed and cannot be read back (removed, malformed, readable by others) keeps the keys
    loaded for unwrapping, with a warning, but nothing new is wrapped until it can be read
    (the version this process knows may have been retired). The file is only ever replaced
    whole (temp file, fsync, rename, fsync
    of the directory), so a reader sees the old file or the new one, never a torn one.

    Thread-safe: the keys, current version and file identity are one immutable state that
    a reload swaps."""

    RECHECK_SECONDS = 1.0

    def __init__(self, keys: dict[int, bytes], current: int, path: Path | None = None,
                 source: str = "memory", *, created: bool = False,
                 stamp: FileStamp | None = None) -> None:
        if current not in keys:
            raise ConfigError("kek: the current KEK version has no key", field="kek")
        self.path = path
        self._source = source
        self.created = created
        self._state = _State(dict(keys), current, stamp)
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._warned: FileStamp | None = None
        self._unreadable = False  # the file changed and could not be read back

    # -- reading --------------------------------------------------------------------------
    @property
    def keys(self) -> dict[int, bytes]:
        """The versions this ring holds now (a copy)."""
        return dict(self._state.keys)

    @property
    def current(self) -> int:
        """The version new keys are wrapped under (as last loaded; see :meth:`wrapping_key`
        for the fresh one)."""
        return self._state.current

    @property
    def current_key(self) -> bytes:
        state = self._state
        return state.keys[state.current]

    def kek(self, version: int) -> bytes:
        """The KEK of ``version``; on a miss the key file is re-read once (a rotation by
        another process) before giving up.

        Raises:
            KekUnavailable: the version was retired (destroyed) or never existed."""
        if time.monotonic() - self._checked >= self.RECHECK_SECONDS:
            self.refresh()
        key = self._state.keys.get(version)
        if key is None and self.refresh():
            key = self._state.keys.get(version)
        if key is None:
            raise KekUnavailable(
                f"vault: KEK version {version} is not available (retired or unknown)")
        return key

    def wrapping_key(self) -> tuple[int, bytes]:
        """``(version, key)`` to wrap a new data key or tenant secret under: the newest
        current version of the key file (re-checked now), from one consistent state.

        Raises:
            Unavailable: the key file changed and cannot be read back (wrapping under the
                version loaded before could use one a rotation has just destroyed)."""
        self.refresh()
        if self._unreadable:
            raise Unavailable(f"kek: the key file {self.path} changed and cannot be read; "
                              "nothing is encrypted until it can")
        state = self._state
        return state.current, state.keys[state.current]

    def refresh(self) -> bool:
        """Reload the key file if it changed since it was loaded (one ``stat`` otherwise).
        Returns whether the ring changed. A file that cannot be read back keeps the keys
        loaded (a warning once per file identity)."""
        self._checked = time.monotonic()
        if self.path is None:
            return False
        try:
            stamp = _stamp(os.stat(self.path))
        except OSError:
            stamp = None
        if stamp is not None and stamp == self._state.stamp:
            self._unreadable = False
            return False
        with self._lock:
            if stamp is not None and stamp == self._state.stamp:
                return True  # another thread reloaded it meanwhile
            try:
                state = _read_file(self.path)
            except (OSError, ConfigError) as exc:
                self._unreadable = True
                if stamp != self._warned:
                    self._warned = stamp
                    log.warning("kek: cannot re-read the key file %s (%s); keeping the keys "
                                "loaded", self.path, exc)
                return False
            changed = (state.keys != self._state.keys or state.current != self._state.current)
            self._state = state
            self._unreadable = False
            if changed:
                log.info("kek: reloaded %s (current version %d, versions %s)", self.path,
                         state.current, sorted(state.keys))
            return changed

    # -- changing (the rotation's steps) -------------------------------------------------
    def _require_file(self) -> Path:
        if self.path is None:
            if self._source == "env":
                raise ConfigError(
                    "kek: MNEMOVAULT_KEK comes from the environment; rotate it by moving to a "
                    "key file (MNEMOVAULT_KEK_FILE)", field="kek")
            raise ConfigError("kek: this key ring has no key file to rotate", field="kek")
        return self.path

    def add_version(self) -> int:
        """Create a new KEK version and make it current: the key file is re-read, the new
        version added beside the old ones (which stay until :meth:`retire`) and the file
        replaced atomically. Nothing changes in memory unless the file was written.

        Raises:
            ConfigError: the ring is not file-backed (``MNEMOVAULT_KEK``), or the key file
                cannot be read back."""
        path = self._require_file()
        with self._lock:
            base = _read_file(path)
            version = max(base.keys) + 1
            keys = {**base.keys, version: secrets.token_bytes(KEY_BYTES)}
            self._state = _State(keys, version, _write_file(path, keys, version))
        return version

    def retire(self, versions: list[int]) -> None:
        """Destroy KEK versions: the key file is re-read and replaced (atomically) without
        them. The caller has made sure that nothing is wrapped under them any more
        (:func:`mnemovault.pii.rotation.rotate_kek`).

        Raises:
            ConfigError: a version to retire is the current one, or the ring is not
                file-backed."""
        path = self._require_file()
        with self._lock:
            base = _read_file(path)
            if base.current in versions:
                raise ConfigError("kek: the current KEK version cannot be retired")
            keys = {v: k for v, k in base.keys.items() if v not in versions}
            self._state = _State(keys, base.current, _write_file(path, keys, base.current))

    # -- loading --------------------------------------------------------------------------
    @classmethod
    def load(cls, *, env_value: str | None, key_file: Path) -> KeyRing:
        """From ``MNEMOVAULT_KEK`` if set, else the key file (created 0600 if missing; two
        processes starting at once on a fresh directory agree on one file).

        Raises:
            ConfigError: a malformed key, a key file readable by others, or a key file
                path that names a directory.
        """
        if env_value:
            try:
                key = base64.b64decode(env_value, validate=True)
            except ValueError:
                key = b""
            if len(key) != KEY_BYTES:
                raise ConfigError("MNEMOVAULT_KEK: must be base64 of exactly 32 bytes",
                                  field="MNEMOVAULT_KEK")
            return cls({1: key}, 1, None, "env")
        key_file = Path(key_file)
        if key_file.is_dir():  # e.g. Path(""), the working directory
            raise ConfigError(f"kek_file: {key_file} is a directory; MNEMOVAULT_KEK_FILE must "
                              "name a key file (unset: <data dir>/kek.json)", field="kek_file")
        if not key_file.exists():
            key_file.parent.mkdir(parents=True, exist_ok=True)
            keys = {1: secrets.token_bytes(KEY_BYTES)}
            if _write_file(key_file, keys, 1, exclusive=True) is not None:
                log.warning("created the key-encryption key file %s (mode 0600): back it "
                            "up; without it the vault cannot be opened", key_file)
                state = _read_file(key_file)
                return cls(state.keys, state.current, key_file, "file", created=True,
                           stamp=state.stamp)
        state = _read_file(key_file)
        return cls(state.keys, state.current, key_file, "file", stamp=state.stamp)


def _read_file(path: Path) -> _State:
    """The key file's keys, current version and identity (one open file: what was parsed
    is what was stat'ed).

    Raises:
        ConfigError: readable by group or others, malformed, or a bad current version or
            key length.
        OSError: it cannot be opened."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        raw = f.read()
    mode = st.st_mode & 0o777
    if mode & 0o077:
        raise ConfigError(f"kek: {path} must not be readable by group or others "
                          f"(mode {oct(mode)}); chmod 600 it", field="kek_file")
    try:
        body = json.loads(raw)
        keys = {int(v): base64.b64decode(k) for v, k in body["keys"].items()}
        current = int(body["current"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"kek: {path} is not a valid key file "
                          f"({type(exc).__name__})", field="kek_file") from None
    if current not in keys or any(len(k) != KEY_BYTES for k in keys.values()):
        raise ConfigError(f"kek: {path} has a bad current version or key length",
                          field="kek_file")
    return _State(keys, current, _stamp(st))


def _write_file(path: Path, keys: dict[int, bytes], current: int, *,
                exclusive: bool = False) -> FileStamp | None:
    """Replace ``path`` by a key file of ``keys`` and ``current``: a temp file of its own
    (mode 0600) in the same directory, fsync, rename over ``path`` (``exclusive``: a hard
    link that fails if ``path`` exists, then None is returned and nothing changed), fsync
    of the directory. Temp files that a writer killed before its rename left behind (each a
    copy of the keys, retired versions included) are removed with it. Returns the new
    file's identity."""
    body = json.dumps({"current": current,
                       "keys": {str(v): base64.b64encode(k).decode()
                                for v, k in sorted(keys.items())}}).encode()
    st = write_private(path, body, exclusive=exclusive)
    if st is None:
        return None
    if not exclusive:  # a rotation killed before its rename left a copy of the keys
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return _stamp(st)


def write_private(path: Path, body: bytes, *,
                  exclusive: bool = False) -> os.stat_result | None:
    """Write ``body`` as ``path``, durably and readable by its owner only: a temp file of
    its own (mode 0600) in the same directory, fsync, rename over ``path`` (``exclusive``:
    a hard link that fails if ``path`` exists, then None is returned and nothing changed),
    fsync of the directory. Returns the new file's stat."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
            st = os.fstat(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return None
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(path.parent)
    return os.stat(path) if exclusive else st


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the entry lives in the directory)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
