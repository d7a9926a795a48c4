"""``mnemovault audit verify``: the deployment's own key by default, unverifiable checkpoints
refused unless ``--allow-unsigned``, rows after the checkpoint reported (``--strict`` fails),
missing files named, nothing-to-verify is exit 3 (issue 9, faults 7 and 8).

Exit codes: 0 valid, 1 verification failed, 2 bad input, 3 nothing to verify, 7 the
deployment's signing key is unusable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from mnemovault.audit import log as audit_log
from mnemovault.audit.checkpoint import (
    generate_signing_key,
    parse_checkpoint_unverified,
    sign_checkpoint,
    write_public_key,
)
from mnemovault.cli import app
from mnemovault.vault import MemoryVault
from tests.test_audit_verify import (
    ORIGIN,
    _flip_signature,
    build_log,
    checkpoint_for,
    forged_log_and_checkpoint,
    write,
)

runner = CliRunner()


def _cli(data_dir: Path, *args: str, tenant: str | None = None) -> Any:
    pre = ["--data-dir", str(data_dir)] + (["--tenant", tenant] if tenant else [])
    return runner.invoke(app, [*pre, "audit", "verify", *args])


@pytest.fixture(autouse=True)
def _no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMOVAULT_AUDIT_SIGNING_KEY", raising=False)


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    return build_log(40)[0]


@pytest.fixture
def deployment(tmp_path: Path) -> tuple[Path, Ed25519PrivateKey]:
    """A data dir holding an audit signing key (as the service creates it) and no database."""
    d = tmp_path / "deployment"
    d.mkdir()
    return d, generate_signing_key(d / "audit_signing.key")


# --------------------------------------------------------------------------- FILE, no database


def test_forged_checkpoint_fails_by_default_and_passes_only_when_allowed(
    tmp_path: Path, lines: list[bytes], deployment: tuple[Path, Ed25519PrivateKey]
) -> None:
    forged, cp, _ = forged_log_and_checkpoint(lines)
    log_file = write(tmp_path, forged)
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(cp)
    args = (str(log_file), "--checkpoint", str(cp_file))

    keyless = tmp_path / "keyless"  # a data dir with no signing key: nothing to check with
    res = _cli(keyless, *args)
    assert res.exit_code == 2, res.output
    assert "no public key" in res.stderr and "--allow-unsigned" in res.stderr
    assert "audit_signing.key" in res.stderr and res.stdout == ""

    res = _cli(keyless, *args, "--allow-unsigned")
    assert res.exit_code == 0, res.output
    assert "warning: checkpoint signature not verified" in res.stderr
    assert "signature NOT verified" in res.stdout

    # the deployment's own key is used without --public-key: the forger's signature fails,
    # and --allow-unsigned does not excuse a signature that was checked
    data_dir, _ = deployment
    for extra in ((), ("--allow-unsigned",)):
        res = _cli(data_dir, *args, *extra)
        assert res.exit_code == 1, res.output
        assert "no signature from key" in res.stderr
    res = _cli(data_dir, *args, "--json")
    assert res.exit_code == 1 and json.loads(res.stdout)["ok"] is False


def test_the_deployment_key_verifies_an_honest_checkpoint(
    tmp_path: Path,
    lines: list[bytes],
    deployment: tuple[Path, Ed25519PrivateKey],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data_dir, key = deployment
    log_file = write(tmp_path, lines)
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(checkpoint_for(lines, 40, key))
    args = (str(log_file), "--checkpoint", str(cp_file))
    res = _cli(data_dir, *args)
    assert res.exit_code == 0, res.output
    assert f"signature verified with this deployment's key {data_dir / 'audit_signing.key'}" in (
        res.stdout
    )
    d = json.loads(_cli(data_dir, *args, "--json").stdout)
    assert d["checkpoint"]["signature_verified"] and "audit_signing.key" in d["checkpoint"]["key"]

    # only the public half present (a verifier that may not read the private key)
    pub_only = tmp_path / "pub-only"
    pub_only.mkdir()
    write_public_key(pub_only / "audit_signing.key.pub", key, name=ORIGIN)
    res = _cli(pub_only, *args)
    assert res.exit_code == 0 and "audit_signing.key.pub" in res.stdout, res.output

    # MNEMOVAULT_AUDIT_SIGNING_KEY names the key file, as for the service
    monkeypatch.setenv("MNEMOVAULT_AUDIT_SIGNING_KEY", str(data_dir / "audit_signing.key"))
    res = _cli(tmp_path / "elsewhere", *args)
    assert res.exit_code == 0 and "signature verified" in res.stdout, res.output

    # an explicit --public-key wins over the deployment's key
    other = Ed25519PrivateKey.generate()
    other_pub = tmp_path / "other.vkey"
    write_public_key(other_pub, other, name=ORIGIN)
    res = _cli(data_dir, *args, "--public-key", str(other_pub))
    assert res.exit_code == 1 and "no signature from key" in res.stderr, res.output


def test_a_bad_signature_fails(
    tmp_path: Path, lines: list[bytes], deployment: tuple[Path, Ed25519PrivateKey]
) -> None:
    data_dir, key = deployment
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(_flip_signature(checkpoint_for(lines, 40, key)))
    for extra in ((), ("--allow-unsigned",)):
        res = _cli(data_dir, str(write(tmp_path, lines)), "--checkpoint", str(cp_file), *extra)
        assert res.exit_code == 1, res.output
        assert "does not verify" in res.stderr


def test_rows_after_the_checkpoint_warn_and_fail_under_strict(
    tmp_path: Path, lines: list[bytes], deployment: tuple[Path, Ed25519PrivateKey]
) -> None:
    data_dir, key = deployment
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(checkpoint_for(lines, 30, key))
    args = (str(write(tmp_path, lines)), "--checkpoint", str(cp_file))
    want = "10 rows after the checkpoint's size 30 are not covered by it"
    res = _cli(data_dir, *args)
    assert res.exit_code == 0, res.output
    assert f"warning: {want}" in res.stderr and "10 later rows not covered" in res.stdout
    d = json.loads(_cli(data_dir, *args, "--json").stdout)
    assert d["uncovered_rows"] == 10 and any(want in w for w in d["warnings"])
    res = _cli(data_dir, *args, "--strict")
    assert res.exit_code == 1 and want in res.stderr and "strict" in res.stderr, res.output


def test_missing_files_are_named(
    tmp_path: Path, lines: list[bytes], deployment: tuple[Path, Ed25519PrivateKey]
) -> None:
    data_dir, key = deployment
    log_file = write(tmp_path, lines)
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(checkpoint_for(lines, 40, key))
    nope = tmp_path / "nope.pub"
    res = _cli(data_dir, str(log_file), "--checkpoint", str(cp_file), "--public-key", str(nope))
    assert res.exit_code == 2, res.output
    assert f"--public-key: {nope} does not exist" in res.stderr and "base64" not in res.stderr
    res = _cli(data_dir, str(log_file), "--checkpoint", str(tmp_path / "cp-nope.txt"))
    assert res.exit_code == 2 and "--checkpoint:" in res.stderr and "does not exist" in res.stderr
    res = _cli(data_dir, str(tmp_path / "nope.jsonl"))
    assert res.exit_code == 2 and "does not exist" in res.stderr, res.output
    res = _cli(data_dir, str(log_file), "--public-key", str(nope))
    assert res.exit_code == 2 and "--public-key needs --checkpoint" in res.stderr
    res = _cli(data_dir, str(log_file), "--strict")
    assert res.exit_code == 2 and "--strict needs --checkpoint" in res.stderr


def test_an_unusable_deployment_key_is_a_configuration_error(
    tmp_path: Path, lines: list[bytes]
) -> None:
    data_dir = tmp_path / "broken"
    data_dir.mkdir()
    (data_dir / "audit_signing.key").write_bytes(b"not a key\n")
    (data_dir / "audit_signing.key").chmod(0o600)
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(checkpoint_for(lines, 40, Ed25519PrivateKey.generate()))
    res = _cli(data_dir, str(write(tmp_path, lines)), "--checkpoint", str(cp_file))
    assert res.exit_code == 7, res.output
    assert "audit signing key" in res.stderr


def test_nothing_to_verify_is_exit_3(tmp_path: Path) -> None:
    empty = write(tmp_path, [], "empty.jsonl")
    res = _cli(tmp_path / "dd", str(empty))
    assert res.exit_code == 3, res.output
    assert "NO ROWS" in res.stderr and "OK" not in res.output
    res = _cli(tmp_path / "dd", str(empty), "--json")
    assert res.exit_code == 3 and json.loads(res.stdout)["empty"] is True
    # a data dir with no database: say so, and don't create one to find that out
    fresh = tmp_path / "fresh"
    res = _cli(fresh)
    assert res.exit_code == 3, res.output
    assert "no database" in res.stderr and "OK" not in res.output
    assert not fresh.exists()


# --------------------------------------------------------------------------- the database


def _append(vault: MemoryVault, tenant: str, n: int) -> None:
    for _ in range(n):
        with vault.db.transaction(tenant) as conn:
            audit_log.append(conn, tenant=tenant, operation="TEST", actor="t")


def test_database_chain_against_a_saved_checkpoint(
    vault: MemoryVault, tenant: str, data_dir: Path, tmp_path: Path
) -> None:
    _append(vault, tenant, 5)
    owner = vault.principal(tenant)
    note = vault.audit.checkpoint(owner, sign_now=True)["note"]
    cp_file = tmp_path / "cp.txt"
    cp_file.write_text(note)
    size = parse_checkpoint_unverified(note).size

    res = _cli(data_dir, "--checkpoint", str(cp_file), tenant=tenant)
    assert res.exit_code == 0, res.output
    assert "signature verified with this deployment's key" in res.stdout

    _append(vault, tenant, 3)
    res = _cli(data_dir, "--checkpoint", str(cp_file), tenant=tenant)
    assert res.exit_code == 0, res.output
    assert f"3 rows after the checkpoint's size {size} are not covered by it" in res.stderr
    d = json.loads(_cli(data_dir, "--checkpoint", str(cp_file), "--json", tenant=tenant).stdout)
    assert d["uncovered_rows"] == 3 and d["source"] == f"tenant {tenant!r} in the database"
    res = _cli(data_dir, "--checkpoint", str(cp_file), "--strict", tenant=tenant)
    assert res.exit_code == 1, res.output

    # the same tree signed by another key under the same origin: refused
    cp = parse_checkpoint_unverified(note)
    forged = tmp_path / "forged.txt"
    forged.write_text(
        sign_checkpoint(cp.origin, cp.size, cp.root_hash, Ed25519PrivateKey.generate())
    )
    res = _cli(data_dir, "--checkpoint", str(forged), "--allow-unsigned", tenant=tenant)
    assert res.exit_code == 1 and "no signature from key" in res.stderr, res.output

    res = _cli(data_dir, tenant=tenant)
    assert res.exit_code == 0 and f"OK {size + 3} rows" in res.stdout, res.output


def test_database_tenant_with_no_rows_is_exit_3(vault: MemoryVault, data_dir: Path) -> None:
    res = _cli(data_dir, tenant="nobody-has-written-here")
    assert res.exit_code == 3, res.output
    assert "NO ROWS" in res.stderr and "no audit rows" in res.stderr and "OK" not in res.output
