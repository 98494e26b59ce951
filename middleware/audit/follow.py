"""Following a node's log as it grows: each record once it is verified, in index order.

``LogFollower`` checks the log from its start (chain, CRC, indexes, checkpoints, records) and
then, at every ``poll``, only what was written since — the growing segment from where it left
off, then each new segment. A record is handed out only when its whole batch is there and its
signature (commit frame) verifies: a batch being written, or events no signature covers, are
never handed out. It never writes to the log: a torn tail is simply not read yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import AuditCorrupted
from .checkpoint import Verifier
from .compression import read_segment, stored
from .merkle import MerkleTree
from .segment import (
    EVENT,
    HEADER_SIZE,
    ChainState,
    SegmentName,
    TornFrame,
    Unsigned,
    check,
    list_segments,
    load_pruned,
    settle_signatures,
)

__all__ = ["FollowedRecord", "LogFollower"]


@dataclass(frozen=True, slots=True)
class FollowedRecord:
    """One verified record: its node log, index, write time and exact stored bytes."""

    node: str
    index: int
    time_ns: int
    raw: bytes


class LogFollower:
    """Verified records of the node log at ``directory``, as it grows.

    Args:
        directory: The node's log directory.
        verifier: The pinned key (default: the one stored with the log).
        after: Hand out records after this index only (a shipper's cursor).
    """

    def __init__(self, directory: str | Path, verifier: Verifier | None = None, *, after: int = 0) -> None:
        self.directory = Path(directory)
        self.node = self.directory.name
        if verifier is None:
            verifier = Verifier((self.directory / "checkpoint.vkey").read_text())
        self._state = ChainState(tree=MerkleTree(), verifier=verifier, check_records=True)
        self._after = after
        self._segment: SegmentName | None = None
        self._offset = 0
        self._sealed = False  # the segment read last ends with its seal
        self._started = False

    @property
    def size(self) -> int:
        """Records verified so far."""
        return self._state.size

    def poll(self) -> Iterator[FollowedRecord]:
        """The records verified since the last poll, in index order.

        Raises:
            AuditCorrupted: the log does not verify (or holds events no signature covers).
        """
        segments = list_segments(self.directory)
        if not self._started:
            _, segments = load_pruned(self.directory, self._state, segments)
            self._started = True
        for name, path in segments:
            if self._segment is not None and name < self._segment:
                continue
            if self._segment is not None and name == self._segment and self._sealed:
                continue  # read to its seal already
            if self._segment is not None and name != self._segment:
                if not self._sealed:
                    return  # the segment read last is still being written
                self._offset = 0
            self._segment = name
            data = read_segment(stored(path))
            frames: list[tuple[int, int, int, int, int]] = []
            try:
                end = check(data, name, path.name, self._state, frames, start=self._offset)
            except TornFrame as torn:  # being written: what is before it is whole
                end = torn.offset
            except Unsigned as bad:
                raise AuditCorrupted(bad.message, where=bad.where) from None
            if settle_signatures(self._state) is not None:
                raise AuditCorrupted("events of the old format that no checkpoint covers", where=path.name)
            self._offset, self._sealed = end, self._state.sealed
            for typ, index, ts, off, pay_end in frames:
                if typ == EVENT and index > self._after:
                    yield FollowedRecord(self.node, index, ts, data[off + HEADER_SIZE : pay_end])
            if not self._sealed:
                return
