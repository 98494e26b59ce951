"""RFC 6962 / RFC 9162 Merkle tree: tree hash, inclusion and consistency proofs.

``MerkleTree`` keeps every complete (perfect, aligned) subtree hash in one
``bytearray`` per level, so an append costs one hash amortised, any root is
O(log n) and proofs are O(log n) lookups. The ``verify_*`` functions are the
RFC 9162 §2.1.3.2 / §2.1.4.2 algorithms; they need no tree, only hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "MerkleTree",
    "ProofError",
    "leaf_hash",
    "node_hash",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]

_sha256 = hashlib.sha256
EMPTY_ROOT = _sha256(b"").digest()
_LEAF = _sha256(b"\x00")


class ProofError(ValueError):
    """A proof does not verify; the message says which check failed."""


def leaf_hash(data: bytes | memoryview) -> bytes:
    """SHA-256(0x00 || data): the RFC 6962 hash of one leaf input."""
    h = _LEAF.copy()
    h.update(data)
    return h.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the RFC 6962 hash of an interior node."""
    return _sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """An append-only RFC 6962 tree over leaf hashes.

    Args:
        leaves: Leaf hashes (already ``leaf_hash``-ed) to start with.
    """

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self._size = 0
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        """Number of leaves."""
        return self._size

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash (32 bytes) at the right edge."""
        levels = self._levels
        levels[0] += leaf
        pos = self._size
        self._size = pos + 1
        level = 0
        while pos & 1:
            lv = levels[level]
            parent = _sha256(b"\x01" + lv[-64:]).digest()
            level += 1
            if level == len(levels):
                levels.append(bytearray())
            levels[level] += parent
            pos >>= 1

    def extend(self, leaves: list[bytes]) -> None:
        """Add many leaf hashes at once (same result as ``append`` each, fewer Python steps)."""
        self.extend_packed(b"".join(leaves))

    def extend_packed(self, hashes: bytes) -> None:
        """Add leaf hashes given concatenated (32 bytes each), as ``extend`` does."""
        if len(hashes) % 32:
            raise ValueError("packed leaf hashes must be a multiple of 32 bytes")
        if not hashes:
            return
        levels = self._levels
        lo = self._size
        levels[0] += hashes
        hi = self._size = lo + len(hashes) // 32
        level = 0
        sha = _sha256
        while True:
            plo, phi = lo >> 1, hi >> 1
            if phi <= plo:
                break
            src = bytes(levels[level][plo * 64 : phi * 64])
            parents = b"".join([sha(b"\x01" + src[i : i + 64]).digest() for i in range(0, len(src), 64)])
            level += 1
            if level == len(levels):
                levels.append(bytearray())
            levels[level] += parents
            lo, hi = plo, phi

    def leaf(self, index: int) -> bytes:
        """The leaf hash at 0-based ``index``."""
        if not 0 <= index < self._size:
            raise IndexError(f"leaf {index} outside tree of size {self._size}")
        return bytes(self._levels[0][index * 32 : index * 32 + 32])

    def leaf_hashes(self, count: int) -> bytes:
        """The first ``count`` leaf hashes, concatenated (32 bytes each)."""
        self._check_size(count)
        return bytes(self._levels[0][: 32 * count])

    def root(self, size: int | None = None) -> bytes:
        """The tree head (MTH) over the first ``size`` leaves (default: all)."""
        size = self._size if size is None else size
        self._check_size(size)
        if size == 0:
            return EMPTY_ROOT
        return self._hash(0, size)

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self._size:
            raise ValueError(f"tree size {size} outside 0..{self._size}")

    def _hash(self, start: int, end: int) -> bytes:
        """MTH of leaves [start, end); start is aligned as RFC 6962 recursion guarantees."""
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:
            level = n.bit_length() - 1
            off = (start >> level) * 32
            return bytes(self._levels[level][off : off + 32])
        k = _split(n)
        return node_hash(self._hash(start, start + k), self._hash(start + k, end))

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """Audit path (RFC 9162 §2.1.3.1) for 0-based leaf ``index`` in the tree of ``size``."""
        size = self._size if size is None else size
        self._check_size(size)
        if not 0 <= index < size:
            raise ValueError(f"leaf {index} outside tree of size {size}")
        proof: list[bytes] = []
        start, end, m = 0, size, index
        while end - start > 1:
            k = _split(end - start)
            if m < k:
                proof.append(self._hash(start + k, end))
                end = start + k
            else:
                proof.append(self._hash(start, start + k))
                start, m = start + k, m - k
        proof.reverse()
        return proof

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """Consistency proof (RFC 9162 §2.1.4.1) between two sizes of this tree."""
        new_size = self._size if new_size is None else new_size
        self._check_size(new_size)
        if not 0 <= old_size <= new_size:
            raise ValueError(f"old size {old_size} outside 0..{new_size}")
        if old_size in (0, new_size):
            return []
        proof: list[bytes] = []
        start, end, m, complete = 0, new_size, old_size, True
        while True:
            n = end - start
            if m == n:
                if not complete:
                    proof.append(self._hash(start, end))
                break
            k = _split(n)
            if m <= k:
                proof.append(self._hash(start + k, end))
                end = start + k
            else:
                proof.append(self._hash(start, start + k))
                start, m, complete = start + k, m - k, False
        proof.reverse()
        return proof


def root_of(leaf_inputs: Sequence[bytes]) -> bytes:
    """MTH of the given leaf inputs (convenience for tests and small trees)."""
    return MerkleTree(leaf_hash(d) for d in leaf_inputs).root()


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf`` (a leaf hash) is at 0-based ``index`` of the tree ``root`` of ``size``.

    Raises:
        ProofError: the proof does not verify.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} outside tree of size {size}")
    if any(len(p) != 32 for p in proof) or len(leaf) != 32:
        raise ProofError("proof hashes must be 32 bytes")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("proof is shorter than the path to the root")
    if r != root:
        raise ProofError("computed root does not match")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree ``new_root`` of ``new_size`` extends the tree ``old_root`` of ``old_size``.

    Raises:
        ProofError: the proof does not verify.
    """
    if not 0 <= old_size <= new_size:
        raise ProofError(f"old size {old_size} outside 0..{new_size}")
    if any(len(p) != 32 for p in proof):
        raise ProofError("proof hashes must be 32 bytes")
    if old_size == new_size:
        if proof:
            raise ProofError("proof must be empty for equal sizes")
        if old_root != new_root:
            raise ProofError("roots differ for the same size")
        return
    if old_size == 0:
        if proof:
            raise ProofError("proof must be empty from an empty tree")
        return
    if not proof:
        raise ProofError("empty consistency proof")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("proof is shorter than needed")
    if fr != old_root:
        raise ProofError("proof does not reproduce the old root")
    if sr != new_root:
        raise ProofError("proof does not reproduce the new root")
