"""Audit rows and the per-tenant hash chain (SPEC section 6).

Definitions (the contract shared by the writer, the exporter and the verifier):

* **Row body**: a JSON object with exactly these keys::

      seq         int, 1 for a tenant's first row, then +1 per row (no gaps)
      tenant_id   str
      ts          str, UTC, "YYYY-MM-DDTHH:MM:SS.ffffffZ" (see format_ts)
      actor       str | None   user or API key id
      agent       str | None
      operation   str          for example "remember", "forget", "erase"
      memory_ids  [str]
      trigger     str | None
      provenance  {...}
      request_id  str | None
      details     {...}        placeholders, ids, counts and keyed hashes only

* **Row bytes**: ``canonical_json(body)`` (see :mod:`mnemovault.audit.canonical`).
  They are computed once, when the row is written, stored as they are, and everything
  after that hashes the stored bytes.
* **Chain**: ``row_hash = SHA-256(prev_hash || row_bytes)`` where ``prev_hash`` is the
  raw 32-byte ``row_hash`` of the tenant's previous row, or :data:`GENESIS_HASH`
  (32 zero bytes) for ``seq == 1``.
* **Merkle leaf**: leaf ``seq - 1`` of the tenant's RFC 9162 tree is
  ``SHA-256(0x00 || row_bytes)`` (see :mod:`mnemovault.audit.merkle`).
* **Export line** (JSON Lines, one row a line, ``\\n`` terminated): the canonical JSON of
  the body plus ``"prev_hash"`` and ``"row_hash"`` as 64 lowercase hex digits. Removing
  those two members and re-serialising gives back the row bytes exactly.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import orjson

from mnemovault.audit.canonical import (
    ORJSON_OPTIONS,
    CanonicalFormError,
    canonical_json,
    parse_canonical_line,
)

__all__ = [
    "FIRST_SEQ",
    "GENESIS_HASH",
    "GENESIS_HEX",
    "HASHED_KEYS",
    "ROW_KEYS",
    "ExportedRow",
    "build_row",
    "build_row_body",
    "export_line",
    "format_ts",
    "keyed_fingerprint",
    "parse_export_line",
    "parse_ts",
    "row_hash",
]

#: ``prev_hash`` of a tenant's first row: 32 zero bytes.
GENESIS_HASH: Final[bytes] = bytes(32)
#: :data:`GENESIS_HASH` as it appears in an export line.
GENESIS_HEX: Final[str] = GENESIS_HASH.hex()
#: ``seq`` of a tenant's first row. Merkle leaf index = ``seq - FIRST_SEQ``.
FIRST_SEQ: Final[int] = 1

#: Keys of a row body (the hashed part).
HASHED_KEYS: Final[frozenset[str]] = frozenset(
    {
        "seq",
        "tenant_id",
        "ts",
        "actor",
        "agent",
        "operation",
        "memory_ids",
        "trigger",
        "provenance",
        "request_id",
        "details",
    }
)
#: Keys of an export line: the body plus the two chain links.
ROW_KEYS: Final[frozenset[str]] = HASHED_KEYS | {"prev_hash", "row_hash"}

_TS_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_HEX64_RE: Final = re.compile(r"[0-9a-f]{64}\Z")


def format_ts(dt: datetime) -> str:
    """Format an aware datetime as the one audit timestamp form.

    Returns:
        ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` in UTC, always with six fractional digits, for
        example ``"2025-03-01T12:00:00.000000Z"``. Lexicographic order is time order.

    Raises:
        ValueError: ``dt`` is naive (no tzinfo): its instant would be a guess.
    """
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("audit timestamps need an aware datetime (naive datetime given)")
    u = dt if dt.tzinfo is UTC else dt.astimezone(UTC)
    return u.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_ts(text: str) -> datetime:
    """Parse a timestamp written by :func:`format_ts` (and only that form) to an aware UTC datetime.

    Raises:
        ValueError: any other spelling (offsets, missing fraction, wrong digit count).
    """
    if not isinstance(text, str) or not _TS_RE.match(text):
        raise ValueError(f"timestamp {text!r} is not in the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def row_hash(prev_hash: bytes, row_bytes: bytes) -> bytes:
    """Chain one row: ``SHA-256(prev_hash || row_bytes)``.

    Args:
        prev_hash: raw 32-byte hash of the previous row (:data:`GENESIS_HASH` for the first).
        row_bytes: the row's stored canonical bytes.

    Returns:
        The raw 32-byte row hash (hex it with ``.hex()`` for the export line).

    Raises:
        ValueError: ``prev_hash`` is not 32 bytes.
    """
    if len(prev_hash) != 32:
        raise ValueError(f"prev_hash must be 32 raw bytes, got {len(prev_hash)}")
    return hashlib.sha256(prev_hash + row_bytes).digest()


def _opt_str(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise CanonicalFormError(f"{name} must be str or None, got {type(value).__name__}", f"$.{name}")


def build_row_body(
    *,
    seq: int,
    tenant_id: str,
    ts: datetime | str,
    operation: str,
    actor: str | None = None,
    agent: str | None = None,
    memory_ids: Sequence[str] = (),
    trigger: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate the fields of one audit row and return its body (the hashed part).

    ``memory_ids`` keep the caller's order. ``provenance`` and ``details`` default to
    ``{}``. Nothing here can tell a personal value from an id: callers put only
    placeholders, ids, counts and keyed hashes (:func:`keyed_fingerprint`) in a row.

    Raises:
        CanonicalFormError: a field has the wrong type, ``seq < 1``, an empty
            ``tenant_id``/``operation``, a malformed ``ts``, or a value with no canonical
            form (NaN, an integer beyond ±(2**53 - 1), ...), with the key path.
    """
    if type(seq) is not int or seq < FIRST_SEQ:
        raise CanonicalFormError(f"seq must be an int >= {FIRST_SEQ}, got {seq!r}", "$.seq")
    if not isinstance(tenant_id, str) or not tenant_id:
        raise CanonicalFormError("tenant_id must be a non-empty str", "$.tenant_id")
    if not isinstance(operation, str) or not operation:
        raise CanonicalFormError("operation must be a non-empty str", "$.operation")
    if isinstance(ts, datetime):
        ts_text = format_ts(ts)
    else:
        try:
            parse_ts(ts)
        except ValueError as exc:
            raise CanonicalFormError(str(exc), "$.ts") from None
        ts_text = ts
    if isinstance(memory_ids, str | bytes) or not all(isinstance(m, str) for m in memory_ids):
        raise CanonicalFormError("memory_ids must be a sequence of str", "$.memory_ids")
    for name, mapping in (("provenance", provenance), ("details", details)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise CanonicalFormError(f"{name} must be a mapping or None", f"$.{name}")
    return {
        "seq": seq,
        "tenant_id": tenant_id,
        "ts": ts_text,
        "actor": _opt_str("actor", actor),
        "agent": _opt_str("agent", agent),
        "operation": operation,
        "memory_ids": list(memory_ids),
        "trigger": _opt_str("trigger", trigger),
        "provenance": dict(provenance or {}),
        "request_id": _opt_str("request_id", request_id),
        "details": dict(details or {}),
    }


def build_row(
    *,
    prev_hash: bytes,
    seq: int,
    tenant_id: str,
    ts: datetime | str,
    operation: str,
    actor: str | None = None,
    agent: str | None = None,
    memory_ids: Sequence[str] = (),
    trigger: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> tuple[bytes, bytes]:
    """Build the next row of a tenant's chain.

    Call it inside the transaction that holds the tenant's chain head locked, with
    ``seq = head_seq + 1`` and ``prev_hash = head_hash`` (:data:`GENESIS_HASH` and
    ``seq=1`` for the first row); store both results and move the head to
    ``(seq, row_hash)``.

    Returns:
        ``(row_bytes, row_hash)``: the canonical bytes to store (and hash, and use as the
        Merkle leaf data) and the raw 32-byte ``SHA-256(prev_hash || row_bytes)``.

    Raises:
        CanonicalFormError: see :func:`build_row_body` (an integer beyond ±(2**53 - 1)
            anywhere in ``details``/``provenance`` is refused here, naming its path).
        ValueError: ``prev_hash`` is not 32 bytes.
    """
    body = build_row_body(
        seq=seq,
        tenant_id=tenant_id,
        ts=ts,
        operation=operation,
        actor=actor,
        agent=agent,
        memory_ids=memory_ids,
        trigger=trigger,
        provenance=provenance,
        request_id=request_id,
        details=details,
    )
    row_bytes = canonical_json(body)
    return row_bytes, row_hash(prev_hash, row_bytes)


def export_line(row_bytes: bytes, prev_hash: bytes, row_hash: bytes) -> bytes:
    """Render one stored row as its JSON Lines record, ``\\n`` included.

    Args:
        row_bytes: the stored canonical body.
        prev_hash: raw 32-byte previous hash, as stored.
        row_hash: raw 32-byte row hash, as stored (not recomputed: a tampered database
            row is exported as it is, for the verifier to catch).

    Returns:
        ``canonical_json(body | {"prev_hash": hex, "row_hash": hex}) + b"\\n"``.

    Raises:
        CanonicalFormError: ``row_bytes`` is not a canonical JSON object, or already has a
            ``prev_hash``/``row_hash`` member.
        ValueError: a hash is not 32 bytes.
    """
    if len(prev_hash) != 32 or len(row_hash) != 32:
        raise ValueError("prev_hash and row_hash must be 32 raw bytes")
    body = parse_canonical_line(row_bytes)
    if "prev_hash" in body or "row_hash" in body:
        raise CanonicalFormError("row body must not contain prev_hash or row_hash")
    body["prev_hash"] = prev_hash.hex()
    body["row_hash"] = row_hash.hex()
    return orjson.dumps(body, option=ORJSON_OPTIONS | orjson.OPT_APPEND_NEWLINE)


class ExportedRow(NamedTuple):
    """One export line taken apart: what the database stores for the row."""

    seq: int
    row_bytes: bytes
    prev_hash: bytes
    row_hash: bytes
    body: dict[str, Any]


def parse_export_line(line: bytes) -> ExportedRow:
    """Split one export line (without ``\\n``) into body bytes and chain links.

    Checks the canonical form, the key set, ``seq`` and the hex form of the hashes; does
    not check the chain (that needs the previous row: see :mod:`mnemovault.audit.verify`).

    Raises:
        CanonicalFormError: with the reason.
    """
    obj = parse_canonical_line(line)
    if obj.keys() != ROW_KEYS:
        missing = sorted(ROW_KEYS - obj.keys())
        extra = sorted(obj.keys() - ROW_KEYS)
        raise CanonicalFormError(
            f"row keys differ from the schema: missing {missing}, unexpected {extra}"
        )
    prev_hex = obj.pop("prev_hash")
    row_hex = obj.pop("row_hash")
    for name, value in (("prev_hash", prev_hex), ("row_hash", row_hex)):
        if not isinstance(value, str) or not _HEX64_RE.match(value):
            raise CanonicalFormError(f"{name} must be 64 lowercase hex digits", f"$.{name}")
    seq = obj["seq"]
    if type(seq) is not int or seq < FIRST_SEQ:
        raise CanonicalFormError(f"seq must be an int >= {FIRST_SEQ}", "$.seq")
    return ExportedRow(
        seq=seq,
        row_bytes=orjson.dumps(obj, option=ORJSON_OPTIONS),
        prev_hash=bytes.fromhex(prev_hex),
        row_hash=bytes.fromhex(row_hex),
        body=obj,
    )


def keyed_fingerprint(key: bytes, value: str, *, purpose: str) -> str:
    """Name a personal value in the audit log without writing it: a keyed hash.

    ``"hmac-sha256:" + hex(HMAC-SHA256(key, purpose || 0x00 || value))[:32]`` (128 bits).
    The same (key, purpose, value) always gives the same fingerprint, so an operator can
    find a subject's rows by fingerprinting the id again; without the key the value
    can't be guessed by hashing candidates; and erasing the subject never edits the log.

    Args:
        key: secret HMAC key, at least 16 bytes (kept outside the database).
        value: the value to name, for example a subject id or a query.
        purpose: a label that separates uses, for example ``"subject"`` or ``"query"``.

    Raises:
        ValueError: ``key`` is shorter than 16 bytes or ``purpose`` contains NUL.
    """
    if len(key) < 16:
        raise ValueError("fingerprint key must be at least 16 bytes")
    if "\x00" in purpose:
        raise ValueError("purpose must not contain NUL")
    mac = hmac.new(key, purpose.encode() + b"\x00" + value.encode("utf-8"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()[:32]
