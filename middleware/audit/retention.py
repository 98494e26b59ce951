"""Retention: which old segments may go, removing them safely, and the record that says so.

Only whole sealed segments, oldest first, entirely older than the retention age and
covered by a signed checkpoint may go. Their leaf hashes are kept (``pruned.leaves``,
written before ``pruned.json`` which says how many count) together with the chain hash
where the log now starts, so roots, checkpoints and proofs stay verifiable. Recovery
finishes an interrupted run (``segment.load_pruned``). A running gateway applies it on
a schedule (``RetentionSchedule``); ``agency audit retain`` applies it to a stopped one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple, Protocol

from ..background import BackgroundErrorHook, LoopErrors
from ..errors import InvalidInput
from ._files import atomic_write, fsync_dir
from .compression import read_segment, stored
from .merkle import MerkleTree
from .record import AuditRecord, canonical_json
from .segment import HEADER, HEADER_SIZE, PRUNED_LEAVES, PRUNED_META, SegmentName, list_segments

__all__ = ["RetentionSchedule", "SealedSegment", "choose", "parse_age", "prune", "record"]

log = _logger = logging.getLogger("agency.audit.retention")

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
    nxt = paths[paths.index(stored(chosen[-1].path)) + 1]
    # the next segment's header carries the chain where it starts
    chain = HEADER.unpack_from(read_segment(nxt, HEADER_SIZE))[-1]
    atomic_write(directory / PRUNED_LEAVES, tree.leaf_hashes(last_index))
    atomic_write(directory / PRUNED_META, canonical_json({"size": last_index, "chain": chain.hex()}))
    if archive is not None:
        archive.mkdir(parents=True, exist_ok=True)
    for seg in chosen:
        path = stored(seg.path)  # compressed since it was sealed, maybe
        if archive is not None:
            shutil.copy2(path, archive / path.name)
            with open(archive / path.name, "rb") as fh:
                os.fsync(fh.fileno())
        path.unlink()
    if archive is not None:
        shutil.copy2(directory / VKEY_FILE, archive / VKEY_FILE)
        fsync_dir(archive)
    fsync_dir(directory)


def record(
    node: str,
    max_age: timedelta,
    chosen: list[SealedSegment],
    signed: int,
    archive: Path | None,
    *,
    names: list[str] | None = None,
) -> AuditRecord:
    """The ``audit.retention`` record of one run (``names``: the files removed, as stored)."""
    return AuditRecord(
        event_type="audit.retention",
        component="audit",
        node=node,
        rule=f"retention max_age={int(max_age.total_seconds())}s",
        outcome="archived" if archive else "deleted",
        detail={
            "segments": names if names is not None else [seg.path.name for seg in chosen],
            "events": [chosen[0].name.first_index, chosen[-1].last_index],
            "covered_by_checkpoint": signed,
            "archive_dir": str(archive) if archive else "",
        },
    )


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """``"90d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"2w"`` -> a positive ``timedelta``.

    Raises:
        ValueError: not a number followed by one of s, m, h, d, w, or not positive.
    """
    m = _AGE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not an age such as 90d, 12h, 30m, 45s or 2w")
    age = timedelta(seconds=float(m[1]) * _UNIT_SECONDS[m[2]])
    if age.total_seconds() <= 0:
        raise ValueError(f"{text!r}: the age must be positive")
    return age


class RetainingLog(Protocol):
    """What a schedule needs of a log (``WalAuditLog`` is one)."""

    node: str

    async def apply_retention(
        self, max_age: timedelta, *, archive_dir: str | os.PathLike[str] | None = None
    ) -> list[str]: ...


class RetentionSchedule:
    """Applies retention to a live log now and then every ``interval``, until stopped.

    The task is owned: ``async with RetentionSchedule(...)`` (or ``start``/``stop``) starts it
    and awaits its end. A run that fails (a full archive disk, say) is logged at ERROR and
    tried again at the next interval; nothing is removed by a failed run before the leaf
    hashes are safe (see ``prune``).

    Args:
        log: The log to prune.
        max_age: Sealed segments whose newest record is older than this go.
        archive_dir: Move them under ``archive_dir/<node>/`` instead of deleting them.
        interval: Time between runs.
        on_run: Called after each run with the segments removed (or the error), e.g. for tests.
        on_error: Called with ``"retention"`` for each failed run (a metric); the first
            failure of a series is logged at ERROR, the recovery once.
    """

    def __init__(
        self,
        log: RetainingLog,
        max_age: timedelta,
        *,
        archive_dir: str | os.PathLike[str] | None = None,
        interval: timedelta = timedelta(hours=1),
        on_run: Callable[[list[str] | BaseException], None] | None = None,
        on_error: BackgroundErrorHook | None = None,
    ) -> None:
        if interval.total_seconds() <= 0:
            raise InvalidInput.single("interval", "must be positive", what="retention schedule")
        if max_age.total_seconds() <= 0:
            raise InvalidInput.single("max_age", "must be positive", what="retention schedule")
        self.log, self.max_age, self.archive_dir, self.interval = log, max_age, archive_dir, interval
        self._on_run = on_run
        self._errors = LoopErrors(
            "retention", on_error=on_error, logger=_logger, subject=f"audit retention on {log.node}"
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> list[str]:
        """One retention run now; returns the segments removed."""
        removed = await self.log.apply_retention(self.max_age, archive_dir=self.archive_dir)
        if removed:
            log.info("audit retention on %s removed %s", self.log.node, ", ".join(removed))
        return removed

    async def _loop(self) -> None:
        while not self._stop.is_set():
            result: list[str] | BaseException
            try:
                result = await self.run_once()
            except Exception as exc:  # logged and retried: retention must not stop the gateway
                self._errors.failed(exc)
                result = exc
            else:
                self._errors.succeeded()
            if self._on_run is not None:
                self._on_run(result)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval.total_seconds())

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._loop(), name=f"audit-retention-{self.log.node}")

    async def stop(self) -> None:
        """Stop after the run in progress (if any) and wait for it."""
        if self._task is not None:
            self._stop.set()
            task, self._task = self._task, None
            await task

    async def __aenter__(self) -> RetentionSchedule:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
