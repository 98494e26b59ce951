"""RFC 6962 / RFC 9162 Merkle tree: tree hash, inclusion and consistency proofs.

``MerkleTree`` keeps complete (perfect, aligned) subtree hashes in one ``bytearray``
per level and its leaf hashes in a ``LeafStore`` (memory, or a file for a long-running
log), so an append costs one hash amortised and any root or proof is O(log n). The
``verify_*`` functions are the RFC 9162 §2.1.3.2 / §2.1.4.2 algorithms; they need no
tree, only hashes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from .native import NATIVE

__all__ = [
    "EMPTY_ROOT",
    "FileLeafStore",
    "LeafStore",
    "MemoryLeafStore",
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
_NATIVE = NATIVE
"""The compiled reduction (``native.py``), or None: this module's Python does it."""


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


class LeafStore(Protocol):
    """Where a ``MerkleTree`` keeps its leaf hashes (32 bytes each, in order)."""

    def append(self, hashes: bytes) -> None: ...

    def read(self, lo: int, hi: int) -> bytes:
        """Leaf hashes ``lo..hi-1``, concatenated."""
        ...

    def close(self) -> None: ...


class MemoryLeafStore:
    """Leaf hashes in memory (the default)."""

    def __init__(self) -> None:
        self._data = bytearray()

    def append(self, hashes: bytes) -> None:
        self._data += hashes

    def read(self, lo: int, hi: int) -> bytes:
        return bytes(self._data[32 * lo : 32 * hi])

    def close(self) -> None:
        return None


class FileLeafStore:
    """Leaf hashes in an unnamed temporary file in ``directory``: a cache rebuilt on every open.

    Nothing is fsynced and nothing is left behind (the file has no name; a crash frees
    it). Reads and appends may come from different threads (the writer appends while a
    proof is computed), so both take a lock.
    """

    _FLUSH = 1 << 16

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._file = tempfile.TemporaryFile(dir=directory, prefix=".merkle-leaves-")  # noqa: SIM115
        self._fd = self._file.fileno()
        self._flushed = 0  # leaves in the file
        self._tail = bytearray()  # leaves after them, not yet written
        self._lock = threading.Lock()

    def append(self, hashes: bytes) -> None:
        with self._lock:
            self._tail += hashes
            if len(self._tail) >= self._FLUSH:
                os.pwrite(self._fd, self._tail, 32 * self._flushed)
                self._flushed += len(self._tail) // 32
                self._tail.clear()

    def read(self, lo: int, hi: int) -> bytes:
        with self._lock:
            head = b""
            if lo < self._flushed:
                end = min(hi, self._flushed)
                head = os.pread(self._fd, 32 * (end - lo), 32 * lo)
                lo = end
            if lo >= hi:
                return head
            return head + bytes(self._tail[32 * (lo - self._flushed) : 32 * (hi - self._flushed)])

    def close(self) -> None:
        self._file.close()


def _mth_packed(leaves: bytes) -> bytes:
    """MTH of packed leaf hashes (RFC 6962 split), for small spans."""
    n = len(leaves) // 32
    if n == 1:
        return leaves
    k = _split(n)
    return node_hash(_mth_packed(leaves[: 32 * k]), _mth_packed(leaves[32 * k :]))


def _reduce(leaves: bytes, levels: int) -> bytes:
    """Hash packed leaves up ``levels`` levels of perfect subtrees (2**levels leaves each).

    Compiled (``native.py``): the same hashes in C, the GIL released."""
    if _NATIVE is not None:
        return _NATIVE.reduce(leaves, levels)
    return _reduce_py(leaves, levels)


def _reduce_py(leaves: bytes, levels: int) -> bytes:
    sha = _sha256
    for _ in range(levels):
        leaves = b"".join([sha(b"\x01" + leaves[i : i + 64]).digest() for i in range(0, len(leaves), 64)])
    return leaves


class MerkleTree:
    """An append-only RFC 6962 tree over leaf hashes.

    The leaf hashes live in a ``LeafStore`` (memory by default). Every complete, aligned
    subtree hash of ``cached_from`` levels or more is kept in memory, one ``bytearray``
    per level; smaller subtrees are hashed again from the leaves when a root or proof
    needs them (at most ``2**cached_from`` leaves each). So an append costs one hash
    amortised, a root or proof O(log n) lookups plus O(2**cached_from) hashes, and the
    memory is ``64 / 2**cached_from`` bytes per leaf besides the store: a long-running
    log keeps its leaves in a ``FileLeafStore`` with ``cached_from=8`` (0.25 B per
    record in memory instead of 64).

    Args:
        leaves: Leaf hashes (already ``leaf_hash``-ed) to start with.
        store: Where the leaf hashes go (default: memory).
        cached_from: The lowest level kept in memory (1 = every interior node).
    """

    def __init__(
        self, leaves: Iterable[bytes] = (), *, store: LeafStore | None = None, cached_from: int = 1
    ) -> None:
        if not 1 <= cached_from <= 16:
            raise ValueError("cached_from must be 1..16")
        self._store: LeafStore = store if store is not None else MemoryLeafStore()
        self._from = cached_from
        self._levels: list[bytearray] = []  # _levels[i]: complete subtrees of level cached_from + i
        self._size = 0
        self.extend(list(leaves))

    @property
    def size(self) -> int:
        """Number of leaves."""
        return self._size

    def close(self) -> None:
        """Release the leaf store (a file store's file)."""
        self._store.close()

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash (32 bytes) at the right edge."""
        self.extend_packed(leaf)

    def extend(self, leaves: list[bytes]) -> None:
        """Add many leaf hashes at once (same result as ``append`` each, fewer Python steps)."""
        self.extend_packed(b"".join(leaves))

    def extend_packed(self, hashes: bytes) -> None:
        """Add leaf hashes given concatenated (32 bytes each), as ``extend`` does."""
        if len(hashes) % 32:
            raise ValueError("packed leaf hashes must be a multiple of 32 bytes")
        if not hashes:
            return
        lo = self._size
        hi = new_size = lo + len(hashes) // 32
        self._store.append(hashes)
        k = self._from
        # the lowest cached level: subtrees completed by these leaves, hashed from the leaves
        plo, phi = lo >> k, hi >> k
        if phi <= plo:
            self._size = hi
            return
        levels = self._levels
        if not levels:
            levels.append(bytearray())
        levels[0] += _reduce(self._store.read(plo << k, phi << k), k)
        lo, hi, level = plo, phi, 0
        while True:
            plo, phi = lo >> 1, hi >> 1
            if phi <= plo:
                break
            parents = _reduce(bytes(levels[level][plo * 64 : phi * 64]), 1)
            level += 1
            if level == len(levels):
                levels.append(bytearray())
            levels[level] += parents
            lo, hi = plo, phi
        # last: a reader in another thread (a proof for the gateway) never sees a size whose
        # subtrees are not stored yet
        self._size = new_size

    def leaf(self, index: int) -> bytes:
        """The leaf hash at 0-based ``index``."""
        if not 0 <= index < self._size:
            raise IndexError(f"leaf {index} outside tree of size {self._size}")
        return self._store.read(index, index + 1)

    def leaf_hashes(self, count: int) -> bytes:
        """The first ``count`` leaf hashes, concatenated (32 bytes each)."""
        self._check_size(count)
        return self._store.read(0, count)

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
        if n <= 1 << self._from:  # not cached: hashed again from at most 2**cached_from leaves
            return _mth_packed(self._store.read(start, end))
        if n & (n - 1) == 0 and start % n == 0:
            level = n.bit_length() - 1 - self._from
            off = (start >> (level + self._from)) * 32
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
        """Consistency proof (RFC 9162 §2.1.4.1) between two sizes of this tree.

        Raises:
            ValueError: ``old_size`` is not in ``1..new_size`` (there is no proof from the
                empty tree: RFC 9162 §2.1.4 defines them for ``0 < old_size``).
        """
        new_size = self._size if new_size is None else new_size
        self._check_size(new_size)
        if not 0 < old_size <= new_size:
            raise ValueError(f"old size {old_size} outside 1..{new_size}")
        if old_size == new_size:
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
    if old_size == 0:  # RFC 9162 §2.1.4: every tree "extends" the empty one; no proof says so
        raise ProofError("no consistency proof from an empty tree (old size 0): nothing to prove")
    if not 0 < old_size <= new_size:
        raise ProofError(f"old size {old_size} outside 1..{new_size}")
    if any(len(p) != 32 for p in proof):
        raise ProofError("proof hashes must be 32 bytes")
    if old_size == new_size:
        if proof:
            raise ProofError("proof must be empty for equal sizes")
        if old_root != new_root:
            raise ProofError("roots differ for the same size")
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
