"""Audit rows, chain, checkpoints and the offline verifier: tampering caught at the right line."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemovault.audit.canonical import CanonicalFormError
from mnemovault.audit.chain import (
    GENESIS_HASH,
    build_row,
    export_line,
    format_ts,
    keyed_fingerprint,
    parse_export_line,
    parse_ts,
    row_hash,
)
from mnemovault.audit.checkpoint import (
    CheckpointError,
    generate_signing_key,
    key_id,
    load_private_key,
    load_public_key,
    open_checkpoint,
    open_note,
    parse_checkpoint_unverified,
    sign_checkpoint,
    sign_note,
    vkey,
    write_public_key,
)
from mnemovault.audit.merkle import MerkleTree, verify_consistency, verify_inclusion
from mnemovault.audit.verify import main, verify_file, verify_lines, verify_rows

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ORIGIN = "mnemovault.test/audit/acme"


def _row_fields(i: int) -> dict[str, Any]:
    """Varied rows: non-ASCII text, floats, nested values, nulls."""
    return {
        "tenant_id": "acme",
        "ts": T0 + timedelta(seconds=i, microseconds=i),
        "operation": ["remember", "recall", "forget", "pin"][i % 4],
        "actor": f"key_{i % 3}",
        "agent": None if i % 5 == 0 else "agent-Ω",
        "memory_ids": [f"00000000-0000-4000-8000-{i:012d}"] * (i % 3),
        "trigger": "chat" if i % 2 else None,
        "provenance": {"source": "api", "run": f"r{i}", "tags": ["ü", "漢字"]},
        "request_id": f"req-{i}",
        "details": {"count": i, "score": i / 7, "tiny": 1e-9 * i, "note": "café ☕ {email:p_1}"},
    }


def build_log(
    n: int, tenant: str = "acme"
) -> tuple[list[bytes], list[tuple[int, bytes, bytes, bytes]]]:
    """Export lines (with newline) and the stored rows they came from."""
    prev = GENESIS_HASH
    lines: list[bytes] = []
    stored: list[tuple[int, bytes, bytes, bytes]] = []
    for i in range(n):
        fields = _row_fields(i) | {"tenant_id": tenant}
        row_bytes, h = build_row(prev_hash=prev, seq=i + 1, **fields)
        lines.append(export_line(row_bytes, prev, h))
        stored.append((i + 1, row_bytes, prev, h))
        prev = h
    return lines, stored


def rechain(lines: list[bytes], start: int = 0) -> list[bytes]:
    """Recompute every hash from line ``start`` on, as a forger would."""
    out = list(lines[:start])
    prev = GENESIS_HASH if start == 0 else bytes.fromhex(orjson.loads(lines[start - 1])["row_hash"])
    for seq, line in enumerate(lines[start:], start=start + 1):
        body = orjson.loads(line)
        del body["prev_hash"], body["row_hash"]
        body["seq"] = seq
        row_bytes, h = build_row(prev_hash=prev, **body)
        out.append(export_line(row_bytes, prev, h))
        prev = h
    return out


def write(tmp_path: Path, lines: list[bytes], name: str = "audit.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(lines))
    return path


def edit(line: bytes, **changes: Any) -> bytes:
    obj = orjson.loads(line)
    obj.update(changes)
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


@pytest.fixture(scope="module")
def log() -> tuple[list[bytes], list[tuple[int, bytes, bytes, bytes]]]:
    return build_log(40)


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def checkpoint_for(lines: list[bytes], size: int, key: Ed25519PrivateKey) -> str:
    tree = MerkleTree.from_leaves(
        parse_export_line(x.rstrip(b"\n")).row_bytes for x in lines[:size]
    )
    return sign_checkpoint(ORIGIN, size, tree.root(), key)


# --------------------------------------------------------------------------- chain


def test_format_ts() -> None:
    assert format_ts(T0) == "2025-03-01T12:00:00.000000Z"
    cet = timezone(timedelta(hours=1))
    assert format_ts(datetime(2025, 3, 1, 13, 0, 0, 5, tzinfo=cet)) == "2025-03-01T12:00:00.000005Z"
    assert format_ts(datetime(999, 1, 2, tzinfo=UTC)) == "0999-01-02T00:00:00.000000Z"
    with pytest.raises(ValueError, match="naive"):
        format_ts(datetime(2025, 1, 1))
    assert parse_ts("2025-03-01T12:00:00.000005Z") == datetime(2025, 3, 1, 12, 0, 0, 5, tzinfo=UTC)
    for bad in [
        "2025-03-01T12:00:00Z",
        "2025-03-01T12:00:00.000000+00:00",
        "2025-3-01T12:00:00.000000Z",
    ]:
        with pytest.raises(ValueError):
            parse_ts(bad)


def test_row_hash_definition() -> None:
    row_bytes, h = build_row(
        prev_hash=GENESIS_HASH, seq=1, tenant_id="t", ts=T0, operation="remember"
    )
    assert row_bytes == (
        b'{"actor":null,"agent":null,"details":{},"memory_ids":[],"operation":"remember",'
        b'"provenance":{},"request_id":null,"seq":1,"tenant_id":"t",'
        b'"trigger":null,"ts":"2025-03-01T12:00:00.000000Z"}'
    )
    import hashlib

    assert h == hashlib.sha256(bytes(32) + row_bytes).digest() == row_hash(GENESIS_HASH, row_bytes)
    with pytest.raises(ValueError):
        row_hash(b"short", row_bytes)


def test_export_line_round_trip(log: tuple[list[bytes], list[Any]]) -> None:
    lines, stored = log
    for line, (seq, row_bytes, prev, h) in zip(lines, stored, strict=True):
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        parsed = parse_export_line(line[:-1])
        assert parsed.seq == seq
        assert parsed.row_bytes == row_bytes
        assert parsed.prev_hash == prev and parsed.row_hash == h


def test_non_ascii_and_float_rows_are_identical_on_read(log: tuple[list[bytes], list[Any]]) -> None:
    lines, stored = log
    line = lines[9]
    assert "café ☕".encode() in line and b"\\u" not in line
    body = parse_export_line(line[:-1]).body
    assert body["details"]["score"] == 9 / 7 and body["details"]["tiny"] == 1e-9 * 9
    assert parse_export_line(line[:-1]).row_bytes == stored[9][1]


@pytest.mark.parametrize("big", [2**53, -(2**53), 10**20])
def test_integer_beyond_2_53_refused_at_write(big: int) -> None:
    with pytest.raises(CanonicalFormError, match=r"\$\.details\.bytes"):
        build_row(
            prev_hash=GENESIS_HASH,
            seq=1,
            tenant_id="t",
            ts=T0,
            operation="x",
            details={"bytes": big},
        )
    build_row(
        prev_hash=GENESIS_HASH,
        seq=1,
        tenant_id="t",
        ts=T0,
        operation="x",
        details={"bytes": 2**53 - 1},
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"seq": 0},
        {"seq": True},
        {"tenant_id": ""},
        {"operation": ""},
        {"ts": "2025-03-01 12:00:00"},
        {"memory_ids": "abc"},
        {"memory_ids": [1]},
        {"actor": 5},
        {"details": {"x": float("nan")}},
        {"provenance": {"x": object()}},
    ],
)
def test_build_row_validates(changes: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"seq": 1, "tenant_id": "t", "ts": T0, "operation": "x"} | changes
    with pytest.raises(CanonicalFormError):
        build_row(prev_hash=GENESIS_HASH, **fields)


def test_keyed_fingerprint() -> None:
    k = b"k" * 32
    fp = keyed_fingerprint(k, "alice@example.com", purpose="subject")
    assert fp.startswith("hmac-sha256:") and len(fp) == 12 + 32
    assert fp == keyed_fingerprint(k, "alice@example.com", purpose="subject")
    assert fp != keyed_fingerprint(k, "alice@example.com", purpose="query")
    assert fp != keyed_fingerprint(b"j" * 32, "alice@example.com", purpose="subject")
    assert "alice" not in fp
    with pytest.raises(ValueError):
        keyed_fingerprint(b"short", "x", purpose="subject")


# --------------------------------------------------------------------------- verify: clean


def test_clean_log_verifies(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines, stored = log
    result = verify_file(write(tmp_path, lines), compute_root=True)
    assert result.ok, result.error
    assert (result.rows, result.first_seq, result.last_seq) == (40, 1, 40)
    assert result.tenant_id == "acme" and result.anchored
    assert result.head_hash == stored[-1][3].hex()
    assert result.merkle_root == MerkleTree.from_leaves(r[1] for r in stored).root().hex()
    assert "OK 40 rows" in result.summary()


def test_empty_file(tmp_path: Path) -> None:
    assert verify_file(write(tmp_path, [])).ok


def test_small_blocks_give_the_same_answer(
    tmp_path: Path, log: tuple[list[bytes], list[Any]]
) -> None:
    lines, _ = log
    path = write(tmp_path, lines)
    assert verify_file(path, block_size=7).ok
    bad = list(lines)
    bad[20] = bad[20].replace(b"req-20", b"req-2X")
    data = b"".join(bad)
    result = verify_lines([data[i : i + 13] for i in range(0, len(data), 13)])
    assert (result.ok, result.error_line) == (False, 21)


# --------------------------------------------------------------------------- verify: tampering


def _fails_at(tmp_path: Path, lines: list[bytes], line: int, *words: str) -> None:
    result = verify_file(write(tmp_path, lines))
    assert not result.ok
    assert result.error_line == line, result.summary()
    assert result.rows == line - 1
    for word in words:
        assert word in (result.error or ""), result.error


def test_changed_byte_caught(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    lines[9] = lines[9].replace(b'"operation":"recall"', b'"operation":"recalm"')
    _fails_at(tmp_path, lines, 10, "row_hash", "altered")


@pytest.mark.parametrize("position", [0, 50, 200, -3])
def test_any_flipped_byte_caught_on_its_line(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], position: int
) -> None:
    lines = list(log[0])
    raw = bytearray(lines[14])
    raw[position - 1 if position < 0 else position] ^= 0x01
    lines[14] = bytes(raw)
    result = verify_file(write(tmp_path, lines))
    assert not result.ok and result.error_line == 15, result.summary()


def test_deleted_row_caught(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    del lines[9]
    _fails_at(tmp_path, lines, 10, "seq is 11, expected 10", "missing")


def test_deleted_first_row_caught(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])[1:]
    _fails_at(tmp_path, lines, 1, "starts at seq 2")
    partial = verify_file(write(tmp_path, lines), allow_partial=True)
    assert partial.ok and not partial.anchored and partial.first_seq == 2
    assert "partial range" in partial.summary()


def test_swapped_rows_caught(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    lines[9], lines[10] = lines[10], lines[9]
    _fails_at(tmp_path, lines, 10, "seq is 11, expected 10")


def test_inserted_copy_caught(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    lines.insert(10, lines[4])
    _fails_at(tmp_path, lines, 11, "seq is 5, expected 11", "repeated")


def test_inserted_forged_row_caught_where_the_chain_breaks(
    tmp_path: Path, log: tuple[list[bytes], list[Any]]
) -> None:
    lines = list(log[0])
    prev = bytes.fromhex(orjson.loads(lines[9])["row_hash"])
    forged_bytes, h = build_row(prev_hash=prev, seq=11, tenant_id="acme", ts=T0, operation="forget")
    lines.insert(10, export_line(forged_bytes, prev, h))
    # The forged row links correctly to row 10, so the break shows on the next line.
    _fails_at(tmp_path, lines, 12, "seq is 11, expected 12")


def test_recomputed_row_hash_caught_at_next_line(
    tmp_path: Path, log: tuple[list[bytes], list[Any]]
) -> None:
    lines = list(log[0])
    row = parse_export_line(lines[9][:-1])
    body = row.body | {"operation": "erase"}
    new_bytes, new_hash = build_row(prev_hash=row.prev_hash, **body)
    lines[9] = export_line(new_bytes, row.prev_hash, new_hash)
    _fails_at(tmp_path, lines, 11, "prev_hash", "line 10", "chain is broken")


def test_truncated_tail_needs_a_checkpoint(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], key: Ed25519PrivateKey
) -> None:
    lines = list(log[0])
    cp = checkpoint_for(lines, len(lines), key)
    truncated = write(tmp_path, lines[:33])
    assert verify_file(truncated).ok
    result = verify_file(truncated, checkpoint=cp, public_key=key.public_key())
    assert not result.ok and result.error_line is None
    assert "33 rows" in (result.error or "") and "truncated" in (result.error or "")


def test_rewritten_chain_needs_a_checkpoint(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], key: Ed25519PrivateKey
) -> None:
    lines = list(log[0])
    cp = checkpoint_for(lines, 30, key)  # an auditor saved this when the log had 30 rows
    forged = list(lines)
    forged[12] = edit(forged[12], operation="erase")
    forged = rechain(forged, start=12)
    path = write(tmp_path, forged)
    assert verify_file(path).ok
    result = verify_file(path, checkpoint=cp, public_key=key.public_key())
    assert not result.ok and "rewritten" in (result.error or "")
    # The honest log passes the same checkpoint, and later rows don't matter to it.
    ok = verify_file(
        write(tmp_path, lines, "honest.jsonl"), checkpoint=cp, public_key=key.public_key()
    )
    assert ok.ok and ok.checkpoint_signature_verified and ok.checkpoint is not None
    assert ok.merkle_root == ok.checkpoint.root_hash.hex()


def test_crlf_rejected_naming_the_line(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = [x.replace(b"\n", b"\r\n") for x in log[0]]
    _fails_at(tmp_path, lines, 1, "carriage return", "CRLF")
    one = list(log[0])
    one[6] = one[6].replace(b"\n", b"\r\n")
    _fails_at(tmp_path, one, 7, "carriage return")


def test_bom_rejected_naming_the_line(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    lines[0] = b"\xef\xbb\xbf" + lines[0]
    _fails_at(tmp_path, lines, 1, "byte order mark")


def test_duplicate_key_rejected_naming_the_line(
    tmp_path: Path, log: tuple[list[bytes], list[Any]]
) -> None:
    lines = list(log[0])
    lines[6] = lines[6].replace(b'{"actor":', b'{"actor":"root","actor":', 1)
    _fails_at(tmp_path, lines, 7, "duplicate key 'actor'")
    nested = list(log[0])
    nested[7] = nested[7].replace(b'"details":{', b'"details":{"count":1,', 1)
    _fails_at(tmp_path, nested, 8, "duplicate key 'count'", "$.details")


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda x: x.replace(b'":', b'": ', 1), ["canonical form"]),
        (lambda x: x.replace(b"caf\xc3\xa9", b"caf\\u00e9"), ["canonical form"]),
        (lambda x: edit(x, extra=1), ["row_hash", "altered"]),
        (
            lambda x: b'{"seq":1}\n',
            ["lacks the chain member(s) ['tenant_id', 'prev_hash', 'row_hash']"],
        ),
        (lambda x: edit(x, tenant_id="other"), ["tenant_id differs"]),
        (lambda x: b"\n", ["empty line"]),
        (lambda x: x[:60] + b"\n", ["invalid JSON"]),
    ],
)
def test_malformed_lines_rejected(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], mutate: Any, words: list[str]
) -> None:
    lines = list(log[0])
    lines[4] = mutate(lines[4])
    _fails_at(tmp_path, lines, 5, *words)


def test_missing_final_newline(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    lines[-1] = lines[-1][:-1]
    _fails_at(tmp_path, lines, 40, "no terminating newline")


def test_integrity_check_does_not_pin_the_field_list(tmp_path: Path) -> None:
    """A row that gained a field still verifies (old and new exports stay checkable);
    the schema itself is parse_export_line's job."""
    lines, _ = build_log(3)
    body = orjson.loads(lines[2])
    prev = bytes.fromhex(body.pop("prev_hash"))
    del body["row_hash"]
    body["scope"] = "team-a"
    row_bytes = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    lines[2] = export_line(row_bytes, prev, row_hash(prev, row_bytes))
    assert verify_file(write(tmp_path, lines)).ok
    with pytest.raises(CanonicalFormError, match="unexpected"):
        parse_export_line(lines[2][:-1])


def test_first_row_must_start_from_genesis(tmp_path: Path) -> None:
    lines, _ = build_log(3)
    lines[0] = edit(lines[0], prev_hash="11" * 32)
    _fails_at(tmp_path, lines, 1, "genesis")


def test_seq_must_be_an_integer(tmp_path: Path) -> None:
    lines, _ = build_log(3)
    lines[1] = edit(lines[1], seq=2.0)
    result = verify_file(write(tmp_path, lines))
    assert not result.ok and result.error_line == 2


# --------------------------------------------------------------------------- database rows


def test_verify_rows(log: tuple[list[bytes], list[tuple[int, bytes, bytes, bytes]]]) -> None:
    _, stored = log
    result = verify_rows(stored, tenant_id="acme")
    assert result.ok and result.rows == 40 and result.head_hash == stored[-1][3].hex()
    tampered = list(stored)
    seq, row_bytes, prev, h = tampered[4]
    assert b"remember" in row_bytes
    tampered[4] = (seq, row_bytes.replace(b"remember", b"remembir"), prev, h)
    bad = verify_rows(tampered)
    assert not bad.ok and bad.error_line == 5 and "altered" in (bad.error or "")
    gap = verify_rows(stored[:5] + stored[6:])
    assert not gap.ok and gap.error_line == 6
    tail = verify_rows(stored[10:], start_seq=11, start_prev_hash=stored[9][3])
    assert tail.ok and not tail.anchored
    assert not verify_rows(stored, tenant_id="other").ok


# --------------------------------------------------------------------------- checkpoints


def test_signed_note_known_answer() -> None:
    """The Go sumdb/note test key signs this text to exactly this signature (Ed25519 is
    deterministic), and its verifier key and key id are the published ones."""
    skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
    vkey_text = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    text = (
        "If you think cryptography is the answer to your problem,\n"
        "then you don't know what your problem is.\n"
    )
    want = (
        text + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2p"
        "ZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    )
    signer = _note_key(skey)
    assert vkey("PeterNeumann", signer) == vkey_text
    assert key_id("PeterNeumann", signer.public_key()).hex() == "c74f20a3"
    assert sign_note(text, signer, "PeterNeumann") == want
    assert open_note(want, load_public_key(vkey_text), "PeterNeumann") == text


def _note_key(text: str) -> Ed25519PrivateKey:
    raw = base64.b64decode(text.split("+", 4)[4])
    return Ed25519PrivateKey.from_private_bytes(raw[1:])


def test_checkpoint_round_trip_and_tampering(key: Ed25519PrivateKey) -> None:
    root = bytes(range(32))
    note = sign_checkpoint(ORIGIN, 123, root, key)
    body, sig = note.split("\n\n")
    assert body == f"{ORIGIN}\n123\n{base64.b64encode(root).decode()}"
    assert sig.startswith(f"— {ORIGIN} ") and sig.endswith("\n")
    cp = open_checkpoint(note, key.public_key())
    assert (cp.origin, cp.size, cp.root_hash, cp.signed_by) == (ORIGIN, 123, root, ORIGIN)
    assert parse_checkpoint_unverified(note).size == 123
    for bad in [
        note.replace("\n123\n", "\n124\n"),
        note.replace(ORIGIN, ORIGIN + "x", 1),
        note[:-3] + ("A" if note[-3] != "A" else "B") + note[-2:],
    ]:
        with pytest.raises(CheckpointError):
            open_checkpoint(bad, key.public_key())
    with pytest.raises(CheckpointError, match="no signature"):
        open_checkpoint(note, Ed25519PrivateKey.generate().public_key())
    # Extra signatures from unknown keys are ignored; extension lines are kept.
    other = Ed25519PrivateKey.generate()
    both = sign_checkpoint(ORIGIN, 5, root, other, name="witness.example", extensions=("ext 1",))
    cp2 = open_checkpoint(both, other.public_key(), "witness.example")
    assert cp2.extensions == ("ext 1",)
    cosigned = both + sign_note(cp2.body, key, ORIGIN).split("\n\n")[1]
    assert open_checkpoint(cosigned, key.public_key()).size == 5


@pytest.mark.parametrize(
    "mangle",
    [
        lambda n: n.replace("\n\n", "\n"),  # no blank line before the signatures
        lambda n: n.replace("\u2014 ", "-- "),  # not an em dash
        lambda n: n + "\n",  # trailing blank line
        lambda n: n[:-1],  # no final newline
        lambda n: n.replace("\n123\n", "\n0123\n"),  # leading zero (also unsigned text)
        lambda n: n.replace(" ", "  ", 1),  # two spaces in the signature line
        lambda n: n.replace("\n\n", "\n\x07\n"),  # control character
        lambda n: n + "".join(f"\u2014 other{i} AAAAAAAA\n" for i in range(100)),
    ],
)
def test_malformed_notes_rejected(mangle: Any, key: Ed25519PrivateKey) -> None:
    note = sign_checkpoint(ORIGIN, 123, bytes(32), key)
    with pytest.raises(CheckpointError):
        open_checkpoint(mangle(note), key.public_key())


def test_checkpoint_under_another_key_name(key: Ed25519PrivateKey) -> None:
    note = sign_checkpoint(ORIGIN, 7, bytes(32), key, name="log-key.example")
    with pytest.raises(CheckpointError, match="no signature"):
        open_checkpoint(note, key.public_key())
    assert open_checkpoint(note, key.public_key(), "log-key.example").size == 7


@pytest.mark.parametrize(
    "args",
    [
        ("", 1, bytes(32)),
        ("a\nb", 1, bytes(32)),
        ("o", -1, bytes(32)),
        ("o", 1, bytes(31)),
        ("has space", 1, bytes(32)),
    ],
)
def test_checkpoint_refuses_bad_fields(
    args: tuple[str, int, bytes], key: Ed25519PrivateKey
) -> None:
    with pytest.raises(CheckpointError):
        sign_checkpoint(*args, key)


def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "audit-signing.pem"
    key = generate_signing_key(path)
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        generate_signing_key(path)
    loaded = load_private_key(path)
    assert vkey("n", loaded) == vkey("n", key)
    if os.name == "posix":
        path.chmod(0o644)
        with pytest.raises(CheckpointError, match="chmod 600"):
            load_private_key(path)
        path.chmod(0o600)
    pem = tmp_path / "pub.pem"
    write_public_key(pem, key)
    vk = tmp_path / "pub.vkey"
    write_public_key(vk, key, name=ORIGIN)
    sources: list[str | Path] = [pem, vk, str(vk), vk.read_text(), pem.read_text()]
    for source in sources:
        assert vkey("n", load_public_key(source)) == vkey("n", key)
    wrong_id = vk.read_text().replace(vk.read_text().split("+")[1], "00000000")
    with pytest.raises(CheckpointError, match="key id"):
        load_public_key(wrong_id)


# --------------------------------------------------------------------------- offline proofs


def test_offline_proofs_from_exported_rows(log: tuple[list[bytes], list[Any]]) -> None:
    _, stored = log
    tree = MerkleTree.from_leaves(r[1] for r in stored)
    from mnemovault.audit.merkle import leaf_hash

    for seq in (1, 17, 40):
        proof = tree.inclusion_proof(seq - 1, 40)
        verify_inclusion(seq - 1, 40, leaf_hash(stored[seq - 1][1]), proof, tree.root())
    verify_consistency(25, 40, tree.consistency_proof(25, 40), tree.root(25), tree.root())


# --------------------------------------------------------------------------- command line


def test_cli(
    tmp_path: Path,
    log: tuple[list[bytes], list[Any]],
    key: Ed25519PrivateKey,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = list(log[0])
    path = write(tmp_path, lines)
    cp_path = tmp_path / "cp.txt"
    cp_path.write_text(checkpoint_for(lines, 40, key))
    pk_path = tmp_path / "pk.vkey"
    write_public_key(pk_path, key, name=ORIGIN)

    assert main([str(path)]) == 0
    assert "OK 40 rows" in capsys.readouterr().out
    assert main([str(path), "--checkpoint", str(cp_path), "--public-key", str(pk_path)]) == 0
    assert "signature verified" in capsys.readouterr().out
    # no key: trusted as given only when asked to (the default now fails, exit 2)
    assert main([str(path), "--checkpoint", str(cp_path), "--allow-unsigned"]) == 0
    assert "not verified" in capsys.readouterr().err

    lines[22] = lines[22].replace(b"req-22", b"req-99")
    bad = write(tmp_path, lines, "bad.jsonl")
    assert main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "line 23:" in out and "row_hash" in out
    assert main([str(bad), "--json"]) == 1
    assert orjson.loads(capsys.readouterr().out)["error_line"] == 23
    assert main([str(tmp_path / "nope.jsonl")]) == 2


def test_python_dash_m(tmp_path: Path, log: tuple[list[bytes], list[Any]]) -> None:
    lines = list(log[0])
    del lines[3]
    path = write(tmp_path, lines)
    proc = subprocess.run(
        [sys.executable, "-m", "mnemovault.audit.verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "line 4:" in proc.stdout


# --------------------------------------------------------------------------- checkpoint trust
# (issue 9, fault 7) Tampered inputs in the manner of sigstore-python's verifier tests: a
# forger who rewrites the log can also write a checkpoint that matches it, signed with a
# key of their own; only the log's own public key tells them apart.


def forged_log_and_checkpoint(
    lines: list[bytes], size: int = 30
) -> tuple[list[bytes], str, Ed25519PrivateKey]:
    """A log rewritten from row 13 on, and a checkpoint over it signed by ANOTHER key
    under the log's own origin (key name), as a forger would make it."""
    forged = list(lines)
    forged[12] = edit(forged[12], operation="erase")
    forged = rechain(forged, start=12)
    forger = Ed25519PrivateKey.generate()
    return forged, checkpoint_for(forged, size, forger), forger


def test_rewritten_log_with_another_keys_checkpoint_fails_without_a_key(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], key: Ed25519PrivateKey
) -> None:
    forged, cp, forger = forged_log_and_checkpoint(log[0])
    path = write(tmp_path, forged)
    # no key: the checkpoint can't be checked, so it fails (and the log is not read)
    result = verify_file(path, cp)
    assert not result.ok and not result.log_checked
    assert "no public key" in (result.error or "")
    assert "not checked" in result.summary()
    # the log's own key: the forger's signature is not the log's
    result = verify_file(path, cp, key.public_key())
    assert not result.ok and "no signature from key" in (result.error or "")
    # explicit trust: passes, and says loudly that nothing vouches for the checkpoint
    trusted = verify_file(path, cp, allow_unsigned=True)
    assert trusted.ok and not trusted.checkpoint_signature_verified
    assert any("not verified" in w for w in trusted.warnings)
    assert "signature NOT verified" in trusted.summary()
    # with a key, allow_unsigned changes nothing: a signature is checked when it can be
    assert not verify_file(path, cp, key.public_key(), allow_unsigned=True).ok
    # a parsed but unverified Checkpoint object counts as unsigned too
    assert not verify_file(path, parse_checkpoint_unverified(cp)).ok
    assert verify_file(path, open_checkpoint(cp, forger.public_key())).ok


def _flip_signature(note: str) -> str:
    body, sig = note.split("\n\n")
    name, blob = sig.rstrip("\n").split(" ")[1:]
    raw = bytearray(base64.b64decode(blob))
    raw[10] ^= 0x01  # inside the Ed25519 signature, after the 4-byte key id
    return f"{body}\n\n\u2014 {name} {base64.b64encode(bytes(raw)).decode()}\n"


def test_a_bad_signature_always_fails(
    tmp_path: Path,
    log: tuple[list[bytes], list[Any]],
    key: Ed25519PrivateKey,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = list(log[0])
    path = write(tmp_path, lines)
    bad = _flip_signature(checkpoint_for(lines, 40, key))
    for allow_unsigned in (False, True):
        result = verify_file(path, bad, key.public_key(), allow_unsigned=allow_unsigned)
        assert not result.ok and "does not verify" in (result.error or ""), result.error
    cp_path = tmp_path / "bad-cp.txt"
    cp_path.write_text(bad)
    pk_path = tmp_path / "pk.vkey"
    write_public_key(pk_path, key, name=ORIGIN)
    args = [str(path), "--checkpoint", str(cp_path), "--public-key", str(pk_path)]
    assert main([*args, "--allow-unsigned"]) == 1
    assert "does not verify" in capsys.readouterr().out


def test_rows_beyond_the_checkpoint_are_reported(
    tmp_path: Path, log: tuple[list[bytes], list[Any]], key: Ed25519PrivateKey
) -> None:
    lines = list(log[0])
    path = write(tmp_path, lines)
    pub = key.public_key()
    result = verify_file(path, checkpoint_for(lines, 30, key), pub)
    assert result.ok and result.rows == 40 and result.uncovered_rows == 10
    want = "10 rows after the checkpoint's size 30 are not covered by it"
    assert any(want in w for w in result.warnings), result.warnings
    assert "10 later rows not covered" in result.summary()
    d = result.to_dict()
    assert d["uncovered_rows"] == 10 and any(want in w for w in d["warnings"])
    strict = verify_file(path, checkpoint_for(lines, 30, key), pub, strict=True)
    assert not strict.ok and want in (strict.error or "") and strict.error_line is None
    one = verify_file(path, checkpoint_for(lines, 39, key), pub)
    assert one.uncovered_rows == 1
    assert any("1 row after the checkpoint's size 39 is not covered" in w for w in one.warnings)
    full = verify_file(path, checkpoint_for(lines, 40, key), pub, strict=True)
    assert full.ok and full.uncovered_rows == 0 and full.warnings == []


def test_verify_rows_against_a_checkpoint(
    log: tuple[list[bytes], list[tuple[int, bytes, bytes, bytes]]], key: Ed25519PrivateKey
) -> None:
    lines, stored = log
    pub = key.public_key()
    cp = checkpoint_for(lines, 30, key)
    result = verify_rows(stored, tenant_id="acme", checkpoint=cp, public_key=pub)
    assert result.ok and result.uncovered_rows == 10 and result.checkpoint_signature_verified
    assert not verify_rows(stored, checkpoint=cp, public_key=pub, strict=True).ok
    short = verify_rows(stored[:20], checkpoint=cp, public_key=pub)
    assert not short.ok and "truncated" in (short.error or "")
    forged, forged_cp, _ = forged_log_and_checkpoint(lines)
    rewritten = verify_rows(stored, checkpoint=checkpoint_for(forged, 30, key), public_key=pub)
    assert not rewritten.ok and "rewritten" in (rewritten.error or "")
    assert not verify_rows(stored, checkpoint=forged_cp, public_key=pub).ok
    assert not verify_rows(stored, checkpoint=cp).ok  # no key, not allowed
    assert verify_rows(stored, checkpoint=cp, allow_unsigned=True).ok


def test_standalone_checkpoint_needs_a_key_or_allow_unsigned(
    tmp_path: Path,
    log: tuple[list[bytes], list[Any]],
    key: Ed25519PrivateKey,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forged, cp, _ = forged_log_and_checkpoint(log[0])
    path = write(tmp_path, forged)
    cp_path = tmp_path / "cp.txt"
    cp_path.write_text(cp)
    assert main([str(path), "--checkpoint", str(cp_path)]) == 2
    err = capsys.readouterr().err
    assert "--public-key" in err and "--allow-unsigned" in err and "no data dir" in err
    assert main([str(path), "--checkpoint", str(cp_path), "--allow-unsigned"]) == 0
    captured = capsys.readouterr()
    assert "warning: checkpoint signature not verified" in captured.err
    assert "signature NOT verified" in captured.out
    pk_path = tmp_path / "pk.vkey"
    write_public_key(pk_path, key, name=ORIGIN)
    assert main([str(path), "--checkpoint", str(cp_path), "--public-key", str(pk_path)]) == 1
    assert "no signature from key" in capsys.readouterr().out
    # --strict and rows after the checkpoint; --json carries the count and the warning
    honest = write(tmp_path, list(log[0]), "honest.jsonl")
    cp_path.write_text(checkpoint_for(list(log[0]), 30, key))
    args = [str(honest), "--checkpoint", str(cp_path), "--public-key", str(pk_path)]
    assert main(args) == 0
    assert "10 rows after the checkpoint's size 30 are not covered" in capsys.readouterr().err
    assert main([*args, "--json"]) == 0
    d = orjson.loads(capsys.readouterr().out)
    assert d["uncovered_rows"] == 10 and d["checkpoint"]["signature_verified"] is True
    assert any("not covered" in w for w in d["warnings"])
    assert main([*args, "--strict"]) == 1
    assert "not covered" in capsys.readouterr().out
    assert main([str(honest), "--strict"]) == 2
    assert "--strict needs --checkpoint" in capsys.readouterr().err


def test_missing_files_are_named_not_misread_as_key_text(
    tmp_path: Path,
    log: tuple[list[bytes], list[Any]],
    key: Ed25519PrivateKey,
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = list(log[0])
    path = write(tmp_path, lines)
    cp_path = tmp_path / "cp.txt"
    cp_path.write_text(checkpoint_for(lines, 40, key))
    nope = tmp_path / "nope.pub"
    assert main([str(path), "--checkpoint", str(cp_path), "--public-key", str(nope)]) == 2
    err = capsys.readouterr().err
    assert f"--public-key: {nope} does not exist" in err and "base64" not in err
    assert main([str(path), "--checkpoint", str(cp_path), "--public-key", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([str(path), "--checkpoint", str(tmp_path / "cp-nope.txt"), "--allow-unsigned"]) == 2
    assert "--checkpoint:" in capsys.readouterr().err
    assert main([str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # vkey text with a wrong id is reported as a key problem, not as a missing file
    bad_vkey = vkey(ORIGIN, key).replace(vkey(ORIGIN, key).split("+")[1], "00000000")
    assert main([str(path), "--checkpoint", str(cp_path), "--public-key", bad_vkey]) == 2
    assert "key id does not match" in capsys.readouterr().err
    # the library: a Path that does not exist is a missing file, a str says both
    with pytest.raises(FileNotFoundError):
        load_public_key(nope)
    with pytest.raises(CheckpointError, match="no file named"):
        load_public_key(str(nope))
    if os.name == "posix" and os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.pub"
        write_public_key(locked, key)
        locked.chmod(0)
        assert main([str(path), "--checkpoint", str(cp_path), "--public-key", str(locked)]) == 2
        assert "cannot read" in capsys.readouterr().err


def test_empty_log_is_nothing_to_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [])
    result = verify_file(path)
    assert result.ok and result.empty and result.rows == 0
    assert "NO ROWS" in result.summary() and "OK" not in result.summary()
    assert main([str(path)]) == 3
    captured = capsys.readouterr()
    assert "NO ROWS" in captured.err and "OK" not in captured.out
    assert main([str(path), "--json"]) == 3
    assert orjson.loads(capsys.readouterr().out)["empty"] is True


def test_signing_public_key_from_the_key_file_or_its_pub(tmp_path: Path) -> None:
    from mnemovault.audit.checkpoint import signing_public_key

    path = tmp_path / "audit_signing.key"
    assert signing_public_key(path) is None
    key = generate_signing_key(path)
    found = signing_public_key(path)
    assert found is not None and found[1] == path
    assert vkey("n", found[0]) == vkey("n", key)
    write_public_key(tmp_path / "audit_signing.key.pub", key, name=ORIGIN)
    path.unlink()
    found = signing_public_key(path)
    assert found is not None and found[1].name == "audit_signing.key.pub"
    assert vkey("n", found[0]) == vkey("n", key)
    (tmp_path / "audit_signing.key.pub").write_text("garbage\n")
    with pytest.raises(CheckpointError):
        signing_public_key(path)
