"""The write-ahead audit log: segmented, group-committed, recovered on open, tamper-evident.

``WalAuditLog`` implements ``AuditLog`` on disk (format: ``segment.py``). One writer
thread owns the open segment; concurrent ``append`` calls are staged per event-loop
turn, handed over together, written with one ``write`` and made durable with one
``fdatasync``; only then are they acknowledged. A signed checkpoint is written into the
log (and to the ``checkpoint`` file) every ``checkpoint_every`` events, ``checkpoint_interval``
seconds after the first event no checkpoint covers became durable, and on close; a
clean close seals the segment. Opening recovers: see ``_recover``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from ..errors import AuditError, InvalidInput
from . import retention
from ._files import atomic_write, fsync_dir
from .checkpoint import (
    Checkpoint,
    Signer,
    default_key_path,
    legacy_key_path,
    load_or_create_signer,
    misplaced_key_message,
    origin_for,
)
from .compression import COMPRESSED_SUFFIX, compress_segment, read_segment, stored
from .merkle import FileLeafStore, MerkleTree
from .record import AuditRecord, PlainRecord, canonical_json, parse_record, record_bytes
from .recovery import CHECKPOINT_FILE, RecoveryReport, Rescan, recover
from .segment import (
    CHECKPOINT,
    EVENT,
    MAX_PAYLOAD,
    SEAL,
    SEGMENT,
    ChainState,
    Frame,
    SegmentName,
    encode_batch_packed,
    encode_frame,
    list_segments,
    load_pruned,
    scan,
)

__all__ = ["FsyncPolicy", "RecoveryReport", "WalAuditLog", "WalOptions", "origin_for"]

_log = logging.getLogger("agency.audit")

VKEY_FILE = "checkpoint.vkey"
LOCK_FILE = "LOCK"
TREE_CACHED_FROM = 8
"""Merkle subtrees of 2**8 leaves and more are kept in memory; smaller ones are hashed
again from the leaf file when a root or proof needs them (at most 255 hashes)."""
PUBLISH_INTERVAL = 1.0
"""Seconds between rewrites of the ``checkpoint`` file (tmp + fsync + rename + fsync of the
directory) by the writer; the checkpoints in the log itself are written every
``checkpoint_every`` events regardless. The file may lag the log, never lead it."""
KEPT_CHECKPOINTS = 1024
"""Checkpoints a live log holds in memory (between this and twice it, ~540 bytes each; one a
second or more while records arrive): the older ones stay in its segments, where ``agency audit
verify`` and exports read them."""


class FsyncPolicy(StrEnum):
    """When data reaches the disk before an append is acknowledged.

    ``BATCH`` (default): one fdatasync per group-committed batch, before any ack.
    ``INTERVAL``: ack after the write; fdatasync at most every ``fsync_interval``.
    A crash (of the machine, not the process) can lose acknowledged records: only
    for those who accept that risk.
    """

    BATCH = "batch"
    INTERVAL = "interval"


@dataclass(frozen=True)
class WalOptions:
    """Knobs of a ``WalAuditLog``.

    Attributes:
        segment_bytes: Rotate to a new segment once the open one passes this size.
        checkpoint_every: Sign a checkpoint after this many new events (and on close).
        checkpoint_interval: Sign (and publish) a checkpoint this many seconds after the
            first event not yet covered by one was durable, however few events came since:
            the tail that no published checkpoint covers is at most this old (plus one
            fsync). None = only by count and on close.
        fsync: The fsync policy (see ``FsyncPolicy``).
        fsync_interval: Seconds between fdatasyncs under ``FsyncPolicy.INTERVAL``.
        on_sync: Called (from the writer thread) with each fdatasync's duration in seconds,
            e.g. a Prometheus histogram's ``observe``; must be quick and thread-safe.
        recovery_workers: Processes that check segments in parallel when the log is opened
            (default: one per CPU; 1: check in this process). Small logs are checked in
            this process anyway (see ``segment_pool``).
        compress_sealed: Rewrite each sealed segment as ``.wal.zst`` (zstd, the same bytes once
            read: see ``compression``), in a background thread.
        check_records: On open, check that every event is an audit record (a malformed one
            refuses the open, naming it): ~2-6 µs per record in pydantic, a fraction of a µs for
            a record in the canonical form when the compiled part is built (``native.py``). ``agency audit
            verify`` always checks them.
    """

    segment_bytes: int = 64 << 20
    checkpoint_every: int = 1000
    checkpoint_interval: float | None = 1.0
    fsync: FsyncPolicy = FsyncPolicy.BATCH
    fsync_interval: float = 0.05
    on_sync: Callable[[float], None] | None = None
    recovery_workers: int | None = None
    compress_sealed: bool = True
    check_records: bool = True

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise InvalidInput.single("segment_bytes", "must be at least 4096", what="audit log options")
        if self.checkpoint_every < 1:
            raise InvalidInput.single("checkpoint_every", "must be at least 1", what="audit log options")
        if self.checkpoint_interval is not None and not self.checkpoint_interval > 0:
            raise InvalidInput.single(
                "checkpoint_interval", "must be positive (or None: off)", what="audit log options"
            )
        if self.fsync_interval <= 0:
            raise InvalidInput.single("fsync_interval", "must be positive", what="audit log options")
        if self.recovery_workers is not None and self.recovery_workers < 1:
            raise InvalidInput.single("recovery_workers", "must be at least 1", what="audit log options")


_Item = tuple[list[bytes], asyncio.AbstractEventLoop, "asyncio.Future[int]"]
"""One hand-over: the payloads of one ``append`` / ``append_batch`` (none: a checkpoint
request), the loop of its caller, and its one future (resolved with the first index)."""


class WalAuditLog:
    """The durable, tamper-evident audit log of one node, under ``root/<node>/``.

    Args:
        root: The audit directory; this node's log lives in ``root/<node>``.
        node: This gateway's node id (one log per replica).
        signer: Checkpoint key; default: loaded from / created at ``keys/<node>.key`` beside
            ``root`` (:func:`~middleware.audit.checkpoint.default_key_path`), never under it.
        options: Segment size, checkpoint interval, fsync policy.

    Raises:
        AuditCorrupted: the log on disk fails recovery (see ``location`` and ``where``).
        AuditError: another process holds the log, or (no ``signer``) a key is found under
            ``root/keys/`` where earlier releases kept it (the message says how to move it).
    """

    _fd: int
    _offset: int
    _synced: int
    _last_sync: float
    _pending_cp: Checkpoint | None
    _durable_cp: Checkpoint | None  #: the latest checkpoint a crash can no longer take back
    _published_at: float
    _unsigned_since: float | None
    _segment_path: Path
    _segment_first: int
    _visible: tuple[Path, int]
    _seq: int
    _checkpointed: int

    def __init__(
        self,
        root: str | os.PathLike[str],
        node: str = "local",
        *,
        signer: Signer | None = None,
        options: WalOptions | None = None,
    ) -> None:
        if not node or "/" in node or node.startswith(".") or node == "keys":
            raise InvalidInput.single("node", "must be a plain directory name", what="audit log")
        self.options = options or WalOptions()
        self.node = node
        self.origin = origin_for(node)
        self._root = Path(root)
        if signer is None and legacy_key_path(root, node).exists():
            raise AuditError(misplaced_key_message(root, node))
        self._dir = self._root / node
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self._dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise AuditError(f"audit log {self._dir} is in use by another process") from None
        try:
            self._signer = signer or load_or_create_signer(default_key_path(root, node), f"audit-{node}")
            self._check_vkey()
            self._state = self._fresh_state()
            self.recovery = self._recover()
            self._open_for_append()
            if self.recovery.set_aside_events:
                self._report_set_aside(self.recovery)
        except BaseException:
            if hasattr(self, "_state"):
                self._state.tree.close()
            os.close(self._lock_fd)
            raise
        self._cv = threading.Condition()
        self._queue: list[_Item] = []
        self._staged: dict[asyncio.AbstractEventLoop, list[tuple[list[bytes], asyncio.Future[int]]]] = {}
        self._closing = False
        self._closed = False
        self._failed: BaseException | None = None
        self._close_error: BaseException | None = None
        # The syncer: fdatasyncs what the writer has written and acknowledges it, while the
        # writer frames, hashes and writes the next batch (BATCH policy).
        self._scv = threading.Condition()
        self._sync_queue: list[list[tuple[_Item, int]]] = []
        self._sync_posted = self._sync_done = 0
        self._sync_stop = False
        self._syncer = threading.Thread(target=self._run_syncer, name=f"audit-sync-{node}", daemon=True)
        self._syncer.start()
        self._writer = threading.Thread(target=self._run, name=f"audit-wal-{node}", daemon=True)
        self._writer.start()
        # sealed segments are compressed off the writer's path (zstd releases the GIL)
        self._compress_queue: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._compressor = threading.Thread(
            target=self._run_compressor, name=f"audit-zstd-{node}", daemon=True
        )
        self._compressor.start()
        if self.options.compress_sealed:
            for seg in self._sealed_segments:
                if not seg.path.name.endswith(COMPRESSED_SUFFIX):
                    self._compress_queue.put(seg.path)

    # ------------------------------------------------------------------ public API

    @property
    def location(self) -> str:
        """The node's log directory."""
        return str(self._dir)

    @property
    def size(self) -> int:
        """Events durably written so far."""
        return self._state.size

    @property
    def vkey(self) -> str:
        """The verifier key of this log's checkpoints (publish it; pin it when verifying)."""
        return self._signer.vkey

    async def append(self, record: AuditRecord) -> int:
        """Write ``record``; returns its index once it is on disk (group-committed).

        Raises:
            InvalidInput: the record is larger than the frame limit.
            AuditError: the log is closed or a write/fsync failed (the log then refuses
                every further append: after a failed fsync the page cache cannot be trusted).
        """
        return await self._stage([record_bytes(record)])

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        """Write ``records`` (consecutive indexes, in order); returns their indexes once all are
        on disk. One hand-over and one future for the batch; each record is its own event frame
        and Merkle leaf, as if appended alone.

        Raises:
            InvalidInput: a record is larger than the frame limit (nothing of the batch is written).
            AuditError: as ``append``.
        """
        if not records:
            return range(self._state.size + 1, self._state.size + 1)
        first = await self._stage([record_bytes(r) for r in records])
        return range(first, first + len(records))

    def _stage(self, payloads: list[bytes]) -> asyncio.Future[int]:
        """Stage ``payloads`` for this loop turn's hand-over (synchronously: call order is log
        order); the future gets the first one's index once all are durable."""
        for payload in payloads:
            if len(payload) > MAX_PAYLOAD:
                raise InvalidInput.single("record", f"larger than {MAX_PAYLOAD} bytes", what="audit record")
        if self._failed is not None:
            raise AuditError(f"audit log failed earlier: {self._failed}")
        if self._closing:
            raise AuditError("audit log is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        staged = self._staged.get(loop)
        if staged is None:
            # Every appender woken in this loop turn joins the same hand-over: one batch.
            staged = self._staged[loop] = []
            loop.call_soon(self._hand_over, loop)
        staged.append((payloads, fut))
        return fut

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        """Every durable record, in index order, re-read (and re-checked) from disk."""
        for frame in self._iter_frames():
            if frame.type == EVENT:
                yield frame.index, parse_record(frame.payload, where=f"{self.node}: record {frame.index}")

    def task_records(self) -> Iterator[dict[str, Any]]:
        """The ``task.*`` records (as JSON objects), in index order: a quick start-up scan
        (only those records are parsed) for ``task_recovery.rebuild_tasks``."""
        marker = b'"event_type":"task.'
        for frame in self._iter_frames():
            if frame.type == EVENT:
                raw = bytes(frame.payload)
                if marker in raw:
                    yield orjson.loads(raw)

    def latest_checkpoint(self) -> Checkpoint | None:
        """The most recent durable checkpoint (None before the first).

        A checkpoint is handed out only once the log holding it is synced (its
        ``checkpoint`` file follows): nobody ever holds a signed checkpoint that a crash
        could take back and the log then re-sign differently.
        """
        return self._durable_cp

    def checkpoints(self) -> list[Checkpoint]:
        """The durable checkpoints held in memory, oldest first (see :meth:`latest_checkpoint`):
        at least the last :data:`KEPT_CHECKPOINTS` (every one is in the segments; ``agency audit
        verify`` reads them all)."""
        durable = self._durable_cp
        if durable is None:
            return []
        return [cp for cp in self._state.checkpoints if cp.size <= durable.size]

    @property
    def tree(self) -> MerkleTree:
        """The Merkle tree over the durable events (read-only use: proofs, roots)."""
        return self._state.tree

    @property
    def root_dir(self) -> Path:
        """The audit directory holding this node's log (and maybe other replicas')."""
        return self._root

    def _proof_size(self, size: int, field: str) -> int:
        if size == 0:
            cp = self.latest_checkpoint()
            if cp is None:
                raise InvalidInput.single(
                    field, "no checkpoint signed yet: give a size", what="proof request"
                )
            return cp.size
        if not 0 < size <= self._state.tree.size:
            raise InvalidInput.single(field, f"must be 1..{self._state.tree.size}", what="proof request")
        return size

    def inclusion_proof(self, index: int, tree_size: int = 0) -> tuple[int, bytes, list[bytes]]:
        """RFC 9162 inclusion proof of record ``index`` (1-based) in the tree of ``tree_size``.

        Args:
            index: The record.
            tree_size: The tree size to prove against (0: the latest checkpoint's).

        Returns:
            (tree size, leaf hash, audit path).

        Raises:
            InvalidInput: the index or size is outside the log.
        """
        size = self._proof_size(tree_size, "tree_size")
        if not 1 <= index <= size:
            raise InvalidInput.single("index", f"must be 1..{size}", what="proof request")
        tree = self._state.tree
        return size, tree.leaf(index - 1), tree.inclusion_proof(index - 1, size)

    def consistency_proof(self, old_size: int, new_size: int = 0) -> tuple[int, list[bytes]]:
        """RFC 9162 consistency proof from ``old_size`` to ``new_size`` (0: latest checkpoint's).

        Raises:
            InvalidInput: a size is outside the log or old > new, or ``old_size`` is 0 (no
                proof from the empty tree: RFC 9162 §2.1.4).
        """
        new = self._proof_size(new_size, "new_size")
        if old_size == 0:
            raise InvalidInput.single(
                "old_size",
                "must be at least 1: there is no consistency proof from the empty tree (RFC 9162 §2.1.4)",
                what="proof request",
            )
        if not 0 < old_size <= new:
            raise InvalidInput.single("old_size", f"must be 1..{new}", what="proof request")
        return new, self._state.tree.consistency_proof(old_size, new)

    async def checkpoint(self) -> Checkpoint:
        """Sign a checkpoint now (after everything appended so far) and return it."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        self._enqueue([([], loop, fut)])  # no payloads: a checkpoint request
        await fut
        cp = self.latest_checkpoint()
        assert cp is not None
        return cp

    async def close(self) -> None:
        """Flush, sign a final checkpoint, seal the segment and release the log."""
        if self._closed:
            return
        await asyncio.sleep(0)  # let appends staged in this loop turn reach the writer first
        with self._cv:
            self._closing = True
            self._cv.notify()
        await asyncio.to_thread(self._writer.join)
        if self.options.compress_sealed and self._close_error is None and self._failed is None:
            self._compress_queue.put(self._segment_path)  # sealed by the close
        self._compress_queue.put(None)
        await asyncio.to_thread(self._compressor.join)
        self._closed = True
        self._state.tree.close()
        os.close(self._lock_fd)
        if self._close_error is not None:
            raise AuditError(f"audit log close failed: {self._close_error}") from self._close_error

    # ------------------------------------------------------------------ writer

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        staged = self._staged.pop(loop, [])
        self._enqueue([(p, loop, f) for p, f in staged])

    def _enqueue(self, items: list[_Item]) -> None:
        with self._cv:
            if self._closing:
                for _, loop, fut in items:
                    loop.call_soon(_fail, fut, AuditError("audit log is closed"))
                return
            self._queue.extend(items)
            self._cv.notify()

    @property
    def _dirty(self) -> bool:
        """Written and not yet fdatasynced."""
        return self._offset > self._synced

    def _run_syncer(self) -> None:
        """Make what the writer wrote durable and acknowledge it, batch after batch: one
        fdatasync covers every batch posted while the previous one ran."""
        while True:
            with self._scv:
                while not self._sync_queue and not self._sync_stop:
                    self._scv.wait()
                if not self._sync_queue:
                    return
                posted, self._sync_queue = self._sync_queue, []
            acks = [ack for batch in posted for ack in batch]
            if self._failed is not None:
                _resolve(
                    [item for item, _ in acks], error=AuditError(f"audit log failed earlier: {self._failed}")
                )
            else:
                try:
                    self._sync()
                except Exception as exc:  # after a failed fsync nothing later can be trusted
                    self._failed = exc
                    _resolve([item for item, _ in acks], error=AuditError(f"audit write failed: {exc}"))
                else:
                    if self._unsigned_since is None and self._state.size > max(self._checkpointed, 0):
                        self._unsigned_since = time.monotonic()  # durable and not yet signed
                        with self._cv:
                            self._cv.notify()  # the idle writer now has a deadline to keep
                    _resolve_ok(acks)
            with self._scv:
                self._sync_done += len(posted)
                self._scv.notify_all()

    def _post_sync(self, acks: list[tuple[_Item, int]]) -> None:
        with self._scv:
            self._sync_queue.append(acks)
            self._sync_posted += 1
            self._scv.notify_all()

    def _drain(self) -> None:
        """Wait until the syncer has synced (or failed) everything posted to it."""
        with self._scv:
            while self._sync_done != self._sync_posted:
                self._scv.wait()

    def _stop_syncer(self) -> None:
        with self._scv:
            self._sync_stop = True
            self._scv.notify_all()
        self._syncer.join()

    def _run(self) -> None:
        try:
            self._run_writer()
        finally:
            self._stop_syncer()

    def _run_writer(self) -> None:
        interval = self.options.fsync is FsyncPolicy.INTERVAL
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    waits = [self.options.fsync_interval] if interval and self._dirty else []
                    if self._pending_cp is not None:
                        waits.append(PUBLISH_INTERVAL)
                    if self._unsigned_since is not None and self.options.checkpoint_interval:
                        due = self._unsigned_since + self.options.checkpoint_interval
                        waits.append(max(due - time.monotonic(), 0.0))
                    if not waits:
                        self._cv.wait()
                    elif not self._cv.wait(min(waits)):
                        break  # idle with unsynced data or an unpublished checkpoint: below
                batch, self._queue = self._queue, []
                closing = self._closing
            if self._failed is not None:
                _resolve(batch, error=AuditError(f"audit log failed earlier: {self._failed}"))
            else:
                try:
                    self._commit(batch)
                    if (
                        interval
                        and self._dirty
                        and time.monotonic() - self._last_sync >= self.options.fsync_interval
                    ):
                        self._sync()
                except Exception as exc:  # an I/O error: fail this batch and every later append
                    self._failed = exc
                    _resolve(batch, error=AuditError(f"audit write failed: {exc}"))
            if closing:
                try:
                    self._drain()
                    self._finish()
                except Exception as exc:
                    self._close_error = exc
                return

    def _commit(self, batch: list[_Item]) -> None:
        st = self._state
        parts: list[bytes] = []
        acks: list[tuple[_Item, int]] = []
        cp_acks: list[tuple[_Item, int]] = []  # checkpoint requests: answered once the file is published
        synced = self._synced
        want_checkpoint = False
        leaves = b""
        now = time.time_ns()
        chain, index = st.chain, st.size
        payloads: list[bytes] = []
        for item in batch:
            given = item[0]
            if not given:
                want_checkpoint = True
                cp_acks.append((item, 0))
                continue
            acks.append((item, index + 1))
            index += len(given)
            payloads.extend(given)
        if payloads:
            # compiled (native.py): the batch's frames and hashes are built without the GIL
            frames, leaves, chain = encode_batch_packed(
                st.size + 1, synced, now, chain, payloads, state=st, sign=self._signer.sign_bytes
            )
            parts.append(frames)
        st.tree.extend_packed(leaves)
        st.chain, st.size = chain, index
        on_time = (
            self._unsigned_since is not None
            and self.options.checkpoint_interval is not None
            and time.monotonic() - self._unsigned_since >= self.options.checkpoint_interval
        )
        signed = want_checkpoint or on_time or st.size - self._checkpointed >= self.options.checkpoint_every
        if signed:
            parts.append(self._checkpoint_frame(synced))
        if parts:
            self._write(b"".join(parts))
        publish = self._pending_cp is not None and (
            cp_acks or on_time or time.monotonic() - self._published_at >= PUBLISH_INTERVAL
        )
        if (
            self.options.fsync is FsyncPolicy.BATCH
            and parts
            and not signed
            and not publish
            and not cp_acks
            and self._offset < self.options.segment_bytes
        ):
            # The usual case: the syncer makes it durable and acknowledges it while this
            # thread goes on framing and hashing the next batch.
            self._post_sync(acks)
            return
        self._drain()
        if self._failed is not None:
            raise self._failed
        if parts and self.options.fsync is FsyncPolicy.BATCH:
            self._sync()
        if self._unsigned_since is None and st.size > max(self._checkpointed, 0):
            self._unsigned_since = time.monotonic()  # durable (BATCH) and not yet signed
        if signed:  # synced just above (a checkpoint takes this path): now it may be handed out
            self._durable_cp = st.checkpoints[-1]
        if publish:
            self._publish_checkpoint()
        _resolve_ok(acks)
        _resolve_ok(cp_acks)
        if self._offset >= self.options.segment_bytes:
            self._rotate()

    def _checkpoint_frame(self, synced: int) -> bytes:
        st = self._state
        cp = self._signer.sign(self.origin, st.size, st.tree.root())
        frame, _, chain = encode_frame(
            CHECKPOINT, st.size, synced, time.time_ns(), st.chain, cp.note.encode()
        )
        st.chain = chain
        st.checkpoints.append(cp)
        if len(st.checkpoints) > 2 * KEPT_CHECKPOINTS:  # bounded memory: older ones stay in the segments
            del st.checkpoints[:-KEPT_CHECKPOINTS]
        self._checkpointed = st.size
        self._unsigned_since = None
        self._pending_cp = cp
        return frame

    def _publish_checkpoint(self) -> None:
        """Write the latest checkpoint to its own file once the log holding it is durable."""
        cp, self._pending_cp = self._pending_cp, None
        assert cp is not None
        if self._dirty:
            self._sync()
        atomic_write(self._dir / CHECKPOINT_FILE, cp.note.encode())
        self._published_at = time.monotonic()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._offset += len(data)
        self._visible = (self._segment_path, self._offset)

    def _sync(self) -> None:
        target = self._offset  # the writer may write more meanwhile: only this much is covered
        started = time.perf_counter()
        os.fdatasync(self._fd)
        if self.options.on_sync is not None:
            self.options.on_sync(time.perf_counter() - started)
        self._synced = target
        self._last_sync = time.monotonic()

    def _run_compressor(self) -> None:
        while (path := self._compress_queue.get()) is not None:
            try:
                if path.exists():
                    compress_segment(path)
            except Exception as exc:  # a plain sealed segment is as good, only larger
                _log.warning("audit log %s: could not compress %s: %s", self._dir, path.name, exc)

    def _rotate(self) -> None:
        self._seal()
        self._sealed_segments.append(
            retention.SealedSegment(
                SegmentName(self._seq, self._segment_first),
                self._segment_path,
                self._state.size,
                time.time_ns(),
            )
        )
        os.close(self._fd)
        if self.options.compress_sealed:
            self._compress_queue.put(self._segment_path)
        self._seq += 1
        self._new_segment()

    def _seal(self) -> None:
        st = self._state
        frame, _, chain = encode_frame(
            SEAL, st.size, self._synced, time.time_ns(), st.chain, b'{"sealed":true}'
        )
        self._write(frame)
        self._sync()
        st.chain = chain

    def _finish(self) -> None:
        try:
            if self._failed is None:
                if self._checkpointed != self._state.size or not self._state.checkpoints:
                    self._write(self._checkpoint_frame(self._synced))
                self._seal()
                self._durable_cp = self._state.checkpoints[-1]
                if self._pending_cp is not None:
                    self._publish_checkpoint()
        finally:
            os.close(self._fd)

    # ------------------------------------------------------------------ opening

    def _check_vkey(self) -> None:
        path = self._dir / VKEY_FILE
        if path.exists():
            if path.read_text().strip() != self._signer.vkey:
                raise AuditError(
                    f"the checkpoint key does not match {path}: refusing to sign this log with another key"
                )
        else:
            atomic_write(path, (self._signer.vkey + "\n").encode())

    def _fresh_state(self) -> ChainState:
        # The tree's leaf hashes live in a nameless file beside the log, and only subtrees
        # of 256 leaves and more in memory: ~0.25 B per record instead of 64 B, for a
        # gateway that runs for months (the file is rebuilt by recovery on every open).
        tree = MerkleTree(store=FileLeafStore(self._dir), cached_from=TREE_CACHED_FROM)
        return ChainState(
            tree=tree,
            verifier=self._signer.verifier(),
            origin=self.origin,
            check_records=self.options.check_records,
        )

    def _recover(self) -> RecoveryReport:
        try:
            found = recover(
                self._dir, self._state, self._signer.verifier(), workers=self.options.recovery_workers
            )
        except Rescan as rescan:  # old-format unsigned events were set aside: read the rest again
            self._state.tree.close()
            self._state = self._fresh_state()
            found = recover(
                self._dir, self._state, self._signer.verifier(), workers=self.options.recovery_workers
            )
            kept = rescan.report
            found.report.set_aside_events += kept.set_aside_events
            found.report.set_aside_file = kept.set_aside_file
            found.report.set_aside_reason = kept.set_aside_reason
            found.report.clean = False
        self._seq, self._sealed_last, self._last_path = found.seq, found.last_sealed, found.last_path
        self._last_name_first = found.last_first_index
        self._sealed_segments = found.sealed
        st = self._state
        del st.checkpoints[:-KEPT_CHECKPOINTS]  # read back from every segment: keep the recent ones
        self._checkpointed = st.checkpoints[-1].size if st.checkpoints else -1
        self._durable_cp = st.checkpoints[-1] if st.checkpoints else None  # read back from the log
        return found.report

    def _open_for_append(self) -> None:
        self._offset = self._synced = 0
        self._last_sync = time.monotonic()
        self._pending_cp = None
        self._published_at = float("-inf")  # the first checkpoint is published at once
        # events recovered that no checkpoint covers (a crash): sign them on the first round
        unsigned = self._state.size > max(self._checkpointed, 0)
        self._unsigned_since = time.monotonic() if unsigned else None
        if self._last_path is not None and not self._sealed_last:
            self._fd = os.open(self._last_path, os.O_WRONLY | os.O_APPEND)
            self._offset = self._synced = os.fstat(self._fd).st_size
            self._segment_path = self._last_path
            self._segment_first = self._last_name_first
            self._visible = (self._last_path, self._offset)
        else:
            self._seq += 1 if self._last_path is not None else 0
            self._new_segment()

    def _report_set_aside(self, report: RecoveryReport) -> None:
        """Say in the log (and the gateway's log) what recovery set aside, before anything else."""
        _log.warning(
            "audit log %s: %d unsigned event(s) at its end set aside in %s (%s); they are not part "
            "of the log and were not signed",
            self._dir,
            report.set_aside_events,
            report.set_aside_file,
            report.set_aside_reason,
        )
        rec = AuditRecord(
            event_type="audit.set_aside",
            component="audit",
            node=self.node,
            outcome="set_aside",
            detail={
                "events": report.set_aside_events,
                "file": report.set_aside_file,
                "reason": report.set_aside_reason,
            },
        )
        st = self._state
        frames, leaves, chain = encode_batch_packed(
            st.size + 1, self._synced, time.time_ns(), st.chain, [rec.canonical()],
            state=st, sign=self._signer.sign_bytes,
        )  # fmt: skip
        self._write(frames)
        self._sync()
        st.tree.extend_packed(leaves)
        st.chain, st.size = chain, st.size + 1
        self._unsigned_since = time.monotonic()  # checkpointed on time like any record

    def _new_segment(self) -> None:
        """Create the next segment: tmp -> header -> fsync -> rename -> fsync directory."""
        st = self._state
        name = SegmentName(self._seq, st.size + 1)
        header = canonical_json(
            {"seq": name.seq, "first_index": name.first_index, "origin": self.origin, "node": self.node}
        )
        frame, _, chain = encode_frame(SEGMENT, st.size, 0, time.time_ns(), st.chain, header)
        final = self._dir / name.filename
        tmp = final.with_name(final.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            os.write(fd, frame)
            os.fsync(fd)
            os.rename(tmp, final)
            fsync_dir(self._dir)
        except BaseException:
            os.close(fd)
            raise
        st.chain = chain
        self._fd = fd
        self._offset = self._synced = len(frame)
        self._segment_path = final
        self._segment_first = name.first_index
        self._visible = (final, self._offset)

    # ------------------------------------------------------------------ reading

    def _iter_frames(self) -> Iterator[Frame]:
        """Re-read durable frames from disk with a fresh check of every frame."""
        end_path, end_offset = self._visible  # one tuple, published atomically by the writer
        state = ChainState(verifier=self._signer.verifier(), origin=self.origin)
        _, segments = load_pruned(self._dir, state, list_segments(self._dir))
        for name, path in segments:
            data = read_segment(path, end_offset if path == end_path else None)
            yield from scan(data, name, path.name, state)
            if path == end_path:
                return

    # ------------------------------------------------------------------ retention

    async def apply_retention(
        self,
        max_age: timedelta,
        *,
        archive_dir: str | os.PathLike[str] | None = None,
        now_ns: int | None = None,
    ) -> list[str]:
        """Archive or delete the oldest sealed segments whose last record is older than ``max_age``.

        Only whole sealed segments entirely covered by a signed checkpoint go, oldest first;
        the open segment never does. Their leaf hashes stay (``pruned.leaves``) so roots,
        checkpoints and proofs of later records still verify. The removal itself is then
        appended to the log as an ``audit.retention`` record (see ``retention.py``).

        Args:
            max_age: Segments whose newest frame is older than this go.
            archive_dir: Move them to ``archive_dir/<node>/`` instead of deleting them.
            now_ns: The current time (UTC ns; for tests).

        Returns:
            The names of the segments archived or deleted.
        """
        if max_age.total_seconds() <= 0:
            raise InvalidInput.single("max_age", "must be positive", what="retention")
        cutoff = (now_ns if now_ns is not None else time.time_ns()) - int(max_age.total_seconds() * 1e9)
        cp = self.latest_checkpoint()
        signed = cp.size if cp else 0
        chosen = retention.choose(self._sealed_segments, cutoff, signed, self._segment_path)
        if not chosen:
            return []
        archive = Path(archive_dir) / self.node if archive_dir is not None else None
        names = [stored(seg.path).name for seg in chosen]  # compressed since they were sealed, maybe
        await asyncio.to_thread(retention.prune, self._dir, chosen, self._state.tree, archive)
        del self._sealed_segments[: len(chosen)]
        await self.append(retention.record(self.node, max_age, chosen, signed, archive, names=names))
        return names


def _resolve(batch: list[_Item], *, error: BaseException) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[int]]] = {}
    for _, loop, fut in batch:
        by_loop.setdefault(loop, []).append(fut)
    for loop, futs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(_fail_all, futs, error)


def _resolve_ok(acks: list[tuple[_Item, int]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int]]] = {}
    for (_, loop, fut), index in acks:
        by_loop.setdefault(loop, []).append((fut, index))
    for loop, results in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_set_all, results)


def _set_all(results: list[tuple[asyncio.Future[int], int]]) -> None:
    for fut, index in results:
        if not fut.done():
            fut.set_result(index)


def _fail_all(futs: list[asyncio.Future[int]], error: BaseException) -> None:
    for fut in futs:
        _fail(fut, error)


def _fail(fut: asyncio.Future[int], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)
