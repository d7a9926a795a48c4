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
import json
import logging
import os
import secrets
import struct
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mnemovault.errors import ConfigError, MnemoError

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


@dataclass
class KeyRing:
    """KEK versions (version -> 32-byte key) and the current version. Never stored in the
    database."""

    keys: dict[int, bytes]
    current: int
    path: Path | None = None
    _source: str = field(default="memory")
    created: bool = False

    def kek(self, version: int) -> bytes:
        """Raises:
            DecryptionError: the version was retired (destroyed) or never existed."""
        try:
            return self.keys[version]
        except KeyError:
            raise DecryptionError(
                f"vault: KEK version {version} is not available (retired or unknown)"
            ) from None

    @property
    def current_key(self) -> bytes:
        return self.keys[self.current]

    def add_version(self) -> int:
        """Create a new KEK version and make it current (saved if file-backed)."""
        version = max(self.keys) + 1
        self.keys[version] = secrets.token_bytes(KEY_BYTES)
        self.current = version
        self.save()
        return version

    def retire(self, versions: list[int]) -> None:
        """Destroy KEK versions: remove them from the key file for good."""
        if self.current in versions:
            raise ConfigError("kek: the current KEK version cannot be retired")
        for v in versions:
            self.keys.pop(v, None)
        self.save()

    def save(self) -> None:
        if self.path is None:
            if self._source == "env":
                raise ConfigError(
                    "kek: MNEMOVAULT_KEK comes from the environment; rotate it by moving to a "
                    "key file (MNEMOVAULT_KEK_FILE)")
            return
        body = {"current": self.current,
                "keys": {str(v): base64.b64encode(k).decode() for v, k in self.keys.items()}}
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, *, env_value: str | None, key_file: Path) -> KeyRing:
        """From ``MNEMOVAULT_KEK`` if set, else the key file (created 0600 if missing).

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
            ring = cls({1: secrets.token_bytes(KEY_BYTES)}, 1, key_file, "file", created=True)
            ring.save()
            log.warning("created the key-encryption key file %s (mode 0600): back it up; "
                        "without it the vault cannot be opened", key_file)
            return ring
        mode = key_file.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(f"kek: {key_file} must not be readable by group or others "
                              f"(mode {oct(mode)}); chmod 600 it", field="kek_file")
        try:
            body = json.loads(key_file.read_text())
            keys = {int(v): base64.b64decode(k) for v, k in body["keys"].items()}
            current = int(body["current"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"kek: {key_file} is not a valid key file "
                              f"({type(exc).__name__})", field="kek_file") from None
        if current not in keys or any(len(k) != KEY_BYTES for k in keys.values()):
            raise ConfigError(f"kek: {key_file} has a bad current version or key length",
                              field="kek_file")
        return cls(keys, current, key_file, "file")
