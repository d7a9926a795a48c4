"""The signed erasure receipt (issue 10, item 2): it verifies offline with the public key
(library and ``mnemovault receipt verify``), and every tampered field fails naming it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from mnemovault.audit.checkpoint import write_public_key
from mnemovault.audit.merkle import root
from mnemovault.cli import app as cli_app
from mnemovault.errors import ValidationError
from mnemovault.subjects import receipt as receipts
from mnemovault.vault import MemoryVault
from tests.subjects_world import build


@pytest.fixture
def erased(vault: MemoryVault, tenant: str) -> dict[str, Any]:
    w = build(vault, tenant)
    er = vault.subjects.erase(w.ada, scope="s", principal=vault.principal(tenant))
    assert er.receipt["removed_root"] == root(str(i).encode() for i in sorted(er.deleted)).hex()
    return {"receipt": er.receipt, "deleted": er.deleted}


def _tampered(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return "x"
    if isinstance(value, int):
        return value + 1
    if isinstance(value, dict):
        k = sorted(value)[0]
        return {**value, k: _tampered(value[k])}
    if value and all(c in "0123456789abcdef" for c in value):  # keep hex shapes valid
        return ("1" if value[0] == "0" else "0") + value[1:]
    return value[:-1] + ("x" if value[-1] != "x" else "y")


def test_a_receipt_verifies(vault: MemoryVault, erased: dict[str, Any]) -> None:
    r = erased["receipt"]
    assert vault.subjects.verify_receipt(r)["audit_seq"] == r["audit_seq"]
    assert vault.subjects.verify_receipt(json.dumps(r))["tenant"] == r["tenant"]
    for field in ("request_id", "tenant", "scope", "subject_fingerprint", "counts",
                  "removed_root", "erased_at", "audit_seq"):
        assert field in r
    assert r["counts"]["memories"] == len(erased["deleted"])


@pytest.mark.parametrize("field", [*receipts.FIELDS])
def test_each_tampered_field_fails_naming_it(vault: MemoryVault, erased: dict[str, Any],
                                             field: str) -> None:
    r = copy.deepcopy(erased["receipt"])
    r[field] = _tampered(r[field])
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(r)
    assert info.value.field == field, info.value.message


@pytest.mark.parametrize("field", [*receipts.FIELDS])
def test_a_tampered_digest_fails_naming_it(vault: MemoryVault, erased: dict[str, Any],
                                           field: str) -> None:
    r = copy.deepcopy(erased["receipt"])
    r["digests"][field] = _tampered(r["digests"][field])
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(r)
    assert info.value.field == f"digests.{field}", info.value.message


def test_signature_missing_extra_fields_and_another_key(
        vault: MemoryVault, erased: dict[str, Any], tmp_path: Path) -> None:
    r = copy.deepcopy(erased["receipt"])
    sig = bytearray(r["signature"].encode())
    sig[5] = ord("A") if sig[5] != ord("A") else ord("B")
    r["signature"] = sig.decode()
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(r)
    assert info.value.field == "signature"
    for field in ("counts", "signature", "digests"):
        r = copy.deepcopy(erased["receipt"])
        del r[field]
        with pytest.raises(ValidationError) as info:
            vault.subjects.verify_receipt(r)
        assert info.value.field == field
    r = {**erased["receipt"], "note": "added later"}
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(r)
    assert info.value.field == "note"
    other = tmp_path / "other.pub"
    write_public_key(other, Ed25519PrivateKey.generate().public_key())
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(erased["receipt"], public_key=other)
    assert info.value.field == "signature"
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt("not json")
    assert info.value.field == "receipt"


def test_cli_verifies_offline_with_the_public_key(
        vault: MemoryVault, erased: dict[str, Any], tmp_path: Path) -> None:
    good = tmp_path / "r.json"
    good.write_text(json.dumps(erased["receipt"]))
    pub = Path(str(vault.settings.data_dir)) / "audit_signing.key.pub"
    assert pub.exists()
    runner = CliRunner()
    # offline: a data dir with no database, the public key given
    base = ["--data-dir", str(tmp_path / "nowhere")]
    res = runner.invoke(cli_app, [*base, "receipt", "verify", str(good), "--public-key",
                                  str(pub)])
    assert res.exit_code == 0, res.output
    assert "receipt OK" in res.stdout
    assert not (tmp_path / "nowhere").exists()  # nothing was opened or created
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**erased["receipt"], "tenant": "someone-else"}))
    res = runner.invoke(cli_app, [*base, "receipt", "verify", str(bad), "--public-key",
                                  str(pub), "--json"])
    assert res.exit_code == 2
    assert json.loads(res.stdout) == {"valid": False, "field": "tenant",
                                      "error": json.loads(res.stdout)["error"]}
    assert "tenant" in json.loads(res.stdout)["error"]


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _padding_bit_variant(text: str) -> str:
    """The same bytes in non-canonical base64: the last character before the padding with
    its unused low bits set (a 64-byte signature ends ``X==``: 4 unused bits)."""
    body = text.rstrip("=")
    unused = {2: 4, 1: 2}[len(text) - len(body)]
    last = _B64.index(body[-1])
    assert last % (1 << unused) == 0  # canonical: the unused bits are zero
    return body[:-1] + _B64[last | 1] + text[len(body):]


def test_a_non_canonical_signature_text_is_refused(vault: MemoryVault,
                                                   erased: dict[str, Any]) -> None:
    import base64

    r = copy.deepcopy(erased["receipt"])
    variant = _padding_bit_variant(r["signature"])
    assert variant != r["signature"]
    # a lenient decoder reads both texts as the same signature bytes
    assert base64.b64decode(variant) == base64.b64decode(r["signature"])
    r["signature"] = variant
    with pytest.raises(ValidationError) as info:
        vault.subjects.verify_receipt(r)
    assert info.value.field == "signature"
    for bad in (r["signature"].rstrip("="), r["signature"] + "\n", " " + r["signature"]):
        with pytest.raises(ValidationError) as info:  # missing padding, whitespace
            vault.subjects.verify_receipt({**r, "signature": bad})
        assert info.value.field == "signature"
    with pytest.raises(ValueError):
        receipts.strict_b64decode(variant)
    assert receipts.strict_b64decode(erased["receipt"]["signature"]) == base64.b64decode(
        erased["receipt"]["signature"])
