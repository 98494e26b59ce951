"""What the audit part of the client returns: records, signed checkpoints and proofs that check
themselves here, with the library's own Merkle code (``middleware.audit.merkle``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..audit.checkpoint import Checkpoint
from ..audit.merkle import ProofError, leaf_hash, verify_consistency, verify_inclusion
from ..errors import AuditCorrupted

__all__ = ["AuditEntry", "ConsistencyProof", "InclusionProof", "SignedCheckpoint"]


@dataclass(frozen=True)
class AuditEntry:
    """One exported record: its node, 1-based index, write time and the exact hashed bytes."""

    node: str
    index: int
    time_ns: int
    record: bytes

    def obj(self) -> dict[str, Any]:
        """The record as a JSON object."""
        value: dict[str, Any] = json.loads(self.record)
        return value

    @property
    def leaf_hash(self) -> bytes:
        """RFC 6962 leaf hash of the record (SHA-256 of 0x00 || record)."""
        return leaf_hash(self.record)


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint whose signature was checked by the client.

    Attributes:
        node: The gateway node whose log it signs.
        checkpoint: Origin, size, root and the signed note text.
        vkey: The verifier key the server sent.
        pinned: Whether the signature was checked against a key the caller pinned
            (False: against the server's own key, which proves little).
    """

    node: str
    checkpoint: Checkpoint
    vkey: str
    pinned: bool = False

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root

    @property
    def note(self) -> str:
        return self.checkpoint.note


@dataclass(frozen=True)
class InclusionProof:
    """RFC 9162 inclusion proof of record ``index`` (1-based) in the tree of ``tree_size``."""

    index: int
    tree_size: int
    leaf_hash: bytes
    proof: list[bytes] = field(default_factory=list)

    def verify(self, record: bytes, checkpoint: SignedCheckpoint | Checkpoint) -> None:
        """Check that ``record`` (its exact bytes) is record ``index`` of the log ``checkpoint`` signs.

        Raises:
            AuditCorrupted: it is not (the record, the proof or the checkpoint differ).
        """
        cp = checkpoint.checkpoint if isinstance(checkpoint, SignedCheckpoint) else checkpoint
        leaf = leaf_hash(record)
        if leaf != self.leaf_hash:
            raise AuditCorrupted(f"record {self.index} is not the record the server's proof is for")
        if self.tree_size != cp.size:
            raise AuditCorrupted(f"proof is for size {self.tree_size}, the checkpoint for {cp.size}")
        try:
            verify_inclusion(leaf, self.index - 1, cp.size, self.proof, cp.root)
        except ProofError as exc:
            raise AuditCorrupted(f"inclusion proof of record {self.index} does not verify: {exc}") from None


@dataclass(frozen=True)
class ConsistencyProof:
    """RFC 9162 proof that the tree of ``new_size`` extends the tree of ``old_size``."""

    old_size: int
    new_size: int
    proof: list[bytes] = field(default_factory=list)

    def verify(self, old: SignedCheckpoint | Checkpoint, new: SignedCheckpoint | Checkpoint) -> None:
        """Check the proof between two checkpoints (an older one you kept, a newer one).

        Raises:
            AuditCorrupted: the newer log does not extend the older one.
        """
        o = old.checkpoint if isinstance(old, SignedCheckpoint) else old
        n = new.checkpoint if isinstance(new, SignedCheckpoint) else new
        if (self.old_size, self.new_size) != (o.size, n.size):
            raise AuditCorrupted(
                f"proof is for sizes {self.old_size}->{self.new_size}, the checkpoints are {o.size}->{n.size}"
            )
        try:
            verify_consistency(o.size, n.size, o.root, n.root, self.proof)
        except ProofError as exc:
            raise AuditCorrupted(
                f"log of size {n.size} does not extend the one of size {o.size}: {exc}"
            ) from None
