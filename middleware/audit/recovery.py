"""Opening a node's log: what recovery checks, cuts and refuses (see docs/audit-log.md).

``recover`` scans every segment (in worker processes for large logs, ``segment_pool``),
cuts a torn tail of the last one, refuses anything else, and checks the published
``checkpoint`` file against what it found. ``WalAuditLog`` calls it on open.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AuditCorrupted
from ._files import fsync_dir
from .checkpoint import Verifier
from .compression import COMPRESSED_SUFFIX, read_segment
from .retention import SealedSegment
from .segment import (
    EVENT,
    HEADER,
    HEADER_SIZE,
    ChainState,
    event_offset,
    find_promised_frame,
    list_segments,
    load_pruned,
    settle_signatures,
)
from .segment_pool import check_segments

__all__ = ["CHECKPOINT_FILE", "Recovered", "RecoveryReport", "Rescan", "recover"]


class Rescan(Exception):
    """Old-format unsigned events were set aside after the state had taken them in: scan again."""

    def __init__(self, report: RecoveryReport) -> None:
        self.report = report
        super().__init__("scan the log again")


CHECKPOINT_FILE = "checkpoint"


@dataclass
class RecoveryReport:
    """What opening the log found and did.

    Attributes:
        events: Events recovered.
        segments: Segment files scanned.
        torn_bytes: Bytes cut from the tail of the last segment (0: none).
        broken_file: Where the cut bytes were kept.
        torn_reason: Why the tail was cut.
        removed_temp: Leftover temporary files removed.
        clean: The last segment was sealed (the previous close was clean).
        pruned: Events removed earlier by retention (their leaf hashes are kept).
        set_aside_events: Events at the end of the log that no signature covers (forged,
            or never acknowledged), moved out of the log and never signed.
        set_aside_file: Where they were kept.
        set_aside_reason: Why.
    """

    events: int = 0
    segments: int = 0
    torn_bytes: int = 0
    broken_file: str = ""
    torn_reason: str = ""
    removed_temp: list[str] = field(default_factory=list)
    clean: bool = True
    pruned: int = 0
    set_aside_events: int = 0
    set_aside_file: str = ""
    set_aside_reason: str = ""


@dataclass
class Recovered:
    """Where appending continues after recovery.

    Attributes:
        report: What recovery found and did.
        seq: Sequence number of the last segment (0 if none).
        last_path: The last segment, if one survived.
        last_first_index: Its first event index.
        last_sealed: Whether it ends with a seal (then appending starts a new segment).
        sealed: The sealed segments, oldest first (retention chooses among them).
    """

    report: RecoveryReport
    seq: int = 0
    last_path: Path | None = None
    last_first_index: int = 1
    last_sealed: bool = True
    sealed: list[SealedSegment] = field(default_factory=list)


def recover(
    directory: Path, state: ChainState, verifier: Verifier, *, workers: int | None = None
) -> Recovered:
    """Scan every segment into ``state``; cut a torn tail of the last one; refuse anything else.

    Sealed (non-last) segments must verify completely. The last segment is read to
    its first unreadable frame: if a later readable frame proves that spot had been
    synced, or the damage is a readable-but-wrong frame, the log refuses to open;
    otherwise the tail is a torn write: it is copied to ``<segment>.<offset>.broken``,
    cut and fsynced. Finally the ``checkpoint`` file must agree with what was
    recovered (a checkpoint covering more events than recovered means lost data).

    Events at the end of the last segment that no signature covers — not announced by a
    commit frame, or (logs of the old format) after the last checkpoint — are set aside
    the same way (``<segment>.<offset>.unsigned``) and reported: never adopted, never signed.

    Raises:
        AuditCorrupted: anything but a torn or unsigned tail, naming ``segment@offset`` and why.
        Rescan: old-format unsigned events were set aside; call again with a fresh state.
    """
    report = RecoveryReport()
    for tmp in directory.glob("*.tmp"):
        tmp.unlink()
        report.removed_temp.append(tmp.name)
    if report.removed_temp:
        fsync_dir(directory)
    all_segments = list_segments(directory)
    report.pruned, segments = load_pruned(directory, state, all_segments)
    for _, leftover in all_segments[: len(all_segments) - len(segments)]:
        leftover.unlink()  # covered by a completed retention run that was interrupted
    report.segments = len(segments)
    found = Recovered(report, seq=segments[0][0].seq if segments else 0)
    for i, checked in enumerate(check_segments(segments, state, workers=workers)):
        name, path, torn = checked.name, checked.path, checked.torn
        last = i == len(segments) - 1
        if (checked.unsigned or torn) is not None and path.name.endswith(COMPRESSED_SUFFIX):
            bad = checked.unsigned or torn
            assert bad is not None
            raise AuditCorrupted(f"{bad.message} in a compressed (sealed) segment", where=bad.where)
        if checked.unsigned is not None:
            if not last:
                raise AuditCorrupted(f"{checked.unsigned.message} in a sealed segment", where=path.name)
            _set_aside(directory, path, path.read_bytes(), checked.unsigned.offset, report)
        elif torn is not None:
            if not last:
                raise AuditCorrupted(f"{torn.message} in a sealed segment", where=torn.where) from None
            data = path.read_bytes()
            promised = find_promised_frame(data, torn.offset)
            if promised is not None:
                raise AuditCorrupted(
                    f"{torn.message}, but the frame at offset {promised} shows it had been synced: "
                    "corruption, not a torn write",
                    where=torn.where,
                ) from None
            _cut(directory, path, data, torn.offset, report, torn.message)
        sealed = state.sealed
        if not last and not sealed:
            raise AuditCorrupted("segment is not sealed but is not the last one", where=path.name)
        found.seq, found.last_sealed, found.last_path = name.seq, sealed, path
        found.last_first_index = name.first_index
        if sealed:
            found.sealed.append(SealedSegment(name, path, state.size, state.last_time_ns))
        if last and not path.exists():
            found.last_path = None
    unsigned_from = settle_signatures(state)
    if unsigned_from is not None:
        data = read_segment(found.last_path) if found.last_path is not None else b""
        at = event_offset(data, unsigned_from)
        if found.last_path is None or at is None or found.last_path.name.endswith(COMPRESSED_SUFFIX):
            raise AuditCorrupted(
                f"events from {unsigned_from} (old format) were never signed and start before the last "
                "segment: move the segments after it aside by hand",
                where=directory.name,
            )
        _set_aside(directory, found.last_path, data, at, report)
        raise Rescan(report)
    report.events = state.size
    report.clean = found.last_sealed
    _check_checkpoint_file(directory / CHECKPOINT_FILE, state, verifier)
    return found


def _set_aside(directory: Path, path: Path, data: bytes, offset: int, report: RecoveryReport) -> None:
    """Move the unsigned tail of the last segment from ``offset`` to ``<segment>.<offset>.unsigned``."""
    aside = path.with_name(f"{path.name}.{offset}.unsigned")
    aside.write_bytes(data[offset:])
    with open(aside, "rb") as fh:
        os.fsync(fh.fileno())
    report.set_aside_events += _events_in(data, offset)
    report.set_aside_file = aside.name
    report.set_aside_reason = "events no signature covers (forged, or never acknowledged)"
    with open(path, "r+b") as fh:
        fh.truncate(offset)
        os.fsync(fh.fileno())
    fsync_dir(directory)


def _events_in(data: bytes, offset: int) -> int:
    """Event frames readable from ``offset`` on (headers only)."""
    count, off = 0, offset
    while off + HEADER_SIZE <= len(data):
        fields = HEADER.unpack_from(data, off)
        count += fields[3] == EVENT
        end = off + HEADER_SIZE + fields[1]
        off = end + (-end % 8)
    return count


def _cut(directory: Path, path: Path, data: bytes, offset: int, report: RecoveryReport, reason: str) -> None:
    broken = path.with_name(f"{path.name}.{offset}.broken")
    broken.write_bytes(data[offset:])
    report.torn_bytes, report.broken_file, report.torn_reason = len(data) - offset, broken.name, reason
    if offset == 0:  # not even the header survived: the segment never existed
        path.unlink()
    else:
        with open(path, "r+b") as fh:
            fh.truncate(offset)
            os.fsync(fh.fileno())
    fsync_dir(directory)


def _check_checkpoint_file(path: Path, state: ChainState, verifier: Verifier) -> None:
    if not path.exists():
        return
    try:
        cp = verifier.verify(path.read_text())
    except (AuditCorrupted, UnicodeDecodeError) as exc:
        raise AuditCorrupted(f"checkpoint file unreadable: {exc}", where=str(path)) from None
    if cp.size > state.size:
        raise AuditCorrupted(
            f"data lost: the signed checkpoint covers {cp.size} events, only {state.size} were recovered",
            where=str(path),
        )
    if cp.root != state.tree.root(cp.size):
        raise AuditCorrupted(
            f"the signed checkpoint at size {cp.size} does not match the records", where=str(path)
        )
