"""The signed erasure receipt (issue 10, item 2).

A receipt is one JSON object::

    {"format": "mnemovault-erasure-receipt/1",
     "request_id": "...", "tenant": "acme", "scope": "support" (as stored: a placeholder
     when the scope is a personal value), "scope_fingerprint": "hmac-sha256:...",
     "subject_fingerprint": "hmac-sha256:..." (null for a whole-scope erase),
     "counts": {"memories": 3, "named": 2, "versions": 0, "derived": 1, "vault_values": 1,
                "graph_nodes": 2, "graph_edges": 1, ...contributors' kinds},
     "removed_root": "<hex RFC 9162 Merkle root over the removed ids, sorted>",
     "erased_at": "2026-12-01T10:00:00.000000Z", "audit_seq": 42,
     "key_id": "<hex C2SP key id of the signing key>",
     "digests": {"<field>": "<hex SHA-256 of the field's canonical JSON>", ...},
     "signature": "<base64 Ed25519 signature>"}  (canonical base64: :func:`strict_b64decode`)

The signature (Ed25519, RFC 8032, under the audit log's checkpoint signing key) covers the
canonical JSON (:func:`mnemovault.audit.canonical.canonical_json`) of
``{"format": ..., "digests": {...}}``; each digest covers one field. So a verifier can say
which field was changed: a field whose digest no longer matches (the signature still
holds), a digest that was changed (the signature fails and that digest disagrees with its
field), or the signature itself. The subject is named only by its keyed fingerprint
(:func:`mnemovault.audit.chain.keyed_fingerprint` under the tenant's fingerprint key), so
a receipt holds no personal value.

:func:`verify` needs only the receipt and the public key (``<signing key>.pub``, PEM or a
C2SP verifier key): it runs offline.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mnemovault.audit.canonical import CanonicalFormError, canonical_json
from mnemovault.audit.checkpoint import CheckpointError, key_id, load_public_key
from mnemovault.audit.service import deployment_public_key
from mnemovault.config import Settings
from mnemovault.errors import ConfigError, ValidationError

FORMAT = "mnemovault-erasure-receipt/1"
FIELDS = ("format", "request_id", "tenant", "scope", "scope_fingerprint",
          "subject_fingerprint", "counts", "removed_root", "erased_at", "audit_seq", "key_id")
"""The signed fields, each covered by its digest."""

_HEX64 = re.compile(r"[0-9a-f]{64}")
_FP = re.compile(r"hmac-sha256:[0-9a-f]{32}")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


def digest(value: Any) -> str:
    """Hex SHA-256 of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def _signed_bytes(digests: dict[str, Any]) -> bytes:
    return canonical_json({"format": FORMAT, "digests": digests})


def sign(body: dict[str, Any], key: Ed25519PrivateKey, key_name: str) -> dict[str, Any]:
    """The receipt of ``body`` (every field of :data:`FIELDS` but ``format`` and
    ``key_id``, which are filled in here) signed with ``key`` (its id under ``key_name``)."""
    fields = {**body, "format": FORMAT, "key_id": key_id(key_name, key.public_key()).hex()}
    missing = [f for f in FIELDS if f not in fields]
    if missing:
        raise ValueError(f"receipt: missing {missing}")
    digests = {f: digest(fields[f]) for f in FIELDS}
    signature = base64.b64encode(key.sign(_signed_bytes(digests))).decode("ascii")
    return {**{f: fields[f] for f in FIELDS}, "digests": digests, "signature": signature}


def strict_b64decode(text: str) -> bytes:
    """The bytes of ``text`` in canonical base64 only (RFC 4648 section 4, with padding):
    the alphabet and padding are validated, and the bytes must encode back to ``text``
    exactly, so the unused low bits of the last character are zero (RFC 4648 section 3.5:
    a decoder MAY reject otherwise; a verifier must, or one signature has several texts).

    Raises:
        binascii.Error: not base64 in the standard alphabet with padding.
        ValueError: base64 that is not canonical (non-zero padding bits).
    """
    raw = base64.b64decode(text, validate=True)
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("not canonical base64 (non-zero padding bits)")
    return raw


def _bad(field: str, rule: str) -> ValidationError:
    return ValidationError(f"{field}: {rule}", field=field)


def _check_shapes(r: dict[str, Any]) -> None:
    """Each field's type and form (before the signature: a field of the wrong shape is
    named as such)."""
    if r["format"] != FORMAT:
        raise _bad("format", f"must be {FORMAT!r}")
    for f in ("request_id", "tenant", "scope"):
        if not isinstance(r[f], str) or not r[f]:
            raise _bad(f, "must be a non-empty string")
    if not isinstance(r["scope_fingerprint"], str) or not _FP.fullmatch(r["scope_fingerprint"]):
        raise _bad("scope_fingerprint", "must be hmac-sha256:<32 hex>")
    sfp = r["subject_fingerprint"]
    if sfp is not None and (not isinstance(sfp, str) or not _FP.fullmatch(sfp)):
        raise _bad("subject_fingerprint", "must be hmac-sha256:<32 hex> or null")
    counts = r["counts"]
    if not isinstance(counts, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in counts.items()):
        raise _bad("counts", "must map kinds to non-negative integers")
    if not isinstance(r["removed_root"], str) or not _HEX64.fullmatch(r["removed_root"]):
        raise _bad("removed_root", "must be 64 lowercase hex digits")
    if not isinstance(r["erased_at"], str) or not _TS.fullmatch(r["erased_at"]):
        raise _bad("erased_at", "must be a UTC timestamp like 2026-12-01T10:00:00.000000Z")
    seq = r["audit_seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise _bad("audit_seq", "must be a positive integer")
    if not isinstance(r["key_id"], str) or not re.fullmatch(r"[0-9a-f]{8}", r["key_id"]):
        raise _bad("key_id", "must be 8 lowercase hex digits")
    digests = r["digests"]
    if not isinstance(digests, dict) or set(digests) != set(FIELDS) or not all(
            isinstance(v, str) and _HEX64.fullmatch(v) for v in digests.values()):
        raise _bad("digests", f"must give a hex SHA-256 for each of {', '.join(FIELDS)}")
    if not isinstance(r["signature"], str):
        raise _bad("signature", "must be base64 text")


def verify(receipt: Any, public_key: Ed25519PublicKey, key_name: str) -> dict[str, Any]:
    """Check a receipt offline against ``public_key`` (whose C2SP key id under
    ``key_name`` must be the receipt's ``key_id``). Returns the receipt.

    Raises:
        ValidationError: ``field`` names what is wrong: a missing or unknown field, a field
            of the wrong form, a field changed since signing (its digest no longer
            matches), ``digests.<field>`` for a changed digest, ``signature`` for a
            signature that does not verify, ``key_id`` for a receipt signed by another key.
    """
    if not isinstance(receipt, dict):
        raise _bad("receipt", "must be a JSON object")
    expected = {*FIELDS, "digests", "signature"}
    for f in (*FIELDS, "digests", "signature"):
        if f not in receipt:
            raise _bad(f, "missing")
    extra = sorted(set(receipt) - expected)
    if extra:
        raise _bad(extra[0], "not a receipt field (added after signing)")
    _check_shapes(receipt)
    try:
        changed = [f for f in FIELDS if digest(receipt[f]) != receipt["digests"][f]]
    except CanonicalFormError as exc:
        raise _bad("receipt", f"not canonical JSON ({exc})") from None
    try:
        sig = strict_b64decode(receipt["signature"])
        public_key.verify(sig, _signed_bytes(receipt["digests"]))
        signature_ok = True
    except (InvalidSignature, binascii.Error, ValueError):
        signature_ok = False
    if signature_ok and changed:
        raise _bad(changed[0], "changed since the receipt was signed (its digest differs)")
    if not signature_ok:
        if changed:
            raise _bad(f"digests.{changed[0]}", "changed since the receipt was signed (the "
                       "signature does not cover it)")
        raise _bad("signature", "does not verify with this public key over the digests")
    if key_id(key_name, public_key).hex() != receipt["key_id"]:
        raise _bad("key_id", "the receipt names another signing key")
    return receipt


def load(text: str) -> Any:
    """A receipt file's JSON (any value: :func:`verify` checks it).

    Raises:
        ValidationError: not JSON (field ``receipt``).
    """
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _bad("receipt", "the file is not JSON") from None


def verify_with(settings: Settings, doc: Any, public_key: Path | None = None) -> dict[str, Any]:
    """:func:`verify` with ``public_key`` (a PEM or C2SP verifier key file), else the
    deployment's own (:func:`mnemovault.audit.service.deployment_public_key`); the key
    name is ``settings.audit_origin``. ``doc``: the receipt, or its JSON text.

    Raises:
        ValidationError: the receipt fails (names the field).
        ConfigError: no public key given and none found; an unreadable key file.
    """
    if isinstance(doc, str | bytes):
        doc = load(doc.decode("utf-8", "replace") if isinstance(doc, bytes) else doc)
    if public_key is not None:
        try:
            key = load_public_key(Path(public_key))
        except (CheckpointError, OSError) as exc:
            raise ConfigError(f"public_key: cannot use {public_key}: {exc}",
                              field="public_key") from None
    else:
        found = deployment_public_key(settings)
        if found is None:
            raise ConfigError("public_key: no signing key in this deployment; give "
                              "--public-key", field="public_key")
        key = found[0]
    return verify(doc, key, settings.audit_origin)
