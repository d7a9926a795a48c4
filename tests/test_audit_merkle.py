"""RFC 9162 Merkle trees: published vectors, a reference implementation, random trees."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemovault.audit.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MerkleTree,
    ProofError,
    consistency_proof,
    consistency_proof_node_ids,
    inclusion_proof,
    inclusion_proof_node_ids,
    leaf_hash,
    node_hash,
    range_root,
    root,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)

VECTORS = (
    Path(__file__).resolve().parents[2] / "shared" / "datasets" / "rfc6962_vectors" / "testdata"
)

# The leaves of transparency-dev/merkle's reference tree (the happy-path vectors use it).
REFERENCE_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]


# --------------------------------------------------------------------------- reference
# Straight from the RFC 9162 text (sections 2.1.1, 2.1.3.1, 2.1.4.1), recursive, slow.


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


# --------------------------------------------------------------------------- vectors


def _vector_files(kind: str) -> list[Path]:
    folder = VECTORS / kind
    if not folder.is_dir():
        return []
    return sorted(folder.rglob("*.json"))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(VECTORS)) for p in paths]


_INCLUSION = _vector_files("inclusion")
_CONSISTENCY = _vector_files("consistency")


def _need_vectors(files: list[Path]) -> None:
    if not files:
        pytest.skip(f"RFC 6962 vectors not found under {VECTORS}")


def test_vectors_present_or_skipped() -> None:
    _need_vectors(_INCLUSION)
    assert len(_INCLUSION) > 50 and len(_CONSISTENCY) > 50


@pytest.mark.parametrize("path", _INCLUSION or [None], ids=_ids(_INCLUSION) or ["missing"])
def test_inclusion_vector(path: Path | None) -> None:
    if path is None:
        pytest.skip(f"RFC 6962 vectors not found under {VECTORS}")
    v: dict[str, Any] = json.loads(path.read_text())
    proof = [_b64(p) for p in v["proof"] or []]
    args = (v["leafIdx"], v["treeSize"], _b64(v["leafHash"]), proof, _b64(v["root"]))
    if v["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("path", _CONSISTENCY or [None], ids=_ids(_CONSISTENCY) or ["missing"])
def test_consistency_vector(path: Path | None) -> None:
    if path is None:
        pytest.skip(f"RFC 6962 vectors not found under {VECTORS}")
    v: dict[str, Any] = json.loads(path.read_text())
    proof = [_b64(p) for p in v["proof"] or []]
    args = (v["size1"], v["size2"], proof, _b64(v["root1"]), _b64(v["root2"]))
    if v["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_happy_path_vectors_are_what_we_generate() -> None:
    """Our proof generation reproduces the published happy-path proofs byte for byte."""
    _need_vectors(_INCLUSION)
    tree = MerkleTree.from_leaves(REFERENCE_LEAVES)
    checked = 0
    for path in _INCLUSION:
        if path.name != "happy-path.json":
            continue
        v = json.loads(path.read_text())
        if _b64(v["root"]) != tree.root(v["treeSize"]):
            continue
        assert tree.inclusion_proof(v["leafIdx"], v["treeSize"]) == [
            _b64(p) for p in v["proof"] or []
        ]
        assert tree.leaf_hash(v["leafIdx"]) == _b64(v["leafHash"])
        checked += 1
    for path in _CONSISTENCY:
        if path.name != "happy-path.json":
            continue
        v = json.loads(path.read_text())
        if _b64(v["root2"]) != tree.root(v["size2"]):
            continue
        assert tree.consistency_proof(v["size1"], v["size2"]) == [_b64(p) for p in v["proof"] or []]
        checked += 1
    assert checked >= 8


def test_reference_roots() -> None:
    # Roots of the reference tree at sizes 1..8 (transparency-dev/merkle, RFC 6962).
    expected = {
        1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    }
    for n, want in expected.items():
        assert root(REFERENCE_LEAVES[:n]).hex() == want
        assert ref_mth(REFERENCE_LEAVES[:n]).hex() == want


# --------------------------------------------------------------------------- generation


def test_empty_tree() -> None:
    assert root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert MerkleTree([]).root() == EMPTY_ROOT
    assert CompactRange().root() == EMPTY_ROOT
    assert root_from_leaf_hashes(b"") == EMPTY_ROOT


def test_hash_domain_separation() -> None:
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()


@pytest.mark.parametrize("n", range(1, 41))
def test_generation_matches_reference(n: int) -> None:
    leaves = [i.to_bytes(2, "big") * (i % 3) for i in range(n)]
    tree = MerkleTree.from_leaves(leaves)
    assert tree.root() == ref_mth(leaves)
    compact = CompactRange()
    stored: dict[tuple[int, int], bytes] = {}
    for i, data in enumerate(leaves):
        for level, index, h in compact.append(leaf_hash(data)):
            stored[(level, index)] = h
            assert tree.node(level, index) == h
        assert compact.root() == tree.root(i + 1) == ref_mth(leaves[: i + 1])
    resumed = CompactRange(compact.size, compact.peaks)
    assert resumed.root() == compact.root()
    for size in range(1, n + 1):
        assert tree.root(size) == ref_mth(leaves[:size])
        for m in range(size):
            proof = tree.inclusion_proof(m, size)
            assert proof == ref_path(m, leaves[:size])
            # A store that holds only the completed perfect nodes can answer too.
            assert all(key in stored for key in inclusion_proof_node_ids(m, size))
            assert inclusion_proof(m, size, lambda lv, ix: stored[(lv, ix)]) == proof
            verify_inclusion(m, size, tree.leaf_hash(m), proof, tree.root(size))
        for m in range(1, size + 1):
            proof = tree.consistency_proof(m, size)
            assert proof == ref_subproof(m, leaves[:size], True)
            assert all(key in stored for key in consistency_proof_node_ids(m, size))
            verify_consistency(m, size, proof, tree.root(m), tree.root(size))


def test_module_functions_accept_leaf_hash_lists() -> None:
    hashes = [leaf_hash(bytes([i])) for i in range(11)]
    tree = MerkleTree(hashes)
    assert inclusion_proof(3, 7, hashes) == tree.inclusion_proof(3, 7)
    assert consistency_proof(3, 11, hashes) == tree.consistency_proof(3, 11)
    assert root_from_leaf_hashes(hashes) == tree.root() == root_from_leaf_hashes(b"".join(hashes))


def test_out_of_range_requests() -> None:
    tree = MerkleTree.from_leaves([b"a", b"b", b"c"])
    with pytest.raises(ProofError):
        tree.inclusion_proof(3, 3)
    with pytest.raises(ProofError):
        tree.inclusion_proof(0, 4)
    with pytest.raises(ProofError):
        tree.consistency_proof(0, 3)
    with pytest.raises(ProofError):
        tree.consistency_proof(3, 2)
    with pytest.raises(ValueError):
        range_root(tree.node, 1, 3)  # not an RFC 9162 subtree
    with pytest.raises(IndexError):
        tree.node(1, 1)  # leaves 2..3 are not all present


def test_large_tree_proofs_are_logarithmic() -> None:
    n = (1 << 16) + 3
    tree = MerkleTree(b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n)))
    calls = 0

    def counting(level: int, index: int) -> bytes:
        nonlocal calls
        calls += 1
        return tree.node(level, index)

    proof = inclusion_proof(12345, n, counting)
    assert len(proof) == 17 and calls <= 2 * 17
    verify_inclusion(12345, n, tree.leaf_hash(12345), proof, tree.root())
    calls = 0
    proof = consistency_proof(40000, n, counting)
    assert calls <= 2 * 17
    verify_consistency(40000, n, proof, tree.root(40000), tree.root())


# --------------------------------------------------------------------------- bit flips


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def test_every_single_bit_flip_fails_small_trees() -> None:
    """Trees of 1..9 leaves: every proof, every bit of every proof hash."""
    n = 9
    tree = MerkleTree.from_leaves([bytes([i]) for i in range(n)])
    for size in range(1, n + 1):
        r = tree.root(size)
        for m in range(size):
            lh = tree.leaf_hash(m)
            proof = tree.inclusion_proof(m, size)
            for k in range(len(proof)):
                for bit in range(256):
                    bad = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
                    with pytest.raises(ProofError):
                        verify_inclusion(m, size, lh, bad, r)
            for bit in range(0, 256, 7):
                with pytest.raises(ProofError):
                    verify_inclusion(m, size, _flip(lh, bit), proof, r)
                with pytest.raises(ProofError):
                    verify_inclusion(m, size, lh, proof, _flip(r, bit))
        for m in range(1, size):
            proof = tree.consistency_proof(m, size)
            r1 = tree.root(m)
            for k in range(len(proof)):
                for bit in range(256):
                    bad = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
                    with pytest.raises(ProofError):
                        verify_consistency(m, size, bad, r1, r)
            for bit in range(0, 256, 7):
                with pytest.raises(ProofError):
                    verify_consistency(m, size, proof, _flip(r1, bit), r)
                with pytest.raises(ProofError):
                    verify_consistency(m, size, proof, r1, _flip(r, bit))


@st.composite
def _tree_and_sizes(draw: st.DrawFn) -> tuple[list[bytes], int, int, int]:
    n = draw(st.integers(1, 300))
    leaves = draw(st.lists(st.binary(max_size=8), min_size=n, max_size=n))
    size = draw(st.integers(1, n))
    index = draw(st.integers(0, size - 1))
    older = draw(st.integers(1, size))
    return leaves, size, index, older


@given(_tree_and_sizes(), st.data())
@settings(max_examples=150, deadline=None)
def test_random_trees(case: tuple[list[bytes], int, int, int], data: st.DataObject) -> None:
    leaves, size, index, older = case
    tree = MerkleTree.from_leaves(leaves)
    r = tree.root(size)
    assert r == root(leaves[:size])
    lh = tree.leaf_hash(index)

    proof = tree.inclusion_proof(index, size)
    verify_inclusion(index, size, lh, proof, r)
    targets = ["leaf", "root"] + [f"proof{k}" for k in range(len(proof))]
    target = data.draw(st.sampled_from(targets))
    bit = data.draw(st.integers(0, 255))
    bad_proof = list(proof)
    bad_leaf, bad_root = lh, r
    if target == "leaf":
        bad_leaf = _flip(lh, bit)
    elif target == "root":
        bad_root = _flip(r, bit)
    else:
        k = int(target[5:])
        bad_proof[k] = _flip(proof[k], bit)
    with pytest.raises(ProofError):
        verify_inclusion(index, size, bad_leaf, bad_proof, bad_root)
    if size > 1:
        with pytest.raises(ProofError):
            verify_inclusion(index, size, lh, proof[:-1], r)
    with pytest.raises(ProofError):
        verify_inclusion(index, size, lh, [*proof, r], r)

    r1 = tree.root(older)
    cproof = tree.consistency_proof(older, size)
    verify_consistency(older, size, cproof, r1, r)
    if older < size:
        targets = ["root1", "root2"] + [f"proof{k}" for k in range(len(cproof))]
        target = data.draw(st.sampled_from(targets))
        bit = data.draw(st.integers(0, 255))
        bad_c, bad_r1, bad_r2 = list(cproof), r1, r
        if target == "root1":
            bad_r1 = _flip(r1, bit)
        elif target == "root2":
            bad_r2 = _flip(r, bit)
        else:
            k = int(target[5:])
            bad_c[k] = _flip(cproof[k], bit)
        with pytest.raises(ProofError):
            verify_consistency(older, size, bad_c, bad_r1, bad_r2)
        with pytest.raises(ProofError):
            verify_consistency(older, size, cproof[:-1], r1, r)
