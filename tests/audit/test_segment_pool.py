"""Checking segments in worker processes gives exactly what checking them one by one gives."""

from __future__ import annotations

import base64
import random
import struct
import sys
from pathlib import Path

import pytest

from middleware.audit import segment_pool
from middleware.audit.checkpoint import Checkpoint
from middleware.audit.segment import CHECKPOINT, HEADER, HEADER_SIZE, ChainState, crc32c, list_segments
from middleware.audit.segment_pool import check_segments
from middleware.audit.verify import verify_path
from middleware.audit.wal import origin_for
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, append_batch, open_log, segments


async def _closed_log(root: Path, n: int = 120) -> Path:
    log = open_log(root, segment_bytes=4096, checkpoint_every=7)
    for start in range(0, n, 6):
        await append_batch(log, start, 6)
    await log.close()
    return root / "n1"


def _outcome(node: Path, workers: int) -> tuple[object, ...]:
    """Everything a caller can see of a check: per-segment results, the error, the final state."""
    state = ChainState(verifier=SIGNER.verifier(), origin=origin_for("n1"))
    seen: list[tuple[str, int, str | None, int | None]] = []
    error = None
    try:
        for c in check_segments(list_segments(node), state, workers=workers, min_bytes=0):
            torn = (c.torn.message, c.torn.offset) if c.torn else (None, None)
            seen.append((c.path.name, c.end, *torn))
    except AuditCorrupted as exc:
        error = exc.message
    cps = [cp.note for cp in state.checkpoints]
    root = state.tree.root() if state.size else b""
    if error is not None:  # after an error only size, tree and checkpoints are promised
        return seen, error, state.size, root, cps
    return seen, error, state.size, root, cps, state.chain, state.sealed, state.last_time_ns


def _frames(data: bytes) -> list[tuple[int, int, int]]:
    out, off = [], 0
    while off + HEADER_SIZE <= len(data):
        _, length, _, typ, *_ = HEADER.unpack_from(data, off)
        end = off + HEADER_SIZE + length
        out.append((off, end, typ))
        off = end + (-end % 8)
    return out


def _recrc(data: bytearray, off: int) -> None:
    length = struct.unpack_from("<I", data, off + 4)[0]
    struct.pack_into("<I", data, off + 8, crc32c(bytes(data[off + 12 : off + HEADER_SIZE + length])))


async def test_an_intact_log_gives_the_same_state_in_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await _closed_log(tmp_path)
    assert len(segments(node)) >= 6
    sequential = _outcome(node, workers=1)
    assert sequential[1] is None and sequential[2] == 120
    checked_here: list[str] = []
    real = segment_pool._check_here

    def spy(name: object, path: Path, state: ChainState) -> segment_pool.Checked:
        checked_here.append(path.name)
        return real(name, path, state)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_pool, "_check_here", spy)
    assert _outcome(node, workers=2) == sequential
    assert _outcome(node, workers=3) == sequential
    assert checked_here == [], "every segment was checked by a worker"


@pytest.mark.parametrize("seed", range(12))
async def test_random_damage_is_reported_the_same_way(tmp_path: Path, seed: int) -> None:
    """Flipped bytes, with and without a recomputed CRC: same error, same place, same state."""
    node = await _closed_log(tmp_path)
    rng = random.Random(seed)
    seg = rng.choice(segments(node))
    data = bytearray(seg.read_bytes())
    off, end, _ = rng.choice(_frames(bytes(data)))
    data[rng.randrange(off + 12, end)] ^= 1 << rng.randrange(8)
    if seed % 2:  # a tamperer who fixes the CRC: the chain, index or signature checks catch it
        _recrc(data, off)
    seg.write_bytes(bytes(data))
    sequential = _outcome(node, workers=1)
    assert sequential[1] is not None or any(s[2] for s in sequential[0]), "the damage was noticed"
    assert _outcome(node, workers=2) == sequential


async def test_segments_that_do_not_link_up_are_reported_as_sequentially(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path)
    segs = segments(node)
    a, b = segs[2], segs[3]
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_bytes)  # contents swapped: each is intact on its own
    b.write_bytes(a_bytes)
    sequential = _outcome(node, workers=1)
    assert sequential[1] is not None and a.name in sequential[1]
    assert _outcome(node, workers=2) == sequential


async def test_a_signed_root_that_does_not_match_is_caught_after_the_worker(tmp_path: Path) -> None:
    """A well-signed checkpoint over the wrong root (only the key holder could make one)."""
    node = await _closed_log(tmp_path)
    seg = segments(node)[2]
    data = bytearray(seg.read_bytes())
    off, end, _ = next(f for f in _frames(bytes(data)) if f[2] == CHECKPOINT)
    cp = Checkpoint.parse(bytes(data[off + HEADER_SIZE : end]).decode())
    forged = SIGNER.sign(cp.origin, cp.size, bytes(32)).note.encode()
    assert len(forged) == end - off - HEADER_SIZE
    data[off + HEADER_SIZE : end] = forged
    _recrc(data, off)
    seg.write_bytes(bytes(data))
    sequential = _outcome(node, workers=1)
    assert f"checkpoint root for size {cp.size} does not match" in str(sequential[1])
    assert _outcome(node, workers=2) == sequential
    assert base64.b64encode(bytes(32)).decode() in forged.decode()


async def test_a_torn_tail_is_yielded_with_the_state_before_it(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path)
    last = segments(node)[-1]
    last.write_bytes(last.read_bytes()[:-5])
    sequential = _outcome(node, workers=1)
    assert sequential[1] is None and sequential[0][-1][2] is not None
    assert _outcome(node, workers=2) == sequential


async def test_workers_that_cannot_run_fall_back_to_checking_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await _closed_log(tmp_path)
    sequential = _outcome(node, workers=1)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # each worker exits at once
    assert _outcome(node, workers=2) == sequential
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))  # cannot start
    assert _outcome(node, workers=2) == sequential


async def test_recovery_and_verify_use_workers_on_large_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _closed_log(tmp_path)
    monkeypatch.setattr(segment_pool, "PARALLEL_MIN_BYTES", 0)
    started: list[int] = []
    real_pool = segment_pool._Pool

    def counting_pool(count: int, *args: object) -> object:
        started.append(count)
        return real_pool(count, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_pool, "_Pool", counting_pool)
    log = open_log(tmp_path, recovery_workers=2)
    assert log.size == 120 and log.recovery.events == 120
    await append_batch(log, 120, 3)
    await log.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok
    assert started and started[0] == 2, "recovery started two workers"


async def test_a_corrupt_sealed_segment_still_refuses_to_open_with_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await _closed_log(tmp_path)
    monkeypatch.setattr(segment_pool, "PARALLEL_MIN_BYTES", 0)
    seg = segments(node)[1]
    data = bytearray(seg.read_bytes())
    off, _, _ = _frames(bytes(data))[2]
    data[off + HEADER_SIZE + 3] ^= 0x40
    seg.write_bytes(bytes(data))
    with pytest.raises(AuditCorrupted, match=rf"CRC-32C mismatch .*{seg.name}@{off} in a sealed segment"):
        open_log(tmp_path, recovery_workers=2)
