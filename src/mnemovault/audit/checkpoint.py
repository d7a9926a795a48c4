"""Signed checkpoints: C2SP tlog-checkpoint bodies in C2SP signed-note envelopes, Ed25519.

Formats (https://c2sp.org/signed-note, https://c2sp.org/tlog-checkpoint):

* checkpoint body (the note text)::

      <origin>\\n
      <tree size, ASCII decimal, no leading zeros>\\n
      <base64 of the 32-byte RFC 9162 root hash>\\n
      [<extension line>\\n ...]       (optional, opaque, never empty)

* signed note: ``text || "\\n" || signature lines``, each signature line
  ``"— " || key name || " " || base64(key id || signature) || "\\n"`` (U+2014 em dash). The
  Ed25519 signature covers the text, final newline included, nothing else.
* key id: ``SHA-256(key name || 0x0A || 0x01 || 32-byte public key)[:4]`` (0x01 is the
  Ed25519 signature type).
* verifier key text (vkey): ``<name>+<8 hex key id>+<base64(0x01 || public key)>``; the
  Go ``sumdb/note`` private key text ``PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>``
  is read too, for interoperability and known-answer tests.

By convention (and by default here) a log signs its checkpoints under a key whose name
is the origin. Base64 is RFC 4648 section 4, padded, and decoded strictly.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "format_checkpoint_body",
    "generate_signing_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint_body",
    "parse_checkpoint_unverified",
    "public_key_bytes",
    "sign_checkpoint",
    "sign_note",
    "signing_public_key",
    "vkey",
    "write_public_key",
]

_SIG_PREFIX: Final[str] = "\u2014 "
_ED25519: Final[bytes] = b"\x01"
_MAX_SIGNATURES: Final[int] = 100
_SIZE_RE: Final = re.compile(r"(0|[1-9][0-9]*)\Z")


class CheckpointError(ValueError):
    """A malformed note or checkpoint, a bad or missing signature, or an unusable key."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A parsed checkpoint.

    Attributes:
        origin: the log's unique identity line, for example ``"mnemovault/audit/acme"``.
        size: tree size (number of leaves; rows ``seq 1 .. size``).
        root_hash: the 32-byte RFC 9162 root of the first ``size`` leaves.
        extensions: extension lines after the root, without newlines.
        signed_by: key name whose signature was verified, or None if not verified.
    """

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()
    signed_by: str | None = None

    @property
    def body(self) -> str:
        """The note text of this checkpoint (what the signature covers)."""
        return format_checkpoint_body(self.origin, self.size, self.root_hash, self.extensions)


# --------------------------------------------------------------------------- helpers


def _b64decode(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise CheckpointError(f"{what} is not valid base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise CheckpointError(f"{what} is not canonical base64")
    return raw


def _check_name(name: str) -> None:
    """Key names: non-empty, no Unicode whitespace, no ``+`` (C2SP signed-note)."""
    if not name or "+" in name or any(ch.isspace() for ch in name):
        raise CheckpointError(
            f"invalid key name {name!r}: must be non-empty, without spaces or '+'"
        )


def _check_text(text: str, what: str) -> None:
    if any(ord(ch) < 0x20 and ch != "\n" for ch in text):
        raise CheckpointError(f"{what} contains an ASCII control character")


def public_key_bytes(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The raw 32-byte Ed25519 public key."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(name: str, public_key: Ed25519PublicKey | bytes) -> bytes:
    """C2SP signed-note key id: ``SHA-256(name || 0x0A || 0x01 || public key)[:4]``."""
    raw = public_key if isinstance(public_key, bytes) else public_key_bytes(public_key)
    if len(raw) != 32:
        raise CheckpointError("an Ed25519 public key has 32 bytes")
    return hashlib.sha256(name.encode("utf-8") + b"\n" + _ED25519 + raw).digest()[:4]


def vkey(name: str, public_key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """Verifier key text ``<name>+<hex key id>+<base64(0x01 || public key)>`` (C2SP)."""
    _check_name(name)
    raw = public_key_bytes(public_key)
    return f"{name}+{key_id(name, raw).hex()}+{base64.b64encode(_ED25519 + raw).decode()}"


# --------------------------------------------------------------------------- notes


def sign_note(text: str, private_key: Ed25519PrivateKey, name: str) -> str:
    """Sign ``text`` as a C2SP signed note with one Ed25519 signature.

    Args:
        text: note text; non-empty, ends with ``\\n``, no blank line, no control characters.
        private_key: the Ed25519 signing key.
        name: key name (non-empty, no spaces, no ``+``).

    Returns:
        ``text + "\\n— <name> <base64(key id || signature)>\\n"``.

    Raises:
        CheckpointError: invalid text or name.
    """
    _check_name(name)
    if not text.endswith("\n") or "\n\n" in text or text.startswith("\n"):
        raise CheckpointError("note text must end with a newline and contain no blank line")
    _check_text(text, "note text")
    sig = private_key.sign(text.encode("utf-8"))
    blob = base64.b64encode(key_id(name, private_key.public_key()) + sig).decode("ascii")
    return f"{text}\n{_SIG_PREFIX}{name} {blob}\n"


def open_note(note: str, public_key: Ed25519PublicKey, name: str) -> str:
    """Verify a C2SP signed note against one known key and return its text.

    The note is split at its last blank line; every signature line must be well formed;
    lines from other keys are ignored (C2SP: verifiers skip unknown keys); the first line
    with this key's name and key id decides: its signature must verify.

    Returns:
        The signed text, final newline included.

    Raises:
        CheckpointError: malformed note, no signature from this key, or a signature that
            does not verify.
    """
    _check_name(name)
    _check_text(note, "note")
    if not note.endswith("\n"):
        raise CheckpointError("note does not end with a newline")
    split = note.rfind("\n\n")
    if split < 0:
        raise CheckpointError("note has no blank line before its signatures")
    text, sig_block = note[: split + 1], note[split + 2 :]
    lines = sig_block[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise CheckpointError("note has too many signatures")
    want_id = key_id(name, public_key)
    chosen: bytes | None = None
    for line in lines:
        if not line.startswith(_SIG_PREFIX):
            raise CheckpointError(f"malformed signature line {line[:40]!r}")
        parts = line[len(_SIG_PREFIX) :].split(" ")
        if len(parts) != 2:
            raise CheckpointError(f"malformed signature line {line[:40]!r}")
        sig_name, b64 = parts
        _check_name(sig_name)
        raw = _b64decode(b64, "signature")
        if len(raw) < 5:
            raise CheckpointError("signature too short")
        if chosen is None and sig_name == name and raw[:4] == want_id:
            chosen = raw[4:]
    if chosen is None:
        raise CheckpointError(f"note has no signature from key {name!r} ({want_id.hex()})")
    try:
        public_key.verify(chosen, text.encode("utf-8"))
    except InvalidSignature:
        raise CheckpointError(f"signature from key {name!r} does not verify") from None
    return text


# --------------------------------------------------------------------------- checkpoints


def format_checkpoint_body(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...] | list[str] = ()
) -> str:
    """The tlog-checkpoint note text ``"<origin>\\n<size>\\n<base64 root>\\n" + extensions``.

    Raises:
        CheckpointError: empty origin, a newline or control character in a line,
            negative size, a root that is not 32 bytes, or an empty extension line.
    """
    if not origin or "\n" in origin:
        raise CheckpointError("origin must be a non-empty single line")
    if type(size) is not int or size < 0:
        raise CheckpointError("tree size must be a non-negative int")
    if len(root) != 32:
        raise CheckpointError(f"root hash must be 32 bytes, got {len(root)}")
    for ext in extensions:
        if not ext or "\n" in ext:
            raise CheckpointError("extension lines must be non-empty single lines")
    body = f"{origin}\n{size}\n{base64.b64encode(root).decode('ascii')}\n"
    body += "".join(f"{ext}\n" for ext in extensions)
    _check_text(body, "checkpoint")
    return body


def parse_checkpoint_body(text: str) -> Checkpoint:
    """Parse a checkpoint note text (no signature checked: see :func:`open_checkpoint`).

    Raises:
        CheckpointError: fewer than three lines, empty origin, a size with a sign or
            leading zeros, a root that is not canonical base64 of 32 bytes, an empty line.
    """
    if not text.endswith("\n"):
        raise CheckpointError("checkpoint text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("checkpoint needs origin, tree size and root hash lines")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise CheckpointError("checkpoint origin is empty")
    if not _SIZE_RE.match(size_text):
        raise CheckpointError(f"checkpoint tree size {size_text!r} is not a decimal number")
    root = _b64decode(root_text, "checkpoint root hash")
    if len(root) != 32:
        raise CheckpointError(f"checkpoint root hash has {len(root)} bytes, expected 32")
    if any(not ext for ext in extensions):
        raise CheckpointError("checkpoint has an empty line")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def sign_checkpoint(
    origin: str,
    size: int,
    root: bytes,
    private_key: Ed25519PrivateKey,
    name: str | None = None,
    extensions: tuple[str, ...] = (),
) -> str:
    """Produce a signed checkpoint (C2SP tlog-checkpoint in a signed note).

    Args:
        origin: the log identity, for example ``"mnemovault.example/audit/<tenant>"``.
        size: tree size (rows ``seq 1 .. size`` of the tenant's chain).
        root: the 32-byte RFC 9162 root of those rows' leaves.
        private_key: Ed25519 signing key (kept outside the database).
        name: key name; defaults to ``origin``.
        extensions: optional extension lines.

    Returns:
        The signed note text, ready to store, serve and compare.

    Raises:
        CheckpointError: invalid origin, size, root, name or extension.
    """
    body = format_checkpoint_body(origin, size, root, extensions)
    return sign_note(body, private_key, origin if name is None else name)


def open_checkpoint(text: str, public_key: Ed25519PublicKey, name: str | None = None) -> Checkpoint:
    """Verify a signed checkpoint and parse it.

    Args:
        text: the signed note.
        public_key: the log's Ed25519 public key.
        name: the key name to look for; defaults to the checkpoint's origin line.

    Returns:
        The :class:`Checkpoint`, with ``signed_by`` set to the key name.

    Raises:
        CheckpointError: malformed, unsigned by this key, or a bad signature.
    """
    if name is None:
        name = text.split("\n", 1)[0]
    body = open_note(text, public_key, name)
    cp = parse_checkpoint_body(body)
    return Checkpoint(cp.origin, cp.size, cp.root_hash, cp.extensions, signed_by=name)


def parse_checkpoint_unverified(text: str) -> Checkpoint:
    """Parse a checkpoint from a signed note (or a bare body) WITHOUT checking signatures.

    Only for a checkpoint the caller already trusts by other means (for example one it
    saved itself); ``signed_by`` is None.
    """
    split = text.rfind("\n\n")
    body = text if split < 0 else text[: split + 1]
    return parse_checkpoint_body(body)


# --------------------------------------------------------------------------- key files


def generate_signing_key(
    path: str | os.PathLike[str], *, overwrite: bool = False
) -> Ed25519PrivateKey:
    """Create an Ed25519 signing key and write it to ``path`` as PKCS#8 PEM, mode 0600.

    The file is created with mode 0600 from the start (never world-readable, not even
    briefly). The key belongs outside the database, for example in the user config
    directory or a secrets mount.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
    """
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_private(Path(path), pem, overwrite)
    return key


def _write_private(path: Path, data: bytes, overwrite: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _parse_note_private_key(text: str) -> Ed25519PrivateKey:
    parts = text.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise CheckpointError("not a PRIVATE+KEY+<name>+<id>+<key> signer key")
    name, id_hex, b64 = parts[2], parts[3], parts[4]
    raw = _b64decode(b64, "private key")
    if len(raw) != 33 or raw[:1] != _ED25519:
        raise CheckpointError("signer key is not an Ed25519 key")
    key = Ed25519PrivateKey.from_private_bytes(raw[1:])
    if key_id(name, key.public_key()).hex() != id_hex.lower():
        raise CheckpointError("signer key id does not match its key")
    return key


def load_private_key(
    path: str | os.PathLike[str], *, require_private_mode: bool = True
) -> Ed25519PrivateKey:
    """Load an Ed25519 signing key from a PKCS#8 PEM file or a Go note signer-key file.

    Args:
        path: the key file.
        require_private_mode: on POSIX, refuse a file that group or others can read or
            write (like ssh does).

    Raises:
        CheckpointError: not an Ed25519 private key, or the file mode is too open.
        OSError: the file can't be read.
    """
    p = Path(path)
    if require_private_mode and os.name == "posix":
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077:
            raise CheckpointError(f"signing key file {p} has mode {mode:04o}; chmod 600 it")
    data = p.read_bytes()
    if data.lstrip().startswith(b"PRIVATE+KEY+"):
        return _parse_note_private_key(data.decode("utf-8"))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise CheckpointError(f"{p} is not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{p} holds a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(source: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load an Ed25519 public key from a file path or from key text.

    Accepts a PEM public key (SubjectPublicKeyInfo), a C2SP verifier key
    ``<name>+<hex id>+<base64(0x01 || key)>`` (its key id is checked), or 32 raw bytes in
    base64 -- either given directly as text or stored in the file at ``source``.

    A :class:`os.PathLike` source is always a file; a ``str`` is a file if one exists by
    that name, else key text.

    Raises:
        CheckpointError: nothing usable, or a verifier key whose id does not match (for a
            ``str`` naming no file, the message says so too).
        OSError: a key file that does not exist (``PathLike`` source) or can't be read.
    """
    if isinstance(source, os.PathLike):
        return _parse_public_key(_read_key_text(Path(source)))
    try:
        is_file = Path(source).is_file()
    except (OSError, ValueError):  # too long a name, a NUL...: not a path, key text
        is_file = False
    if is_file:
        return _parse_public_key(_read_key_text(Path(source)))
    try:
        return _parse_public_key(source)
    except CheckpointError as exc:
        if "\n" in source.strip():
            raise
        raise CheckpointError(f"{exc}; and no file named {source!r} exists") from None


def _read_key_text(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} is not a text key file (PEM or vkey)") from None


def _parse_public_key(text: str) -> Ed25519PublicKey:
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(stripped.encode("ascii"))
        except ValueError:
            raise CheckpointError("not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise CheckpointError(f"PEM holds a {type(key).__name__}, not an Ed25519 key")
        return key
    parts = stripped.split("+", 2)
    if len(parts) == 3 and len(parts[1]) == 8:
        name, id_hex, b64 = parts
        raw = _b64decode(b64, "verifier key")
        if len(raw) != 33 or raw[:1] != _ED25519:
            raise CheckpointError("verifier key is not an Ed25519 key")
        if key_id(name, raw[1:]).hex() != id_hex.lower():
            raise CheckpointError("verifier key id does not match its key")
        return Ed25519PublicKey.from_public_bytes(raw[1:])
    raw = _b64decode(stripped, "public key")
    if len(raw) != 32:
        raise CheckpointError("raw Ed25519 public key must be 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def signing_public_key(
    key_path: str | os.PathLike[str],
) -> tuple[Ed25519PublicKey, Path] | None:
    """The public half of the signing key kept at ``key_path``, and the file it came from.

    Derived from the private key itself when that file exists (it is what signs; the mode
    check is the signer's own, see :func:`load_private_key`); read from
    ``<key_path>.pub`` (written next to a generated key) when the private key is absent
    or this user may not read it.

    Returns:
        ``(public key, file)``, or None when neither file exists.

    Raises:
        CheckpointError: a key file that exists holds no usable Ed25519 key (or the
            private key's mode is too open).
        OSError: a key file exists but can't be read (and no readable ``.pub`` either).
    """
    private = Path(key_path)
    public = private.with_name(private.name + ".pub")
    if private.exists():
        try:
            return load_private_key(private).public_key(), private
        except PermissionError:
            if not public.exists():
                raise
    if public.exists():
        return load_public_key(public), public
    return None


def write_public_key(
    path: str | os.PathLike[str],
    key: Ed25519PublicKey | Ed25519PrivateKey,
    name: str | None = None,
) -> None:
    """Write the public half: a C2SP verifier key line if ``name`` is given, else PEM."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    if name is not None:
        Path(path).write_text(vkey(name, pub) + "\n", "utf-8")
    else:
        Path(path).write_bytes(
            pub.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
