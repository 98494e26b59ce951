"""The on-disk format of the write-ahead audit log, and the one scanner that reads it.

A node's log is a directory of segment files ``{seq:016x}-{first_index:016x}.wal``.
Each segment is a sequence of frames, little-endian, each padded to 8 bytes::

     0 u32 magic 0x31445541 ("AUD1")   4 u32 payload length L
     8 u32 CRC-32C of bytes [12, 72+L)
    12 u8 type  13 u8 version  14 u16 reserved (0)
    16 u64 index       (events: their index, contiguous from 1; others: events so far)
    24 u64 synced_through (offset of this segment already fsynced when the frame was written)
    32 u64 time, UTC nanoseconds since the epoch
    40 32B chain hash of the previous frame (segment header: last frame of previous segment)
    72 L   payload

Frame types: segment header (JSON), event (the canonical JSON of an ``AuditRecord``,
which is also the RFC 6962 leaf input), checkpoint (a signed note), seal (clean close).
``chain = SHA-256(type || index || prev_chain || SHA-256(0x00 || payload))``; for events
the inner hash is the Merkle leaf hash. The scanner checks framing, CRC, chain,
index contiguity and every checkpoint (signature and root) and grows the Merkle tree.

When the compiled part is built (``native.py``), the per-record work of ``encode_events``,
``encode_batch`` and ``check`` runs in C with the GIL released, one call per batch; the Python
here is the reference it matches byte for byte, and still reads (and names) every frame the
compiled scan does not vouch for.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c as _crc32c

from ..errors import AuditCorrupted
from .checkpoint import Checkpoint, Verifier
from .merkle import MerkleTree
from .native import NATIVE

__all__ = [
    "CHECKPOINT",
    "COMMIT",
    "EVENT",
    "HEADER_SIZE",
    "SEAL",
    "SEGMENT",
    "ChainState",
    "Frame",
    "SegmentName",
    "TornFrame",
    "Unsigned",
    "check",
    "commit_message",
    "encode_batch",
    "encode_batch_packed",
    "encode_events",
    "encode_frame",
    "event_offset",
    "find_promised_frame",
    "list_segments",
    "load_pruned",
    "scan",
    "settle_signatures",
]

MAGIC = 0x31445541
VERSION = 2
"""Frames written now. Version 2 events come in batches announced by a signed commit frame."""
LEGACY_VERSION = 1
"""Frames of logs written before commit frames (events signed only by later checkpoints)."""
SEGMENT, EVENT, CHECKPOINT, SEAL, COMMIT = 1, 2, 3, 4, 5
_TYPES = {SEGMENT: "segment header", EVENT: "event", CHECKPOINT: "checkpoint", SEAL: "seal", COMMIT: "commit"}
HEADER = struct.Struct("<IIIBBHQQQ32s")
HEADER_SIZE = HEADER.size  # 72
_TAIL = struct.Struct("<BBHQQQ32s")  # the CRC-covered part of the header
_CHAIN_PREFIX = struct.Struct("<BQ32s32s")
ZERO_HASH = b"\x00" * 32
MAX_PAYLOAD = 4 << 20
_LEAF = hashlib.sha256(b"\x00")
_sha256 = hashlib.sha256
_crc = _crc32c.crc32c
_SEGMENT_RE = re.compile(r"^([0-9a-f]{16})-([0-9a-f]{16})\.wal(?:\.zst)?$")
_NATIVE = NATIVE
"""The compiled per-record work (``native.py``), or None: this module's Python does it."""


def crc32c(data: bytes | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli), as in iSCSI/ext4; crc32c(b"123456789") == 0xE3069283."""
    return _crc(data, value)


@dataclass(frozen=True, order=True)
class SegmentName:
    """A segment file's place in the log: its sequence number and the index of its first event."""

    seq: int
    first_index: int

    @property
    def filename(self) -> str:
        return f"{self.seq:016x}-{self.first_index:016x}.wal"

    @classmethod
    def parse(cls, name: str) -> SegmentName | None:
        m = _SEGMENT_RE.match(name)
        return cls(int(m[1], 16), int(m[2], 16)) if m else None


def list_segments(directory: Path) -> list[tuple[SegmentName, Path]]:
    """The segments of a node directory (plain ``.wal`` or compressed ``.wal.zst``), in order,
    checking the sequence has no gap.

    Raises:
        AuditCorrupted: a segment is missing from the sequence.
    """
    listed = sorted((name, p) for p in directory.iterdir() if (name := SegmentName.parse(p.name)) is not None)
    # a segment both plain and compressed (a crash while compressing it): the plain one counts
    found = [(n, p) for i, (n, p) in enumerate(listed) if i == 0 or listed[i - 1][0] != n]
    for (prev, _), (cur, path) in itertools.pairwise(found):
        if cur.seq != prev.seq + 1:
            raise AuditCorrupted(f"segment {prev.seq + 1:016x} is missing", where=str(path))
        if cur.first_index < prev.first_index:
            raise AuditCorrupted("segment indexes go backwards", where=str(path))
    return found


PRUNED_META = "pruned.json"
PRUNED_LEAVES = "pruned.leaves"


def load_pruned(
    directory: Path, state: ChainState, segments: list[tuple[SegmentName, Path]]
) -> tuple[int, list[tuple[SegmentName, Path]]]:
    """Start ``state`` after the events removed by retention; returns (pruned count, segments left).

    Retention keeps the leaf hashes of removed events (``pruned.leaves``) and the chain hash
    where the next segment starts (``pruned.json``), so the Merkle tree, its signed roots and
    proofs for later records stay whole. Segments entirely covered by the pruned range (left
    by an interrupted retention run) are returned separately as skipped, not scanned.

    Raises:
        AuditCorrupted: the pruned files disagree with each other or with the segments.
    """
    meta_path = directory / PRUNED_META
    if not meta_path.exists():
        return 0, segments
    try:
        meta = json.loads(meta_path.read_text())
        size, chain = int(meta["size"]), bytes.fromhex(meta["chain"])
        leaves = (directory / PRUNED_LEAVES).read_bytes()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AuditCorrupted(f"retention record unreadable ({exc})", where=str(meta_path)) from None
    # Retention writes the leaf hashes first, then the size: a crash in between leaves extra
    # hashes that are simply not used (they are re-derived from the segments still present).
    if len(leaves) < 32 * size or len(chain) != 32:
        raise AuditCorrupted("pruned leaf hashes do not match the pruned size", where=str(meta_path))
    state.tree.extend([leaves[i : i + 32] for i in range(0, 32 * size, 32)])
    state.size, state.chain, state.pruned = size, chain, size
    keep = [(n, p) for n, p in segments if n.first_index > size]
    if segments and keep != segments[len(segments) - len(keep) :]:
        raise AuditCorrupted("segments out of order around the pruned range", where=str(meta_path))
    if keep and keep[0][0].first_index != size + 1:
        raise AuditCorrupted(
            f"events {size + 1}..{keep[0][0].first_index - 1} are missing after the pruned range",
            where=keep[0][1].name,
        )
    return size, keep


def encode_frame(
    typ: int, index: int, synced: int, time_ns: int, prev: bytes, payload: bytes, *, version: int = VERSION
) -> tuple[bytes, bytes, bytes]:
    """Build one frame; returns (frame bytes, leaf hash of the payload, chain hash)."""
    tail = _TAIL.pack(typ, version, 0, index, synced, time_ns, prev)
    crc = _crc(payload, _crc(tail))
    h = _LEAF.copy()
    h.update(payload)
    leaf = h.digest()
    chain = _sha256(_CHAIN_PREFIX.pack(typ, index, prev, leaf)).digest()
    pad = -(HEADER_SIZE + len(payload)) % 8
    return b"".join((struct.pack("<III", MAGIC, len(payload), crc), tail, payload, b"\0" * pad)), leaf, chain


_FIXED = struct.Struct("<III")
_PADS = [b"\0" * i for i in range(8)]


def encode_batch(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    *,
    state: ChainState,
    sign: Callable[[bytes], bytes],
) -> tuple[bytes, list[bytes], bytes]:
    """Build one signed batch: a commit frame announcing ``payloads``, then their event frames.

    The commit frame carries the number of events and an Ed25519 signature (``sign``) of
    ``commit_message``: the log's origin, the first index, the count, the chain hash the
    commit continues and the SHA-256 of the events' leaf hashes. Returns (all frames, the
    events' leaf hashes, last chain hash).
    """
    if _NATIVE is not None:
        frames, packed, chain = encode_batch_packed(
            first_index, synced, time_ns, prev, payloads, state=state, sign=sign
        )
        return frames, [packed[i : i + 32] for i in range(0, len(packed), 32)], chain
    return _encode_batch_py(first_index, synced, time_ns, prev, payloads, state=state, sign=sign)


def encode_batch_packed(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    *,
    state: ChainState,
    sign: Callable[[bytes], bytes],
) -> tuple[bytes, bytes, bytes]:
    """``encode_batch`` with the leaf hashes concatenated (32 bytes each), as the writer wants them.

    Compiled (``native.py``): the leaf hashes, then the event frames (CRC-32C, chain) are
    built in C for the whole batch with the GIL released; only the signature and the commit
    frame are made in Python, once per batch.
    """
    nat = _NATIVE
    if nat is None:
        frames, leaves, chain = _encode_batch_py(
            first_index, synced, time_ns, prev, payloads, state=state, sign=sign
        )
        return frames, b"".join(leaves), chain
    packed, digest = nat.leaf_hashes(payloads)
    n = len(payloads)
    signature = sign(commit_message(state, first_index, n, prev, digest))
    commit, _, chain = encode_frame(
        COMMIT, first_index - 1, synced, time_ns, prev, _COMMIT.pack(n, signature)
    )
    events, packed, chain = nat.encode_events(first_index, synced, time_ns, chain, payloads, packed)
    return commit + events, packed, chain


def _encode_batch_py(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    *,
    state: ChainState,
    sign: Callable[[bytes], bytes],
) -> tuple[bytes, list[bytes], bytes]:
    sha = _sha256
    leaves = [sha(b"\x00" + p).digest() for p in payloads]
    n = len(payloads)
    digest = sha(b"".join(leaves)).digest()
    signature = sign(commit_message(state, first_index, n, prev, digest))
    commit, _, chain = encode_frame(
        COMMIT, first_index - 1, synced, time_ns, prev, _COMMIT.pack(n, signature)
    )
    frames, _, chain = _encode_events_py(first_index, synced, time_ns, chain, payloads, leaves=leaves)
    return commit + frames, leaves, chain


def encode_events(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    *,
    leaves: list[bytes] | None = None,
    version: int = VERSION,
) -> tuple[bytes, list[bytes], bytes]:
    """Build the event frames of one batch (indexes from ``first_index``) in one pass.

    Same bytes as calling ``encode_frame(EVENT, ...)`` for each payload in turn, with
    fewer Python steps per record (``leaves``: their leaf hashes, if already computed).
    Returns (all frames, their leaf hashes, last chain hash). A log written now announces
    its events with a commit frame first: see ``encode_batch``.
    """
    if _NATIVE is not None:
        frames, packed, chain = _NATIVE.encode_events(
            first_index,
            synced,
            time_ns,
            prev,
            payloads,
            b"".join(leaves) if leaves is not None else None,
            version,
        )
        return frames, [packed[i : i + 32] for i in range(0, len(packed), 32)], chain
    return _encode_events_py(first_index, synced, time_ns, prev, payloads, leaves=leaves, version=version)


def _encode_events_py(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    *,
    leaves: list[bytes] | None = None,
    version: int = VERSION,
) -> tuple[bytes, list[bytes], bytes]:
    parts: list[bytes] = []
    given = leaves
    leaves = []
    add, add_leaf = parts.append, leaves.append
    tail_pack, fixed_pack, chain_pack = _TAIL.pack, _FIXED.pack, _CHAIN_PREFIX.pack
    crc_of, sha, pads = _crc, _sha256, _PADS
    index = first_index
    for k, payload in enumerate(payloads):
        tail = tail_pack(EVENT, version, 0, index, synced, time_ns, prev)
        n = len(payload)
        add(fixed_pack(MAGIC, n, crc_of(payload, crc_of(tail))))
        add(tail)
        add(payload)
        add(pads[-(HEADER_SIZE + n) % 8])
        leaf = given[k] if given is not None else sha(b"\x00" + payload).digest()
        add_leaf(leaf)
        prev = sha(chain_pack(EVENT, index, prev, leaf)).digest()
        index += 1
    return b"".join(parts), leaves, prev


@dataclass
class ChainState:
    """What a scan has established so far about one node's log.

    Attributes:
        tree: The Merkle tree over every event leaf (pruned ones included).
        chain: The chain hash of the last good frame.
        size: Events so far (== tree.size).
        checkpoints: Every checkpoint seen, verified against ``tree``.
        verifier: The key every checkpoint must be signed by (None: signatures not checked).
        origin: The checkpoint origin expected (None: taken from the first header).
        last_time_ns: Time of the last good frame.
        sealed: Whether the segment checked last ends with a seal frame.
        deferred_roots: If a list, checkpoints are not compared with ``tree`` (which then
            only collects leaf hashes) but appended here with where they are, for the
            caller to compare once it has the whole tree (see ``segment_pool``).
        check_records: Also check that each event's payload is an audit record
            (``record.record_problem``): a malformed one is named like any other bad frame.
    """

    tree: MerkleTree = field(default_factory=MerkleTree)
    chain: bytes = ZERO_HASH
    size: int = 0
    checkpoints: list[Checkpoint] = field(default_factory=list)
    verifier: Verifier | None = None
    origin: str | None = None
    last_time_ns: int = 0
    sealed: bool = False
    deferred_roots: list[tuple[Checkpoint, str]] | None = None
    check_records: bool = False
    commits: list[tuple[int, bytes, bytes, str]] = field(default_factory=list)
    legacy_last: int = 0
    pruned: int = 0
    v2: bool = False


@dataclass(slots=True)
class Frame:
    """One good frame, as yielded by ``scan``."""

    type: int
    index: int
    time_ns: int
    payload: memoryview
    offset: int


class TornFrame(AuditCorrupted):
    """A frame that cannot be read (framing or CRC): a torn write if at the tail of the last segment."""

    def __init__(self, message: str, *, where: str, offset: int) -> None:
        self.offset = offset
        super().__init__(message, where=where)


class Unsigned(AuditCorrupted):
    """Events no signature covers: forged, or cut off before they were acknowledged."""

    def __init__(self, message: str, *, where: str, offset: int) -> None:
        self.offset = offset
        super().__init__(message, where=where)


def scan(buf: bytes | memoryview, seg: SegmentName, where: str, state: ChainState) -> Iterator[Frame]:
    """Check and yield every good frame of one segment, updating ``state`` (see ``check``).

    The good frames before a bad one are yielded before the error is raised.
    """
    frames: list[tuple[int, int, int, int, int]] = []
    mv = memoryview(buf)
    try:
        check(mv, seg, where, state, frames)
    finally:
        pending = frames
    for typ, index, ts, off, end in pending:
        yield Frame(typ, index, ts, mv[off + HEADER_SIZE : end], off)


def check(
    buf: bytes | memoryview,
    seg: SegmentName,
    where: str,
    state: ChainState,
    frames: list[tuple[int, int, int, int, int]] | None = None,
    *,
    start: int = 0,
) -> int:
    """Check every frame of one segment, updating ``state``; returns the end of the last good frame.

    A batch (a commit frame and the events it announces) counts only whole: ``state`` and
    ``frames`` end after the last complete batch or other frame.

    Args:
        buf: The segment's bytes.
        seg: Its name (sequence number and first index, checked against its header).
        where: How to name the segment in errors.
        state: The log so far; grows by this segment's good frames (also when raising).
        frames: If given, receives ``(type, index, time_ns, offset, payload end)`` of each good frame.
        start: Where to begin: the end of what an earlier call checked (``state`` as it left it),
            to follow a segment that grows.

    Raises:
        TornFrame: a frame that cannot be read (bad magic, length past end of file, bad CRC,
            partial header), or a batch the segment ends before: ``offset`` says where the
            readable prefix ends.
        Unsigned: an event no commit frame announces (``offset``: where it is).
        AuditCorrupted: a readable frame that breaks the log (chain, index, type, checkpoint).
    """
    mv = memoryview(buf)
    size = len(mv)
    # payloads are sliced from the bytes themselves (one copy, no memoryview object per slice)
    raw = buf if isinstance(buf, bytes) else _whole_bytes(mv)
    off = start
    unpack = HEADER.unpack_from
    chain_pack = _CHAIN_PREFIX.pack
    crc_of = _crc
    sha = _sha256
    chain = state.chain
    count = state.size
    leaves = bytearray()  # the leaf hashes of this call's events, concatenated
    record = frames.append if frames is not None else None
    fast = _NATIVE.scan_events if _NATIVE is not None else None
    whole = _NATIVE.scan_batches if _NATIVE is not None else None
    sealed = state.sealed = False
    validate, problem = _record_checker() if state.check_records else (None, None)
    # the last point where the segment is whole: (offset, chain, count, leaves, time, frames)
    good: tuple[int, bytes, int, int, int | None, int] = (
        start,
        chain,
        count,
        0,
        None,
        len(frames) if frames is not None else 0,
    )
    v2 = state.v2
    last_ts: int | None = None
    batch_last = 0  # index of the last event the open batch announces (0: no batch open)
    batch: tuple[int, int, bytes, bytes, str, int] | None = None  # first, n, prev, sig, where, offset
    try:
        while off < size:
            if whole is not None and not batch_last and not sealed:
                # Compiled: whole batches (commit frame and events) that pass every check below,
                # in one call without the GIL; it stops at the start of anything else.
                done = whole(raw, off, chain, count, frames is not None, validate is not None)
                if done[6]:
                    off, chain, count, packed, last_ts, seen, batches = done
                    v2 = True
                    leaves += packed
                    if record is not None:
                        assert frames is not None and seen is not None
                        frames.extend(seen)
                    for last, first, n, before, digest, sig, at in batches:
                        message = commit_message(state, first, n, before, digest)
                        state.commits.append((last, message, sig, f"{where}@{at}"))
                    good = (
                        off,
                        chain,
                        count,
                        len(leaves) // 32,
                        last_ts,
                        len(frames) if frames is not None else 0,
                    )
                    continue
            if fast is not None and batch_last > count:
                # Compiled: every event frame of the open batch that passes every check below,
                # in one call without the GIL. It stops before anything else: the loop below
                # then reads that frame and says what is wrong with it.
                # With the record check, the records it cannot vouch for come back (``unsure``)
                # to be checked with pydantic, in order; the canonical ones are checked in C.
                got = fast(raw, off, chain, count, batch_last, frames is not None, validate is not None)
                if got[2] > count:
                    after, chain, count, packed, ts, seen, unsure = got
                    v2 = True
                    if unsure:
                        assert validate is not None and problem is not None
                        _validate_records(raw, unsure, validate, problem, where)
                    leaves += packed
                    last_ts = ts
                    if record is not None:
                        assert frames is not None and seen is not None
                        frames.extend(seen)
                    off = after
                    if count == batch_last:  # the batch is whole: its signature, later
                        assert batch is not None
                        first, n, before, sig, here, _ = batch
                        digest = sha(leaves[len(leaves) - 32 * n :]).digest()
                        state.commits.append(
                            (batch_last, commit_message(state, first, n, before, digest), sig, here)
                        )
                        batch_last, batch = 0, None
                        good = (
                            off,
                            chain,
                            count,
                            len(leaves) // 32,
                            last_ts,
                            len(frames) if frames is not None else 0,
                        )
                    continue
            if sealed:
                raise AuditCorrupted("data after the seal", where=f"{where}@{off}")
            if size - off < HEADER_SIZE:
                raise TornFrame("partial frame header", where=f"{where}@{off}", offset=off)
            magic, length, crc, typ, ver, _, index, _synced, ts, prev = unpack(mv, off)
            pay = off + HEADER_SIZE
            end = pay + length
            nxt = end + (-end % 8)
            # One combined test on the hot path; _torn names the first failing check, in order.
            if magic != MAGIC or length > MAX_PAYLOAD or nxt > size or crc_of(mv[off + 12 : end]) != crc:
                _torn(mv, off, magic, length, crc, end, where)
            if prev != chain:
                raise AuditCorrupted(
                    f"chain broken ({_TYPES.get(typ, typ)} frame, index {index})", where=f"{where}@{off}"
                )
            if ver != VERSION:
                if ver != LEGACY_VERSION or v2:
                    _bad_version(ver, f"{where}@{off}")
            else:
                v2 = True
            payload = raw[pay:end]
            leaf = sha(b"\x00" + payload).digest()
            if typ == EVENT:
                if index != count + 1:
                    raise AuditCorrupted(
                        f"index {index} where {count + 1} was expected", where=f"{where}@{off}"
                    )
                if ver == VERSION and index > batch_last:
                    raise Unsigned(
                        f"event {index} is not signed: no commit frame announces it",
                        where=f"{where}@{off}",
                        offset=off,
                    )
                if validate is not None:
                    try:
                        validate(payload)  # the fast path: a valid record, nothing else to say
                    except ValueError:  # pydantic's ValidationError: let record_problem say why
                        assert problem is not None
                        if (why := problem(payload)) is not None:
                            raise AuditCorrupted(f"record {index}: {why}", where=f"{where}@{off}") from None
                count = index
                leaves += leaf
                if ver != VERSION:
                    state.legacy_last = index
            else:
                if batch_last:
                    raise AuditCorrupted(
                        f"{_TYPES.get(typ, typ)} frame inside a batch of events", where=f"{where}@{off}"
                    )
                if typ == COMMIT:
                    batch = _open_batch(mv[pay:end], ver, index, count, prev, f"{where}@{off}", off)
                    batch_last = batch[0] + batch[1] - 1
                else:
                    _check_other(
                        mv[off + HEADER_SIZE : end], typ, ver, index, count, off, seg, state, leaves, where
                    )
                    sealed = state.sealed = typ == SEAL
            chain = sha(chain_pack(typ, index, prev, leaf)).digest()
            last_ts = ts
            if record is not None:
                record((typ, index, ts, off, end))
            off = nxt
            if batch_last and count == batch_last:  # the batch is whole: its signature, later
                assert batch is not None
                first, n, before, sig, here, _ = batch
                digest = sha(leaves[len(leaves) - 32 * n :]).digest()
                state.commits.append((batch_last, commit_message(state, first, n, before, digest), sig, here))
                batch_last, batch = 0, None
            if not batch_last:
                good = (
                    off,
                    chain,
                    count,
                    len(leaves) // 32,
                    last_ts,
                    len(frames) if frames is not None else 0,
                )
        if batch is not None:
            first, n, _, _, here, at = batch
            raise TornFrame(
                f"batch of {n} events from {first} incomplete ({count - first + 1} written)",
                where=here,
                offset=at,
            )
    except TornFrame as torn:
        if batch is None or torn.offset == good[0]:
            raise
        # the whole batch goes with its torn frame: it was acknowledged as one, after its fsync
        first, n = batch[0], batch[1]
        raise TornFrame(
            f"{torn.message} (a batch of {n} events from {first} left incomplete)",
            where=torn.where,
            offset=good[0],
        ) from None
    finally:  # the state always ends exactly after the last good frame (and whole batch)
        end_off, chain, count, keep, good_ts, kept = good
        if keep:
            state.tree.extend_packed(bytes(leaves[: 32 * keep]))
        state.chain, state.size = chain, count
        if good_ts is not None:
            state.last_time_ns = good_ts
        if frames is not None:
            del frames[kept:]
        state.v2 = v2
    return end_off


_COMMIT = struct.Struct("<I64s")
MAX_BATCH = 1 << 24


def commit_message(state: ChainState, first: int, count: int, prev: bytes, digest: bytes) -> bytes:
    """What a commit frame signs: the log, where the batch starts and what it holds.

    ``prev`` is the chain hash the commit frame continues (its place in the log) and
    ``digest`` the SHA-256 of the batch's leaf hashes, concatenated.
    """
    origin = (state.origin or "").encode()
    return _COMMIT_DOMAIN + origin + b"\n" + struct.pack("<QI", first, count) + prev + digest


_COMMIT_DOMAIN = b"agency-audit-commit/v1\n"


def _bad_version(ver: int, here: str) -> None:
    if ver == LEGACY_VERSION:
        raise AuditCorrupted("a frame of the old format (version 1) after commit-signed frames", where=here)
    raise AuditCorrupted(f"unknown frame version {ver}", where=here)


def _open_batch(
    payload: memoryview, ver: int, index: int, count: int, prev: bytes, here: str, off: int
) -> tuple[int, int, bytes, bytes, str, int]:
    if ver != VERSION or len(payload) != _COMMIT.size:
        raise AuditCorrupted("malformed commit frame", where=here)
    if index != count:
        raise AuditCorrupted(f"commit frame claims {index} events, {count} seen", where=here)
    n, sig = _COMMIT.unpack(payload)
    if not 0 < n <= MAX_BATCH:
        raise AuditCorrupted(f"commit frame announces {n} events", where=here)
    return count + 1, n, prev, sig, here, off


def settle_signatures(state: ChainState) -> int | None:
    """Check the commit signatures no checkpoint vouched for; say where unsigned events begin.

    Called once the whole log is scanned. Events covered by a checkpoint (its root matched)
    need no commit signature; the batches after the last checkpoint are checked here.

    Returns:
        The index of the first event that no signature covers (old-format events after the
        last checkpoint), or None when every event is signed.

    Raises:
        AuditCorrupted: a commit signature does not verify, or old-format unsigned events
            are followed by signed ones.
    """
    signed = state.checkpoints[-1].size if state.checkpoints else state.pruned
    if state.verifier is not None:
        for last, message, sig, where in state.commits:
            if last > signed and not state.verifier.verify_signature(message, sig):
                first = struct.unpack_from("<Q", message, len(message) - 76)[0]
                raise AuditCorrupted(
                    f"the commit signature of events {first}..{last} is not by the log's key", where=where
                )
    state.commits.clear()
    if state.legacy_last > signed:
        if state.size > state.legacy_last:
            raise AuditCorrupted(
                f"events {signed + 1}..{state.legacy_last} (old format) were never signed, "
                "yet later events follow them"
            )
        return signed + 1
    return None


def event_offset(buf: bytes | memoryview, index: int) -> int | None:
    """Offset of the frame of event ``index`` in a segment's bytes (headers only; None: not there)."""
    mv = memoryview(buf)
    off = 0
    while off + HEADER_SIZE <= len(mv):
        _, length, _, typ, _, _, at, _, _, _ = HEADER.unpack_from(mv, off)
        if typ == EVENT and at == index:
            return off
        end = off + HEADER_SIZE + length
        off = end + (-end % 8)
    return None


def _record_checker() -> tuple[Callable[[bytes], object], Callable[[bytes], str | None]]:
    """``AuditRecord``'s JSON validator (raises ``ValueError`` on a record that does not
    validate) and ``record.record_problem`` (which says why, or that a record of a newer schema
    is fine), imported when first needed (they bring pydantic into a worker)."""
    from .record import AuditRecord, record_problem

    return AuditRecord.__pydantic_validator__.validate_json, record_problem


def _validate_records(
    raw: bytes,
    seen: list[tuple[int, int, int, int, int]],
    validate: Callable[[bytes], object],
    problem: Callable[[bytes], str | None],
    where: str,
) -> None:
    """The record check of ``check`` for event frames the compiled scan took, in order."""
    for _, index, _, off, end in seen:
        payload = raw[off + HEADER_SIZE : end]
        try:
            validate(payload)
        except ValueError:
            if (why := problem(payload)) is not None:
                raise AuditCorrupted(f"record {index}: {why}", where=f"{where}@{off}") from None


def _whole_bytes(mv: memoryview) -> bytes:
    """The bytes behind ``mv``: its object itself when it is a whole ``bytes``, else a copy."""
    obj = mv.obj
    return obj if isinstance(obj, bytes) and len(obj) == mv.nbytes else mv.tobytes()


def _torn(mv: memoryview, off: int, magic: int, length: int, crc: int, end: int, where: str) -> None:
    """Raise the ``TornFrame`` for the first framing check the frame at ``off`` fails."""
    here = f"{where}@{off}"
    if magic != MAGIC:
        raise TornFrame("no frame here (bad magic)", where=here, offset=off)
    if length > MAX_PAYLOAD or end > len(mv):
        raise TornFrame("frame length runs past the end of the file", where=here, offset=off)
    if _crc(mv[off + 12 : end]) != crc:
        raise TornFrame("CRC-32C mismatch", where=here, offset=off)
    # complete frame but its padding is cut: it was never acknowledged
    raise TornFrame("frame padding cut off", where=here, offset=off)


def _check_other(
    payload: memoryview,
    typ: int,
    ver: int,
    index: int,
    count: int,
    off: int,
    seg: SegmentName,
    state: ChainState,
    leaves: bytearray,
    where: str,
) -> None:
    here = f"{where}@{off}"
    if index != count:
        raise AuditCorrupted(f"{_TYPES.get(typ, typ)} frame claims {index} events, {count} seen", where=here)
    if (off == 0) != (typ == SEGMENT):
        raise AuditCorrupted("segment header misplaced", where=here)
    if typ == SEGMENT:
        _check_header(payload, seg, state, here, count)
    elif typ == CHECKPOINT:
        if leaves:
            state.tree.extend_packed(bytes(leaves))
            leaves.clear()
        state.size = count
        _check_checkpoint(payload, state, here)
    elif typ != SEAL:
        raise AuditCorrupted(f"unknown frame type {typ} (version {ver})", where=here)


def _check_header(payload: memoryview, seg: SegmentName, state: ChainState, here: str, count: int) -> None:
    try:
        header = json.loads(bytes(payload))
        seq, first, origin = header["seq"], header["first_index"], header["origin"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AuditCorrupted(f"unreadable segment header ({exc})", where=here) from exc
    if (seq, first) != (seg.seq, seg.first_index) or first != count + 1:
        raise AuditCorrupted(
            f"segment header says seq {seq} first index {first}; file name and log say "
            f"seq {seg.seq} first index {count + 1}",
            where=here,
        )
    if state.origin is None:
        state.origin = origin
    elif origin != state.origin:
        raise AuditCorrupted(f"segment belongs to log {origin!r}, not {state.origin!r}", where=here)


def _check_checkpoint(payload: memoryview, state: ChainState, here: str) -> None:
    try:
        note = bytes(payload).decode()
    except UnicodeDecodeError as exc:
        raise AuditCorrupted("checkpoint is not UTF-8", where=here) from exc
    try:
        cp = state.verifier.verify(note) if state.verifier else Checkpoint.parse(note)
    except AuditCorrupted as exc:
        raise AuditCorrupted(exc.message, where=here) from None
    if state.origin is not None and cp.origin != state.origin:
        raise AuditCorrupted(f"checkpoint for log {cp.origin!r}, not {state.origin!r}", where=here)
    if cp.size != state.size:
        raise AuditCorrupted(f"checkpoint for size {cp.size} written at size {state.size}", where=here)
    if state.deferred_roots is not None:
        state.deferred_roots.append((cp, here))
        return
    if cp.root != state.tree.root(cp.size):
        raise AuditCorrupted(f"checkpoint root for size {cp.size} does not match the records", where=here)
    state.checkpoints.append(cp)
    if state.commits:  # the checkpoint vouches for every batch it covers
        state.commits = [c for c in state.commits if c[0] > cp.size]


def find_promised_frame(buf: bytes | memoryview, after: int) -> int | None:
    """Offset of a readable frame past ``after`` whose writer had already synced past ``after``.

    Such a frame proves the bytes at ``after`` were once durable: the damage there is
    corruption, not a torn write (the Pebble rule).
    """
    data = bytes(buf)
    magic = struct.pack("<I", MAGIC)
    pos = data.find(magic, after + 1)
    while pos >= 0 and pos + HEADER_SIZE <= len(data):
        if pos % 8 == 0:
            fields = HEADER.unpack_from(data, pos)
            length, crc, synced = fields[1], fields[2], fields[7]
            end = pos + HEADER_SIZE + length
            if end <= len(data) and _crc(data[pos + 12 : end]) == crc and synced > after:
                return pos
        pos = data.find(magic, pos + 1)
    return None
