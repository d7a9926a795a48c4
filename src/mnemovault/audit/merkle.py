"""RFC 9162 (RFC 6962) Merkle tree hashing, proofs and proof verification.

Hashing (RFC 9162 section 2.1.1), with SHA-256:

* empty tree: ``MTH({}) = SHA-256("")``;
* leaf: ``SHA-256(0x00 || data)``;
* interior node: ``SHA-256(0x01 || left || right)``; a tree of ``n > 1`` leaves splits at
  ``k``, the largest power of two smaller than ``n``.

Node addressing. A *perfect node* ``(level, index)`` is the root of the perfect subtree
over leaves ``[index * 2**level, (index + 1) * 2**level)``; level 0 nodes are leaf
hashes. Perfect nodes never change once their leaves exist, so they can be cached or
stored (a database table keyed by ``(tenant, level, index)``) and any root or proof is
assembled from O(log n) of them. Every function that generates something takes a
:data:`NodeGetter` ``get_node(level, index) -> bytes``; :class:`MerkleTree` is the
in-memory one, and :func:`inclusion_proof_node_ids` / :func:`consistency_proof_node_ids`
list the nodes a proof needs so a store can fetch them in one query.

Proofs are lists of hashes ordered from the leaf (or the older tree) upwards, exactly as
RFC 9162 sections 2.1.3.1 (PATH) and 2.1.4.1 (PROOF/SUBPROOF) define them; verification
follows the algorithms of sections 2.1.3.2 and 2.1.4.2 step by step. Verifiers never
assume a hash length except for the leaf hash, which must be 32 bytes; proof nodes and
roots of other lengths simply fail to match (the transparency-dev/merkle vectors test
both).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "MerkleTree",
    "NodeGetter",
    "ProofError",
    "consistency_proof",
    "consistency_proof_node_ids",
    "inclusion_proof",
    "inclusion_proof_node_ids",
    "leaf_hash",
    "node_hash",
    "range_root",
    "root",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE: Final[int] = 32
#: Root of the empty tree, ``SHA-256("")`` (RFC 9162 section 2.1.1).
EMPTY_ROOT: Final[bytes] = hashlib.sha256(b"").digest()

#: ``get_node(level, index)`` -> hash of the perfect subtree over leaves
#: ``[index << level, (index + 1) << level)``.
NodeGetter = Callable[[int, int], bytes]

_sha256 = hashlib.sha256


class ProofError(ValueError):
    """A Merkle proof failed verification, or a proof request is out of range.

    The message gives the reason (for example ``"calculated root does not match"``).
    """


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: the RFC 9162 leaf hash (32 bytes)."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the RFC 9162 interior node hash (32 bytes)."""
    return _sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


# --------------------------------------------------------------------------- roots


def _next_level(blob: bytes) -> bytes:
    """Hash pairs of adjacent 32-byte nodes; an odd last node moves up unchanged."""
    sha = _sha256
    n = len(blob) // HASH_SIZE
    pairs = n // 2
    out = b"".join([sha(b"\x01" + blob[i : i + 64]).digest() for i in range(0, pairs * 64, 64)])
    if n % 2:
        out += blob[pairs * 64 :]
    return out


def _levels_of(blob: bytes) -> list[bytes]:
    """All levels of the tree over ``blob`` (concatenated leaf hashes), bottom first.

    Level ``L`` holds the perfect nodes of level ``L`` followed, if the tree size is not
    a multiple of ``2**L``, by one carried node that is *not* a perfect node.
    """
    levels = [blob]
    while len(levels[-1]) > HASH_SIZE:
        levels.append(_next_level(levels[-1]))
    return levels


def root_from_leaf_hashes(leaf_hashes: bytes | Sequence[bytes]) -> bytes:
    """RFC 9162 root over leaf hashes.

    Args:
        leaf_hashes: 32-byte leaf hashes, as a sequence or concatenated into one bytes
            object (the faster form: ``len`` must be a multiple of 32).

    Returns:
        The 32-byte root; :data:`EMPTY_ROOT` for no leaves.

    Pairing adjacent nodes level by level and carrying an odd last node up unchanged
    gives the same tree as RFC 9162's split at the largest power of two below ``n``.
    """
    blob = leaf_hashes if isinstance(leaf_hashes, bytes | bytearray) else b"".join(leaf_hashes)
    if len(blob) % HASH_SIZE:
        raise ValueError("concatenated leaf hashes must be a multiple of 32 bytes")
    if not blob:
        return EMPTY_ROOT
    while len(blob) > HASH_SIZE:
        blob = _next_level(bytes(blob))
    return bytes(blob)


def root(leaves: Iterable[bytes]) -> bytes:
    """RFC 9162 ``MTH(D[n])`` over leaf *data* (each leaf is hashed with the 0x00 prefix)."""
    return root_from_leaf_hashes(b"".join(_sha256(b"\x00" + d).digest() for d in leaves))


def range_root(get_node: NodeGetter, start: int, end: int) -> bytes:
    """Root of the RFC 9162 subtree over leaves ``[start, end)`` from perfect nodes.

    The range must be one that occurs in the RFC recursion: ``start`` a multiple of a
    power of two at least ``end - start`` (every range passed by the proof functions
    is). Its root is the right fold of its maximal aligned perfect blocks, largest first:
    ``H(b1, H(b2, ... H(b_{j-1}, b_j)))``. Cost: O(log(end - start)) node reads and hashes.

    Raises:
        ValueError: empty or misaligned range.
    """
    size = end - start
    if size <= 0:
        raise ValueError(f"empty range [{start}, {end})")
    if start & ((1 << (size - 1).bit_length()) - 1):
        raise ValueError(f"range [{start}, {end}) is not an RFC 9162 subtree")
    blocks: list[bytes] = []
    pos = start
    while pos < end:
        level = (end - pos).bit_length() - 1
        blocks.append(get_node(level, pos >> level))
        pos += 1 << level
    acc = blocks.pop()
    while blocks:
        acc = node_hash(blocks.pop(), acc)
    return acc


# --------------------------------------------------------------------------- proofs


def inclusion_proof(
    index: int, size: int, leaf_hashes: Sequence[bytes] | NodeGetter
) -> list[bytes]:
    """RFC 9162 section 2.1.3.1 inclusion proof ``PATH(index, D[size])``.

    Args:
        index: 0-based leaf index, ``0 <= index < size``.
        size: tree size.
        leaf_hashes: the leaf hashes (at least ``size`` of them; building the levels costs
            O(size), so for repeated proofs build a :class:`MerkleTree` once), or a
            :data:`NodeGetter` such as ``MerkleTree.node`` (O(log^2 size) worst case,
            usually O(log size)).

    Returns:
        Sibling hashes from the leaf up (``ceil(log2(size))`` or fewer).

    Raises:
        ProofError: ``index`` or ``size`` out of range.
    """
    get_node = _as_getter(leaf_hashes, size)
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    top_down: list[bytes] = []
    lo, hi, m = 0, size, index
    while hi - lo > 1:
        k = _split(hi - lo)
        if m < k:
            top_down.append(range_root(get_node, lo + k, hi))
            hi = lo + k
        else:
            top_down.append(range_root(get_node, lo, lo + k))
            lo += k
            m -= k
    top_down.reverse()
    return top_down


def consistency_proof(
    size1: int, size2: int, leaf_hashes: Sequence[bytes] | NodeGetter
) -> list[bytes]:
    """RFC 9162 section 2.1.4.1 consistency proof ``PROOF(size1, D[size2])``.

    Args:
        size1: older tree size, ``0 < size1 <= size2``.
        size2: newer tree size.
        leaf_hashes: as for :func:`inclusion_proof`.

    Returns:
        The proof hashes (empty when ``size1 == size2``).

    Raises:
        ProofError: sizes out of range.
    """
    get_node = _as_getter(leaf_hashes, size2)
    if not 0 < size1 <= size2:
        raise ProofError(f"no consistency proof from size {size1} to size {size2}")
    # SUBPROOF(m, D[lo:hi], b), unrolled; nodes are collected top-down and reversed.
    top_down: list[bytes] = []
    lo, hi, m, b = 0, size2, size1, True
    while True:
        n = hi - lo
        if m == n:
            if not b:
                top_down.append(range_root(get_node, lo, hi))
            break
        k = _split(n)
        if m <= k:
            top_down.append(range_root(get_node, lo + k, hi))
            hi = lo + k
        else:
            top_down.append(range_root(get_node, lo, lo + k))
            lo += k
            m -= k
            b = False
    top_down.reverse()
    return top_down


def _recording_getter() -> tuple[list[tuple[int, int]], NodeGetter]:
    ids: list[tuple[int, int]] = []

    def get(level: int, index: int) -> bytes:
        ids.append((level, index))
        return bytes(HASH_SIZE)

    return ids, get


def inclusion_proof_node_ids(index: int, size: int) -> list[tuple[int, int]]:
    """The perfect nodes ``(level, index)`` that :func:`inclusion_proof` will read.

    Lets a store fetch them in one query, then call :func:`inclusion_proof` with a getter
    over the fetched dict. At most about ``2 * log2(size)`` ids.
    """
    ids, get = _recording_getter()
    inclusion_proof(index, size, get)
    return ids


def consistency_proof_node_ids(size1: int, size2: int) -> list[tuple[int, int]]:
    """The perfect nodes ``(level, index)`` that :func:`consistency_proof` will read."""
    ids, get = _recording_getter()
    consistency_proof(size1, size2, get)
    return ids


# --------------------------------------------------------------------------- verification


def _lsb(x: int) -> int:
    return x & 1


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Verify an inclusion proof, RFC 9162 section 2.1.3.2.

    Args:
        index: 0-based leaf index.
        size: tree size the proof is for.
        leaf_hash: the 32-byte leaf hash (``leaf_hash(data)``, not the data).
        proof: sibling hashes from the leaf up.
        root: the root hash of the tree of ``size`` leaves.

    Returns:
        None when the proof is valid.

    Raises:
        ProofError: index out of range, leaf hash not 32 bytes, a proof of the wrong
            length, or a calculated root that does not match.
    """
    # Step 1.
    if index < 0 or index >= size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    if len(leaf_hash) != HASH_SIZE:
        raise ProofError(f"leaf hash has {len(leaf_hash)} bytes, expected {HASH_SIZE}")
    # Steps 2-3.
    fn, sn = index, size - 1
    r = leaf_hash
    # Step 4.
    for p in proof:
        if sn == 0:
            raise ProofError("proof is longer than the path to the root")
        if _lsb(fn) or fn == sn:
            r = _sha256(b"\x01" + p + r).digest()
            if not _lsb(fn):
                while fn and not _lsb(fn):
                    fn >>= 1
                    sn >>= 1
        else:
            r = _sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    # Step 5.
    if sn != 0:
        raise ProofError("proof is shorter than the path to the root")
    if r != root:
        raise ProofError("calculated root does not match the given root")


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Verify a consistency proof between two tree heads, RFC 9162 section 2.1.4.2.

    Args:
        size1, root1: the older tree head.
        size2, root2: the newer tree head.
        proof: the consistency proof hashes.

    Returns:
        None when the newer tree extends the older one.

    Raises:
        ProofError: ``size1 > size2``; ``size1 == 0`` (RFC 9162 requires ``0 < first``:
            every tree extends the empty one, so such a proof proves nothing); equal sizes
            with a non-empty proof or different roots; an empty proof for different sizes;
            or calculated roots that do not match.
    """
    if size1 > size2:
        raise ProofError(f"size1 ({size1}) is greater than size2 ({size2})")
    if size1 < 1:
        raise ProofError(
            "size1 must be at least 1 (consistency with the empty tree is "
            "trivial and is not proved)"
        )
    if size1 == size2:
        if proof:
            raise ProofError("sizes are equal but the proof is not empty")
        if root1 != root2:
            raise ProofError("sizes are equal but the roots differ")
        return
    # Step 1.
    if not proof:
        raise ProofError("empty proof for different tree sizes")
    path = list(proof)
    # Step 2.
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    # Step 3.
    fn, sn = size1 - 1, size2 - 1
    # Step 4.
    while _lsb(fn):
        fn >>= 1
        sn >>= 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            raise ProofError("proof is longer than expected")
        if _lsb(fn) or fn == sn:
            fr = _sha256(b"\x01" + c + fr).digest()
            sr = _sha256(b"\x01" + c + sr).digest()
            if not _lsb(fn):
                while fn and not _lsb(fn):
                    fn >>= 1
                    sn >>= 1
        else:
            sr = _sha256(b"\x01" + sr + c).digest()
        fn >>= 1
        sn >>= 1
    # Step 7.
    if sn != 0:
        raise ProofError("proof is shorter than expected")
    if fr != root1:
        raise ProofError("calculated old root does not match root1")
    if sr != root2:
        raise ProofError("calculated new root does not match root2")


# --------------------------------------------------------------------------- trees


class MerkleTree:
    """An in-memory RFC 9162 tree over fixed leaf hashes, with every level cached.

    Building costs ``n - 1`` node hashes (about 0.5 s per million leaves) and
    ``64 * n`` bytes; afterwards :meth:`root`, :meth:`inclusion_proof` and
    :meth:`consistency_proof` for *any* tree size up to ``n`` read O(log n) cached nodes.
    """

    __slots__ = ("_levels", "size")

    def __init__(self, leaf_hashes: bytes | Sequence[bytes]) -> None:
        """Args:
        leaf_hashes: 32-byte leaf hashes, as a sequence or one concatenated bytes.
        """
        blob = (
            bytes(leaf_hashes)
            if isinstance(leaf_hashes, bytes | bytearray)
            else b"".join(leaf_hashes)
        )
        if len(blob) % HASH_SIZE:
            raise ValueError("leaf hashes must be 32 bytes each")
        self.size: int = len(blob) // HASH_SIZE
        self._levels: list[bytes] = _levels_of(blob) if blob else [b""]

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> MerkleTree:
        """Build from leaf *data* (each is hashed as ``SHA-256(0x00 || data)``)."""
        return cls(b"".join(_sha256(b"\x00" + d).digest() for d in leaves))

    def node(self, level: int, index: int) -> bytes:
        """Hash of the perfect node ``(level, index)``; a :data:`NodeGetter`.

        Raises:
            IndexError: the node's leaves are not all in the tree.
        """
        if level < 0 or index < 0 or (index + 1) << level > self.size:
            raise IndexError(
                f"perfect node ({level}, {index}) is not in a tree of size {self.size}"
            )
        off = index * HASH_SIZE
        return self._levels[level][off : off + HASH_SIZE]

    def leaf_hash(self, index: int) -> bytes:
        """The stored hash of leaf ``index``."""
        return self.node(0, index)

    def root(self, size: int | None = None) -> bytes:
        """Root of the tree of the first ``size`` leaves (default: all); O(log n)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"size {size} is not in 0..{self.size}")
        if size == 0:
            return EMPTY_ROOT
        return range_root(self.node, 0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """:func:`inclusion_proof` for leaf ``index`` in the tree of ``size`` leaves."""
        size = self.size if size is None else size
        self._check_size(size)
        return inclusion_proof(index, size, self.node)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """:func:`consistency_proof` from ``size1`` to ``size2`` (default: all) leaves."""
        size2 = self.size if size2 is None else size2
        self._check_size(size2)
        return consistency_proof(size1, size2, self.node)

    def _check_size(self, size: int) -> None:
        if size > self.size:
            raise ProofError(f"tree size {size} exceeds the {self.size} leaves held")


def _as_getter(source: Sequence[bytes] | NodeGetter, size: int) -> NodeGetter:
    if callable(source):
        return source
    if len(source) < size:
        raise ProofError(f"tree size {size} exceeds the {len(source)} leaf hashes given")
    return MerkleTree(source[:size] if len(source) > size else source).node


class CompactRange:
    """Incremental RFC 9162 root for an append-only log: O(log n) state.

    Holds the roots of the perfect subtrees that make up ``[0, size)`` (one per set bit
    of ``size``, largest first). This is what a writer keeps next to the chain head so a
    checkpoint needs no scan: ``append`` returns the perfect nodes it completes, which a
    store can persist (``(level, index) -> hash``) to answer proofs later.
    """

    __slots__ = ("_peaks", "size")

    def __init__(self, size: int = 0, peaks: Sequence[bytes] = ()) -> None:
        """Args:
        size: number of leaves already appended.
        peaks: their perfect subtree roots, largest first (``size.bit_count()`` hashes),
            as returned by :attr:`peaks`.
        """
        if len(peaks) != size.bit_count():
            raise ValueError(
                f"a range of size {size} has {size.bit_count()} peaks, got {len(peaks)}"
            )
        self.size: int = size
        self._peaks: list[bytes] = list(peaks)

    @property
    def peaks(self) -> list[bytes]:
        """Perfect subtree roots covering ``[0, size)``, largest first (copy)."""
        return list(self._peaks)

    def append(self, leaf_hash: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash.

        Returns:
            The perfect nodes completed by this leaf, ``(level, index, hash)``, the leaf
            itself first (level 0), then one per merge.
        """
        if len(leaf_hash) != HASH_SIZE:
            raise ValueError("leaf hash must be 32 bytes")
        index = self.size
        created = [(0, index, leaf_hash)]
        h = leaf_hash
        level = 0
        while (index >> level) & 1:
            h = node_hash(self._peaks.pop(), h)
            level += 1
            created.append((level, index >> level, h))
        self._peaks.append(h)
        self.size += 1
        return created

    def root(self) -> bytes:
        """The RFC 9162 root of ``[0, size)``; :data:`EMPTY_ROOT` when empty."""
        if not self._peaks:
            return EMPTY_ROOT
        acc = self._peaks[-1]
        for p in reversed(self._peaks[:-1]):
            acc = node_hash(p, acc)
        return acc
