"""Check a node's segments on every core: recovery and ``verify`` of large logs.

A segment can be checked on its own: its header frame carries the chain hash it continues
(``prev``) and its file name the index of its first event. A worker process checks every
frame of a segment from there — framing, CRC-32C, chain, index contiguity, checkpoint
signatures — and returns its leaf hashes, its checkpoints and the state it ends in. The
parent links the results in log order: each segment must start exactly where the previous
one ended (chain hash and index), the Merkle tree grows by the leaf hashes, and each
checkpoint's signed root is compared with the tree at its size. The outcome — state,
errors and where they are reported — is that of ``segment.check`` run on each segment in
turn: a segment that does not link up is simply checked again in the parent, so the
error about it is the sequential one.

Workers are plain ``python -m middleware.audit.segment_pool`` processes fed over pipes
(not ``multiprocessing``, which would re-import the caller's ``__main__``). Small logs, one
CPU, or a worker that cannot start fall back to checking in the parent.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import AuditCorrupted
from .checkpoint import Checkpoint, Verifier
from .compression import read_segment
from .merkle import MerkleTree
from .segment import HEADER, HEADER_SIZE, ZERO_HASH, ChainState, SegmentName, TornFrame, Unsigned, check

__all__ = ["PARALLEL_MIN_BYTES", "Checked", "check_segments", "default_workers"]

PARALLEL_MIN_BYTES = 48 << 20
"""Below this many bytes of segments, starting workers costs more than it saves."""


def default_workers() -> int:
    """One worker per CPU this process may run on (at most 8)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


@dataclass
class Checked:
    """One segment, checked: the state now ends after its last good frame.

    Attributes:
        name: The segment.
        path: Its file.
        end: Offset just past its last good frame.
        torn: The unreadable frame that ended the check early (None: read to the end).
        unsigned: The first event no signature covers, which ended the check early.
    """

    name: SegmentName
    path: Path
    end: int
    torn: TornFrame | None = None
    unsigned: Unsigned | None = None


def check_segments(
    segments: list[tuple[SegmentName, Path]],
    state: ChainState,
    *,
    workers: int | None = None,
    min_bytes: int | None = None,
) -> Iterator[Checked]:
    """Check ``segments`` in order, growing ``state``; one ``Checked`` per segment.

    Same results as ``check`` on each segment in turn. A ``TornFrame`` is yielded (in
    ``Checked.torn``) rather than raised, with ``state`` ending before it, so the caller
    decides what a torn frame means where it is (an ``Unsigned`` event likewise, in
    ``Checked.unsigned``); any other ``AuditCorrupted`` is raised,
    with the same message and place. After a signed root that does not match, the state's
    size, tree and checkpoints are those of a sequential check, its chain hash and time
    are those of the segment before.

    Args:
        segments: The node's segments in order (see ``list_segments``/``load_pruned``).
        state: The log so far; ``state.verifier`` signs off every checkpoint.
        workers: Worker processes (default ``default_workers()``; 1: check in this process).
        min_bytes: Check in this process when the segments are smaller than this in all
            (default ``PARALLEL_MIN_BYTES``).
    """
    n = workers if workers is not None else default_workers()
    rest = list(segments)
    if state.origin is None and rest:  # learn the origin from the first header, here
        yield _check_here(*rest.pop(0), state)
    total = sum(_size(p) for _, p in rest)
    if n <= 1 or len(rest) < 2 or total < (PARALLEL_MIN_BYTES if min_bytes is None else min_bytes):
        for name, path in rest:
            yield _check_here(name, path, state)
        return
    pool = _Pool(min(n, len(rest)), rest, state)
    try:
        for i, (name, path) in enumerate(rest):
            result = pool.result(i)
            yield _link(result, name, path, state) if result is not None else _check_here(name, path, state)
    finally:
        pool.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _check_here(name: SegmentName, path: Path, state: ChainState) -> Checked:
    data = read_segment(path)
    try:
        return Checked(name, path, check(data, name, path.name, state))
    except TornFrame as torn:
        return Checked(name, path, torn.offset, torn)
    except Unsigned as unsigned:
        return Checked(name, path, unsigned.offset, unsigned=unsigned)


# ---------------------------------------------------------------------- the parent's side


@dataclass
class _Result:
    """What a worker established about one segment, checked on its own."""

    prev: bytes  # the chain hash the header frame continues
    first_size: int  # events before the segment, as its file name says
    leaves: bytes  # leaf hashes of its good events, concatenated
    checkpoints: list[tuple[Checkpoint, str]]  # signature checked; root still to check
    chain: bytes
    size: int
    last_time_ns: int | None
    sealed: bool
    origin: str | None
    end: int
    error: tuple[str, str, str, int] | None  # (kind, message without "at", where, offset)
    commits: list[tuple[int, bytes, bytes, str]]  # signatures not checked yet (see settle_signatures)
    v2: bool
    legacy_last: int


def _link(r: _Result, name: SegmentName, path: Path, state: ChainState) -> Checked:
    linked = r.prev == state.chain and r.first_size == state.size and r.origin == state.origin
    if state.v2 and r.legacy_last:
        linked = False  # old-format frames after new ones: the sequential check names them
    if not linked or (r.error is not None and r.error[0] not in ("torn", "unsigned")):
        # It does not start where the log ends, or it is corrupt: checked again here, the
        # sequential check names the problem and leaves the state exactly as it does.
        return _check_here(name, path, state)
    tree = state.tree
    done = 0
    state.commits.extend(r.commits)
    for cp, where in r.checkpoints:
        upto = cp.size - r.first_size
        tree.extend_packed(r.leaves[32 * done : 32 * upto])
        done = upto
        state.size = cp.size
        if cp.root != tree.root(cp.size):
            state.sealed = False  # (the chain and time stay those of the previous segment)
            raise AuditCorrupted(
                f"checkpoint root for size {cp.size} does not match the records", where=where
            )
        state.checkpoints.append(cp)
        state.commits = [c for c in state.commits if c[0] > cp.size]
    tree.extend_packed(r.leaves[32 * done :])
    state.chain, state.size, state.sealed = r.chain, r.size, r.sealed
    state.v2 = state.v2 or r.v2
    state.legacy_last = max(state.legacy_last, r.legacy_last)
    if r.last_time_ns is not None:
        state.last_time_ns = r.last_time_ns
    if r.error is None:
        return Checked(name, path, r.end)
    kind, message, where, offset = r.error
    if kind == "unsigned":
        return Checked(name, path, offset, unsigned=Unsigned(message, where=where, offset=offset))
    return Checked(name, path, offset, TornFrame(message, where=where, offset=offset))


class _Pool:
    """Worker processes, each given every ``len(procs)``-th segment; results read in log order."""

    def __init__(self, count: int, segments: list[tuple[SegmentName, Path]], state: ChainState) -> None:
        vkey = state.verifier.vkey if state.verifier is not None else None
        jobs: list[list[tuple[str, int, int, str, str | None, str | None, bool]]] = [[] for _ in range(count)]
        for i, (name, path) in enumerate(segments):
            jobs[i % count].append(
                (str(path), name.seq, name.first_index, path.name, state.origin, vkey, state.check_records)
            )
        self._procs: list[subprocess.Popen[bytes]] = []
        self._broken = False
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH", "")]))
        for job in jobs:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "middleware.audit.segment_pool"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                )
            except OSError:
                self._broken = True  # no process to spare: the parent checks everything
                break
            self._procs.append(proc)
            assert proc.stdin is not None
            try:
                with proc.stdin:
                    pickle.dump(job, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            except OSError:  # it exited already
                self._broken = True
                break

    def result(self, i: int) -> _Result | None:
        """The ``i``-th segment's result, or None if it must be checked in the parent."""
        if self._broken:
            return None
        proc = self._procs[i % len(self._procs)]
        assert proc.stdout is not None
        try:
            result = pickle.load(proc.stdout)
        except (EOFError, pickle.UnpicklingError, OSError):
            self._broken = True  # a worker died: carry on without workers
            return None
        if isinstance(result, BaseException):
            raise result  # e.g. the file could not be read: what the parent would have hit too
        assert isinstance(result, _Result)
        return result

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            assert proc.stdout is not None
            proc.stdout.close()
            proc.wait()


# ---------------------------------------------------------------------- the worker's side


class _LeafList(MerkleTree):
    """Collects leaf hashes without building the tree (the parent builds it)."""

    def extend_packed(self, hashes: bytes) -> None:
        self._store.append(hashes)
        self._size += len(hashes) // 32


def check_alone(
    path: str,
    seq: int,
    first_index: int,
    where: str,
    origin: str | None,
    vkey: str | None,
    check_records: bool = False,
) -> _Result:
    """Check one segment as if the log ended exactly where its header says it continues."""
    data = read_segment(Path(path))
    prev = HEADER.unpack_from(data, 0)[-1] if len(data) >= HEADER_SIZE else ZERO_HASH
    deferred: list[tuple[Checkpoint, str]] = []
    leaves = _LeafList()
    state = ChainState(
        tree=leaves,
        chain=prev,
        size=first_index - 1,
        verifier=Verifier(vkey) if vkey else None,
        origin=origin,
        deferred_roots=deferred,
        check_records=check_records,
    )
    error = None
    try:
        end = check(data, SegmentName(seq, first_index), where, state)
    except TornFrame as torn:
        end = torn.offset
        error = ("torn", _bare(torn), torn.where, torn.offset)
    except Unsigned as unsigned:
        end = unsigned.offset
        error = ("unsigned", _bare(unsigned), unsigned.where, unsigned.offset)
    except AuditCorrupted as exc:
        end = -1
        error = ("corrupted", _bare(exc), exc.where, -1)
    return _Result(
        prev=prev,
        first_size=first_index - 1,
        leaves=leaves.leaf_hashes(leaves.size),
        checkpoints=deferred,
        chain=state.chain,
        size=state.size,
        last_time_ns=state.last_time_ns or None,
        sealed=state.sealed,
        origin=state.origin,
        end=end,
        error=error,
        commits=state.commits,
        v2=state.v2,
        legacy_last=state.legacy_last,
    )


def _bare(exc: AuditCorrupted) -> str:
    suffix = f" at {exc.where}"
    msg = exc.message
    return msg[: -len(suffix)] if exc.where and msg.endswith(suffix) else msg


def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    jobs: list[Any] = pickle.load(stdin)
    for job in jobs:
        result: object
        try:
            result = check_alone(*job)
        except Exception as exc:  # sent back and raised in the parent
            result = exc
        pickle.dump(result, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


def _main() -> None:
    with contextlib.suppress(BrokenPipeError):  # the parent stopped reading (it found an error)
        _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    # Run as the module's real name so results unpickle as middleware.audit.segment_pool._Result.
    from middleware.audit import segment_pool

    segment_pool._main()
