"""Retention: which old segments may go, removing them safely, and the record that says so.

Only whole sealed segments, oldest first, entirely older than the retention age and
covered by a signed checkpoint may go. Their leaf hashes are kept (``pruned.leaves``,
written before ``pruned.json`` which says how many count) together with the chain hash
where the log now starts, so roots, checkpoints and proofs stay verifiable. Recovery
finishes an interrupted run (``segment.load_pruned``).
"""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from ._files import atomic_write, fsync_dir
from .merkle import MerkleTree
from .record import AuditRecord, canonical_json
from .segment import HEADER, HEADER_SIZE, PRUNED_LEAVES, PRUNED_META, SegmentName, list_segments

__all__ = ["SealedSegment", "choose", "prune", "record"]

VKEY_FILE = "checkpoint.vkey"


class SealedSegment(NamedTuple):
    """A sealed segment: its name, file, the index of its last event and the time of its seal."""

    name: SegmentName
    path: Path
    last_index: int
    sealed_ns: int


def choose(sealed: list[SealedSegment], cutoff_ns: int, signed: int, open_path: Path) -> list[SealedSegment]:
    """The oldest run of sealed segments older than ``cutoff_ns``, covered by checkpoint size ``signed``."""
    chosen: list[SealedSegment] = []
    for seg in list(sealed):
        if seg.sealed_ns >= cutoff_ns or seg.last_index > signed or seg.path == open_path:
            break
        chosen.append(seg)
    return chosen


def prune(directory: Path, chosen: list[SealedSegment], tree: MerkleTree, archive: Path | None) -> None:
    """Keep the leaf hashes and starting chain, then archive (copy + fsync) or delete the segments."""
    last_index = chosen[-1].last_index
    paths = [p for _, p in list_segments(directory)]
    nxt = paths[paths.index(chosen[-1].path) + 1]
    with open(nxt, "rb") as fh:  # the next segment's header carries the chain where it starts
        chain = HEADER.unpack_from(fh.read(HEADER_SIZE))[-1]
    atomic_write(directory / PRUNED_LEAVES, tree.leaf_hashes(last_index))
    atomic_write(directory / PRUNED_META, canonical_json({"size": last_index, "chain": chain.hex()}))
    if archive is not None:
        archive.mkdir(parents=True, exist_ok=True)
    for seg in chosen:
        if archive is not None:
            shutil.copy2(seg.path, archive / seg.path.name)
            with open(archive / seg.path.name, "rb") as fh:
                os.fsync(fh.fileno())
        seg.path.unlink()
    if archive is not None:
        shutil.copy2(directory / VKEY_FILE, archive / VKEY_FILE)
        fsync_dir(archive)
    fsync_dir(directory)


def record(
    node: str, max_age: timedelta, chosen: list[SealedSegment], signed: int, archive: Path | None
) -> AuditRecord:
    """The ``audit.retention`` record of one run."""
    return AuditRecord(
        event_type="audit.retention",
        component="audit",
        node=node,
        rule=f"retention max_age={int(max_age.total_seconds())}s",
        outcome="archived" if archive else "deleted",
        detail={
            "segments": [seg.path.name for seg in chosen],
            "events": [chosen[0].name.first_index, chosen[-1].last_index],
            "covered_by_checkpoint": signed,
            "archive_dir": str(archive) if archive else "",
        },
    )
