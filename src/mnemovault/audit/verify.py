"""Offline verifier for an exported audit log (JSON Lines) and for stored rows.

Usage::

    python -m mnemovault.audit.verify FILE [--checkpoint CP (--public-key PK | --allow-unsigned)
                                            [--strict]] [--allow-partial] [--root] [--json]

For each line, in order, it checks (see :mod:`mnemovault.audit.chain` for the format):

1. the line is a JSON object in canonical form: no BOM, no CR, no duplicate key, sorted
   keys, no whitespace, integers within ±(2**53 - 1) (:mod:`mnemovault.audit.canonical`);
2. it has the chain members ``seq``, ``tenant_id``, ``prev_hash``, ``row_hash``, and the
   tenant is the first line's tenant (the other members are hashed but not held to a
   schema here: :func:`mnemovault.audit.chain.parse_export_line` does that; an integrity
   check that ignores the field list keeps old exports verifiable after rows gain a field);
3. ``seq`` is the previous ``seq + 1`` (the first line has ``seq == 1``, unless
   ``--allow-partial`` accepts a range export starting later);
4. ``prev_hash`` equals the previous line's ``row_hash`` (32 zero bytes for ``seq 1``);
5. ``row_hash == SHA-256(prev_hash || row bytes)`` recomputed from the line.

The first failure is reported with its 1-based line number and the reason, and the
exit status is 1. A chain alone can't reveal a file cut short at the tail or rewritten
from the first changed row onwards; given a checkpoint (C2SP tlog-checkpoint, see
:mod:`mnemovault.audit.checkpoint`) the verifier also recomputes the RFC 9162 Merkle root
of the first ``tree size`` rows (leaf data = row bytes) and compares it with the
checkpoint's root, which catches both.

A checkpoint is only as good as its signature: anyone who can rewrite the log can also
write a matching checkpoint. So a checkpoint's signature is checked against the log's
public key, and a checkpoint that can't be checked (no key) fails unless the caller says
it trusts the checkpoint as given (``allow_unsigned``, ``--allow-unsigned``; the result
then carries a warning). A signature that is checked and does not verify always fails.
This standalone verifier has no data directory to find the deployment's key in, so
``--checkpoint`` needs ``--public-key`` or ``--allow-unsigned``; ``mnemovault audit verify``
uses the deployment's own key by default.

Rows after the checkpoint's tree size are not covered by it: they pass the chain checks
only. A log keeps growing after its latest checkpoint, so by default they are reported (a
warning with their count, ``uncovered_rows``) and do not fail; ``strict`` (``--strict``)
makes them fail.

Exit status of ``main``: 0 valid, 1 verification failed, 2 bad input (a file that does not
exist or can't be read, an unusable key, a checkpoint without a key or ``--allow-unsigned``),
3 nothing to verify (the log has no rows).

Speed: the file is read in large blocks and split in C; per line the work is one orjson
parse, two canonical serialisations (the whole line, compared byte for byte, and the row
body without the hash members, which is what gets hashed), a few dict look-ups and one
SHA-256 (two with a checkpoint).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mnemovault.audit.canonical import ORJSON_OPTIONS, diagnose_line, is_canonical
from mnemovault.audit.chain import (
    FIRST_SEQ,
    GENESIS_HASH,
    GENESIS_HEX,
)
from mnemovault.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_public_key,
    open_checkpoint,
    parse_checkpoint_unverified,
)
from mnemovault.audit.merkle import root_from_leaf_hashes

__all__ = [
    "InputError",
    "VerifyResult",
    "exit_status",
    "main",
    "read_public_key",
    "read_text_file",
    "require_file",
    "verify_file",
    "verify_lines",
    "verify_rows",
]

_BLOCK: Final[int] = 1024 * 1024  # 1 MiB: measured faster than 16 MiB (cache-friendly)
_HEX = frozenset("0123456789abcdef")
_CHAIN_KEYS: Final[tuple[str, ...]] = ("seq", "tenant_id", "prev_hash", "row_hash")


@dataclass
class VerifyResult:
    """Outcome of a verification.

    Attributes:
        ok: True when every check passed.
        rows: rows that passed every check (all of them when ``ok``).
        tenant_id: tenant of the first row, if any.
        first_seq, last_seq: ``seq`` range of the rows that passed.
        head_hash: hex ``row_hash`` of the last row that passed.
        anchored: True when the chain starts at ``seq 1`` from the genesis hash; False
            for a range export accepted with ``allow_partial`` (its first ``prev_hash`` is
            taken on trust).
        error_line: 1-based line (or row position) of the first failure, None when the
            failure is not tied to one line (truncation, rewrite, bad checkpoint).
        error: why it failed.
        checkpoint: the checkpoint checked, if any.
        checkpoint_signature_verified: True when its signature was checked with a key.
        key_source: where the public key came from, when the caller says (for example
            the deployment's key file); shown in the summary.
        uncovered_rows: rows after the checkpoint's tree size (chain-checked only).
        log_checked: False when the checkpoint was refused before any row was read.
        merkle_root: hex RFC 9162 root of the rows compared with the checkpoint (or of
            all rows when ``compute_root`` was asked for).
        warnings: things a reader should know that are not failures (an unverified
            checkpoint signature accepted with ``allow_unsigned``, rows the checkpoint
            does not cover).
    """

    ok: bool = True
    rows: int = 0
    tenant_id: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    head_hash: str | None = None
    anchored: bool = True
    error_line: int | None = None
    error: str | None = None
    checkpoint: Checkpoint | None = None
    checkpoint_signature_verified: bool = False
    key_source: str | None = None
    uncovered_rows: int = 0
    merkle_root: str | None = None
    warnings: list[str] = field(default_factory=list)
    log_checked: bool = True

    @property
    def empty(self) -> bool:
        """True when nothing failed because there was nothing to check: no rows at all."""
        return self.ok and self.rows == 0

    def summary(self) -> str:
        """One human line describing the result (warnings are in :attr:`warnings`)."""
        if self.empty:
            return "NO ROWS: the log is empty, nothing was verified"
        if not self.ok:
            if not self.log_checked:
                return f"FAIL {self.error} (the log itself was not checked)"
            if self.error_line is None:
                return f"FAIL {self.error} ({self.rows} rows passed the chain checks)"
            return (
                f"FAIL line {self.error_line}: {self.error} ({self.rows} rows verified before it)"
            )
        parts = [f"OK {self.rows} rows"]
        if self.rows:
            parts.append(
                f"seq {self.first_seq}..{self.last_seq}, tenant {self.tenant_id!r}, "
                f"head {self.head_hash}"
            )
        if not self.anchored:
            parts.append("partial range: first prev_hash taken on trust")
        if self.checkpoint is not None:
            if not self.checkpoint_signature_verified:
                how = "signature NOT verified"
            elif self.key_source:
                how = f"signature verified with {self.key_source}"
            else:
                how = "signature verified"
            parts.append(
                f"checkpoint {self.checkpoint.origin!r} size {self.checkpoint.size} "
                f"root matches ({how})"
            )
            if self.uncovered_rows:
                parts.append(f"{self.uncovered_rows} later rows not covered by it")
        elif self.merkle_root is not None:
            parts.append(f"merkle root {self.merkle_root}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (checkpoint reduced to origin, size and hex root)."""
        cp = self.checkpoint
        return {
            "ok": self.ok,
            "rows": self.rows,
            "tenant_id": self.tenant_id,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "head_hash": self.head_hash,
            "anchored": self.anchored,
            "error_line": self.error_line,
            "error": self.error,
            "empty": self.empty,
            "checkpoint": None
            if cp is None
            else {
                "origin": cp.origin,
                "size": cp.size,
                "root_hash": cp.root_hash.hex(),
                "signature_verified": self.checkpoint_signature_verified,
                "key": self.key_source,
            },
            "uncovered_rows": self.uncovered_rows,
            "merkle_root": self.merkle_root,
            "warnings": self.warnings,
        }


class _Failure(Exception):
    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


def _is_hex64(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


class _Walker:
    """Chain state carried from one block of lines to the next."""

    def __init__(self, allow_partial: bool, leaves_wanted: int) -> None:
        self.allow_partial = allow_partial
        self.lineno = 0
        self.next_seq = 0  # 0: no row seen yet (a real seq is >= 1)
        self.prev_raw = GENESIS_HASH
        self.prev_hex = GENESIS_HEX
        self.tenant: Any = None
        self.first_seq: int | None = None
        self.anchored = True
        self.leaves_left = leaves_wanted
        self.leaves = bytearray()

    @property
    def count(self) -> int:
        """Rows that passed every check so far."""
        if self.first_seq is None:
            return 0
        return self.next_seq - self.first_seq

    def _start(self, lineno: int, d: dict[str, Any]) -> None:
        """Take the first row: fix the tenant, the expected seq and the anchor."""
        seq = d["seq"]
        if type(seq) is not int or seq < FIRST_SEQ:
            raise _Failure(lineno, f"seq must be an integer >= {FIRST_SEQ}, found {seq!r}")
        tenant = d["tenant_id"]
        if not isinstance(tenant, str) or not tenant:
            raise _Failure(lineno, "tenant_id must be a non-empty string")
        if seq != FIRST_SEQ:
            if not self.allow_partial:
                raise _Failure(
                    lineno,
                    f"the log starts at seq {seq}, expected {FIRST_SEQ}: "
                    "rows are missing at the head (use --allow-partial "
                    "for a range export)",
                )
            if not _is_hex64(d["prev_hash"]):
                raise _Failure(lineno, "prev_hash must be 64 lowercase hex digits")
            self.prev_hex = d["prev_hash"]
            self.prev_raw = bytes.fromhex(self.prev_hex)
            self.anchored = False
        self.tenant = tenant
        self.first_seq = seq
        self.next_seq = seq

    def _mismatch(self, lineno: int, d: dict[str, Any]) -> None:
        """Explain a row whose chain members, seq or prev_hash differ from what is expected."""
        missing = [k for k in _CHAIN_KEYS if k not in d]
        if missing:
            raise _Failure(lineno, f"row lacks the chain member(s) {missing}")
        seq = d["seq"]
        if type(seq) is not int or seq != self.next_seq:
            prev = self.next_seq - 1
            if type(seq) is int and seq <= prev:
                why = "a row is repeated or out of order"
            elif type(seq) is int:
                why = "rows are missing or out of order"
            else:
                why = "seq must be an integer"
            raise _Failure(
                lineno, f"seq is {seq!r}, expected {self.next_seq} after seq {prev}: {why}"
            )
        if d["prev_hash"] != self.prev_hex and self.count == 0 and self.anchored:
            raise _Failure(lineno, "the first row's prev_hash must be the genesis hash (64 zeros)")
        if d["prev_hash"] != self.prev_hex:
            raise _Failure(
                lineno,
                f"prev_hash {str(d['prev_hash'])[:16]}... does not match the "
                f"row_hash of line {lineno - 1} ({self.prev_hex[:16]}...): "
                "the chain is broken here",
            )
        raise _Failure(
            lineno,
            "tenant_id differs from the first row's "
            f"({self.tenant!r}): one file holds one tenant's chain",
        )

    def run(self, lines: Sequence[bytes]) -> None:
        """Verify a block of lines (no newlines); raise :class:`_Failure` at the first bad one.

        Per line: one parse, one canonical re-serialisation compared with the line (which
        also rules out duplicate keys, BOM and CR), the seq, tenant and link comparisons,
        then the two hash members are dropped from the parsed object and the rest
        re-serialised: by definition of the canonical form those are the row bytes that
        were hashed at write time. (Splicing the members out of the line instead was
        measured slower than orjson's re-serialisation.)
        """
        loads = orjson.loads
        dumps = orjson.dumps
        opt = ORJSON_OPTIONS
        sha = hashlib.sha256
        decode_errors = (orjson.JSONDecodeError, orjson.JSONEncodeError)
        lineno = self.lineno
        expected = self.next_seq
        prev_raw = self.prev_raw
        prev_hex = self.prev_hex
        tenant = self.tenant
        leaves_left = self.leaves_left
        leaves = self.leaves
        try:
            for line in lines:
                lineno += 1
                try:
                    d = loads(line)
                    canonical = type(d) is dict and dumps(d, option=opt) == line
                except decode_errors:
                    canonical = False
                if not canonical:
                    raise _Failure(lineno, diagnose_line(line) or "not in canonical form")
                if expected == 0:
                    if "seq" not in d or "tenant_id" not in d or "prev_hash" not in d:
                        self._mismatch(lineno, d)
                    self._start(lineno, d)
                    expected, tenant = self.next_seq, self.tenant
                    prev_raw, prev_hex = self.prev_raw, self.prev_hex
                if (
                    d.get("seq") != expected
                    or d.get("prev_hash") != prev_hex
                    or d.get("tenant_id") != tenant
                    or type(d["seq"]) is not int
                ):
                    self.lineno, self.next_seq, self.prev_hex = lineno, expected, prev_hex
                    self._mismatch(lineno, d)
                rh = d.pop("row_hash", None)
                del d["prev_hash"]
                hashed = dumps(d, option=opt)
                digest = sha(prev_raw + hashed).digest()
                hexd = digest.hex()
                if hexd != rh:
                    if rh is None:
                        raise _Failure(lineno, "row lacks the chain member(s) ['row_hash']")
                    raise _Failure(
                        lineno,
                        f"row_hash {str(rh)[:16]}... does not match the row: recomputed "
                        f"{hexd[:16]}... (the row was altered)",
                    )
                if leaves_left:
                    leaves += sha(b"\x00" + hashed).digest()
                    leaves_left -= 1
                prev_raw = digest
                prev_hex = hexd
                expected += 1
        finally:
            self.lineno = lineno
            self.next_seq = expected
            self.prev_raw = prev_raw
            self.prev_hex = prev_hex
            self.leaves_left = leaves_left


_UNSIGNED_REFUSED: Final[str] = (
    "checkpoint signature can't be verified: no public key was given (give the log's "
    "public key, or allow unsigned checkpoints to trust this one as given)"
)
_UNSIGNED_ACCEPTED: Final[str] = (
    "checkpoint signature not verified: no public key was given and unsigned checkpoints "
    "were allowed, so the checkpoint is trusted as given (anyone who can rewrite the log "
    "could have written it)"
)


def _load_checkpoint(
    checkpoint: Checkpoint | str | os.PathLike[str],
    public_key: Ed25519PublicKey | str | os.PathLike[str] | None,
    key_name: str | None,
) -> tuple[Checkpoint, bool]:
    if isinstance(checkpoint, Checkpoint):
        return checkpoint, checkpoint.signed_by is not None
    text = os.fspath(checkpoint)
    if "\n" not in text:
        text = Path(text).read_text("utf-8")
    if public_key is None:
        return parse_checkpoint_unverified(text), False
    pk = public_key if isinstance(public_key, Ed25519PublicKey) else load_public_key(public_key)
    return open_checkpoint(text, pk, key_name), True


def _open_checkpoint(
    result: VerifyResult,
    checkpoint: Checkpoint | str | os.PathLike[str],
    public_key: Ed25519PublicKey | str | os.PathLike[str] | None,
    key_name: str | None,
    allow_unsigned: bool,
) -> Checkpoint | None:
    """Load the checkpoint into ``result``; on a refusal mark ``result`` failed, return None."""
    try:
        cp, verified = _load_checkpoint(checkpoint, public_key, key_name)
    except CheckpointError as exc:
        result.ok = False
        result.log_checked = False
        result.error = f"checkpoint rejected: {exc}"
        return None
    result.checkpoint = cp
    result.checkpoint_signature_verified = verified
    if not verified:
        if not allow_unsigned:
            result.ok = False
            result.log_checked = False
            result.error = _UNSIGNED_REFUSED
            return None
        result.warnings.append(_UNSIGNED_ACCEPTED)
    return cp


def _uncovered(extra: int, size: int) -> str:
    if extra == 1:
        return f"1 row after the checkpoint's size {size} is not covered by it"
    return f"{extra} rows after the checkpoint's size {size} are not covered by it"


def _check_checkpoint(
    result: VerifyResult,
    cp: Checkpoint,
    count: int,
    anchored: bool,
    leaves: bytes | bytearray,
    strict: bool,
) -> None:
    """Compare ``count`` verified rows (leaf hashes of the first ``cp.size``) with ``cp``."""
    if not anchored:
        result.ok = False
        result.error = "a checkpoint can only be checked against a log that starts at seq 1"
        return
    if count < cp.size:
        result.ok = False
        gone = f"row {cp.size} is" if count + 1 == cp.size else f"rows {count + 1}..{cp.size} are"
        result.error = (
            f"the file has {count} rows but the checkpoint covers {cp.size}: "
            f"{gone} missing (truncated log)"
        )
        return
    got = root_from_leaf_hashes(bytes(leaves))
    result.merkle_root = got.hex()
    if got != cp.root_hash:
        result.ok = False
        result.error = (
            f"the Merkle root of rows 1..{cp.size} is {got.hex()[:16]}..., the "
            f"checkpoint says {cp.root_hash.hex()[:16]}...: the log was rewritten"
        )
        return
    result.uncovered_rows = count - cp.size
    if result.uncovered_rows:
        what = _uncovered(result.uncovered_rows, cp.size)
        if strict:
            result.ok = False
            result.error = f"{what} (strict: the checkpoint must cover every row)"
        else:
            result.warnings.append(
                f"{what}: they pass the chain checks only (a later checkpoint covers them)"
            )


def verify_lines(
    blocks: Iterable[bytes],
    checkpoint: Checkpoint | str | os.PathLike[str] | None = None,
    public_key: Ed25519PublicKey | str | os.PathLike[str] | None = None,
    *,
    key_name: str | None = None,
    allow_unsigned: bool = False,
    strict: bool = False,
    allow_partial: bool = False,
    compute_root: bool = False,
) -> VerifyResult:
    """Verify a JSON Lines audit log given as consecutive byte blocks (any split points).

    Same checks and arguments as :func:`verify_file`; useful for a streamed export.
    """
    result = VerifyResult()
    cp: Checkpoint | None = None
    if checkpoint is not None:
        cp = _open_checkpoint(result, checkpoint, public_key, key_name, allow_unsigned)
        if cp is None:
            return result
    leaves_wanted = cp.size if cp is not None else (1 << 62 if compute_root else 0)
    walker = _Walker(allow_partial, leaves_wanted)
    tail = b""
    try:
        for block in blocks:
            if not block:
                continue
            lines = block.split(b"\n")
            if tail:
                lines[0] = tail + lines[0]
            tail = lines.pop()
            walker.run(lines)
        if tail:
            raise _Failure(
                walker.lineno + 1,
                "last line has no terminating newline "
                "(was the file cut short while being written?)",
            )
    except _Failure as failure:
        result.ok = False
        result.error_line = failure.line
        result.error = failure.reason
    result.rows = walker.count
    result.tenant_id = walker.tenant
    result.anchored = walker.anchored
    if walker.count:
        result.first_seq = walker.first_seq
        result.last_seq = walker.next_seq - 1
        result.head_hash = walker.prev_hex
    if not result.ok:
        return result
    if cp is not None:
        _check_checkpoint(result, cp, walker.count, walker.anchored, walker.leaves, strict)
    elif compute_root and walker.anchored:
        result.merkle_root = root_from_leaf_hashes(bytes(walker.leaves)).hex()
    return result


def _read_blocks(path: str | os.PathLike[str], block_size: int) -> Iterable[bytes]:
    with open(path, "rb", buffering=0) as f:
        while block := f.read(block_size):
            yield block


def verify_file(
    path: str | os.PathLike[str],
    checkpoint: Checkpoint | str | os.PathLike[str] | None = None,
    public_key: Ed25519PublicKey | str | os.PathLike[str] | None = None,
    *,
    key_name: str | None = None,
    allow_unsigned: bool = False,
    strict: bool = False,
    allow_partial: bool = False,
    compute_root: bool = False,
    block_size: int = _BLOCK,
) -> VerifyResult:
    """Verify an exported audit log file (JSON Lines, one row a line).

    Args:
        path: the file.
        checkpoint: a :class:`Checkpoint`, a signed checkpoint text, or a path to one.
            When given, rows ``1 .. size`` must exist and their RFC 9162 root must equal
            the checkpoint's root. (A :class:`Checkpoint` object counts as signed when
            its ``signed_by`` is set, that is when it came from :func:`open_checkpoint`.)
        public_key: the log's Ed25519 key (object, PEM/vkey text, or a path); the
            checkpoint's signature is verified under ``key_name`` (default: its origin)
            and a signature that does not verify fails.
        key_name: signature key name, if it differs from the origin.
        allow_unsigned: with a checkpoint and no ``public_key``, trust the checkpoint as
            given (a warning is added) instead of failing.
        strict: fail when the log has rows after the checkpoint's size (by default they
            are counted in ``uncovered_rows`` with a warning).
        allow_partial: accept a range export that starts after ``seq 1`` (its first
            ``prev_hash`` is taken on trust and no checkpoint can be checked).
        compute_root: also compute the Merkle root of all rows (``merkle_root``).
        block_size: bytes read at a time (memory use is about twice this).

    Returns:
        A :class:`VerifyResult`; ``ok`` is False with ``error_line`` and ``error`` at the
        first failure. Verification failures never raise. An empty file is ``ok`` with
        ``rows == 0`` (:attr:`VerifyResult.empty`): nothing was wrong, and nothing was
        verified either; the command lines exit 3 for it.

    Raises:
        OSError: the log, checkpoint or key file can't be read.
    """
    return verify_lines(
        _read_blocks(path, block_size),
        checkpoint,
        public_key,
        key_name=key_name,
        allow_unsigned=allow_unsigned,
        strict=strict,
        allow_partial=allow_partial,
        compute_root=compute_root,
    )


def verify_rows(
    rows: Iterable[tuple[int, bytes, bytes, bytes]],
    *,
    start_seq: int = FIRST_SEQ,
    start_prev_hash: bytes = GENESIS_HASH,
    tenant_id: str | None = None,
    checkpoint: Checkpoint | str | os.PathLike[str] | None = None,
    public_key: Ed25519PublicKey | str | os.PathLike[str] | None = None,
    key_name: str | None = None,
    allow_unsigned: bool = False,
    strict: bool = False,
) -> VerifyResult:
    """Verify rows as stored in the database, in ``seq`` order.

    Args:
        rows: ``(seq, row_bytes, prev_hash, row_hash)`` per row, hashes as raw 32 bytes.
        start_seq: ``seq`` of the first row (default 1).
        start_prev_hash: the ``row_hash`` of row ``start_seq - 1`` (genesis for 1).
        tenant_id: if given, every row body must name this tenant.
        checkpoint, public_key, key_name, allow_unsigned, strict: as for
            :func:`verify_file` (a checkpoint needs ``start_seq == 1``).

    Returns:
        A :class:`VerifyResult` whose ``error_line`` is the 1-based position in ``rows``.
        Checks: canonical row bytes with exactly the body keys, body ``seq`` equal to the
        ``seq`` column and contiguous, stored ``prev_hash`` equal to the previous stored
        ``row_hash``, and ``row_hash == SHA-256(prev_hash || row_bytes)``.
    """
    result = VerifyResult(anchored=start_seq == FIRST_SEQ, tenant_id=tenant_id)
    cp: Checkpoint | None = None
    if checkpoint is not None:
        cp = _open_checkpoint(result, checkpoint, public_key, key_name, allow_unsigned)
        if cp is None:
            return result
    leaves_left = cp.size if cp is not None else 0
    leaves = bytearray()
    expected = start_seq
    prev = start_prev_hash
    pos = 0
    for pos, (seq, row_bytes, prev_hash, stored_hash) in enumerate(rows, start=1):
        reason: str | None = None
        if not is_canonical(row_bytes):
            reason = diagnose_line(row_bytes) or "row bytes are not canonical"
        else:
            body = orjson.loads(row_bytes)
            if "seq" not in body or "tenant_id" not in body:
                reason = "row body lacks seq or tenant_id"
            elif "prev_hash" in body or "row_hash" in body:
                reason = "row body must not contain prev_hash or row_hash"
            elif body["seq"] != seq or type(body["seq"]) is not int:
                reason = f"body seq {body['seq']!r} differs from the stored seq {seq}"
            elif seq != expected:
                reason = f"seq is {seq}, expected {expected}: rows are missing or out of order"
            elif tenant_id is not None and body["tenant_id"] != tenant_id:
                reason = f"row belongs to tenant {body['tenant_id']!r}"
            elif bytes(prev_hash) != prev:
                reason = "prev_hash does not match the previous row_hash: the chain is broken"
            elif hashlib.sha256(prev + bytes(row_bytes)).digest() != bytes(stored_hash):
                reason = "row_hash does not match the row (the row was altered)"
            elif result.tenant_id is None:
                result.tenant_id = body["tenant_id"]
        if reason is not None:
            result.ok = False
            result.error_line = pos
            result.error = f"seq {seq}: {reason}"
            return result
        if result.first_seq is None:
            result.first_seq = seq
        if leaves_left:
            leaves += hashlib.sha256(b"\x00" + bytes(row_bytes)).digest()
            leaves_left -= 1
        result.rows += 1
        result.last_seq = seq
        prev = bytes(stored_hash)
        expected += 1
    if result.rows:
        result.head_hash = prev.hex()
    if cp is not None:
        _check_checkpoint(result, cp, result.rows, result.anchored, leaves, strict)
    return result


class InputError(ValueError):
    """A command-line input can't be used: a file that does not exist or can't be read,
    a key that is not a key. The message names the option (exit status 2)."""


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of the file ``path`` given as ``what`` (an option name).

    Raises:
        InputError: it does not exist, is a directory, can't be read or isn't UTF-8.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what}: {p} does not exist")
    if p.is_dir():
        raise InputError(f"{what}: {p} is a directory, not a file")
    try:
        return p.read_text("utf-8")
    except OSError as exc:
        raise InputError(f"{what}: cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what}: {p} is not UTF-8 text") from None


def read_public_key(source: str | os.PathLike[str], what: str = "--public-key") -> Ed25519PublicKey:
    """The Ed25519 public key in the file ``source`` (PEM or vkey) or, for a ``str`` that
    names no file, in the text itself; errors name ``what`` (an option name).

    Raises:
        InputError: no such file (and not key text), unreadable, or not a usable key.
    """
    text = os.fspath(source)
    try:
        exists = Path(text).exists()
    except (OSError, ValueError):
        exists = False
    if exists or isinstance(source, os.PathLike):
        body = read_text_file(text, what)
        try:
            return load_public_key(body)
        except CheckpointError as exc:
            raise InputError(f"{what}: {text}: {exc}") from None
    try:
        return load_public_key(text)
    except CheckpointError as exc:
        if "+" in text or text.lstrip().startswith("-----BEGIN"):  # meant as key text
            raise InputError(f"{what}: not a usable public key: {exc}") from None
        raise InputError(f"{what}: {text} does not exist (and is not key text)") from None


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mnemovault.audit.verify",
        description="Verify a mnemovault audit log export (JSON Lines): canonical form, "
        "seq, hash links, row hashes; with a checkpoint, also truncation and rewrites.",
        epilog="Exit status: 0 valid, 1 verification failed, 2 bad input (missing or "
        "unreadable file, unusable key, --checkpoint without --public-key or "
        "--allow-unsigned), 3 the log has no rows (nothing to verify).",
    )
    parser.add_argument("file", type=Path, help="the JSON Lines export")
    parser.add_argument("--checkpoint", type=Path, help="a saved signed checkpoint file")
    parser.add_argument(
        "--public-key",
        help="the log's Ed25519 public key: PEM or vkey "
        "file, or vkey text; verifies the checkpoint signature (required with "
        "--checkpoint: this verifier has no data dir to find the deployment's key in)",
    )
    parser.add_argument("--key-name", help="checkpoint signing key name (default: origin)")
    parser.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="with --checkpoint and no --public-key, trust the checkpoint as given "
        "(a warning is printed) instead of failing",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail when rows follow the checkpoint's size (by default: a warning)",
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="accept a range export that does not start at seq 1",
    )
    parser.add_argument("--root", action="store_true", help="print the Merkle root of all rows")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point. Returns 0 (valid), 1 (verification failed), 2 (bad input:
    usage, a missing or unreadable file, an unusable key), 3 (no rows: nothing verified)."""
    args = _build_parser().parse_args(argv)
    if args.public_key and not args.checkpoint:
        print("error: --public-key needs --checkpoint", file=sys.stderr)
        return 2
    if args.strict and not args.checkpoint:
        print("error: --strict needs --checkpoint", file=sys.stderr)
        return 2
    if args.checkpoint and not args.public_key and not args.allow_unsigned:
        print(
            "error: --checkpoint needs --public-key PK to check its signature (this "
            "verifier has no data dir to find the deployment's key in); pass "
            "--allow-unsigned to trust the checkpoint as given",
            file=sys.stderr,
        )
        return 2
    try:
        require_file(args.file, "FILE")
        cp_text = read_text_file(args.checkpoint, "--checkpoint") if args.checkpoint else None
        pk = read_public_key(args.public_key) if args.public_key else None
        result = verify_file(
            args.file,
            cp_text,
            pk,
            key_name=args.key_name,
            allow_unsigned=args.allow_unsigned,
            strict=args.strict,
            allow_partial=args.allow_partial,
            compute_root=args.root,
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read {exc.filename or args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.json:
        print(orjson.dumps(result.to_dict()).decode())
    else:
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if result.empty:
            print(f"{args.file}: {result.summary()}", file=sys.stderr)
        elif result.ok:
            print(result.summary())
        else:
            print(f"{args.file}: {result.summary()}")
    return exit_status(result)


def require_file(path: str | os.PathLike[str], what: str) -> None:
    """Raise :class:`InputError` (naming ``what``) unless ``path`` exists and is no directory."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what}: {path} does not exist")
    if path.is_dir():
        raise InputError(f"{what}: {path} is a directory, not a file")


def exit_status(result: VerifyResult) -> int:
    """0 valid, 1 verification failed, 3 no rows (nothing was verified)."""
    if result.empty:
        return 3
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
