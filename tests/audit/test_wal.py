"""WalAuditLog: durability, group commit, rotation, sealing and the crash tests of the reference."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import threading
from pathlib import Path

import pytest

from middleware.audit import AuditLog
from middleware.audit.checkpoint import Signer
from middleware.audit.merkle import verify_inclusion
from middleware.audit.segment import HEADER_SIZE, crc32c
from middleware.audit.verify import verify_path
from middleware.audit.wal import FsyncPolicy, WalAuditLog, WalOptions
from middleware.errors import AuditCorrupted, AuditError, InvalidInput

from .helpers import SIGNER, append_batch, crash_image, open_log, record, segments


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_wal_audit_log_conforms_to_the_protocol(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    try:
        assert isinstance(log, AuditLog)
    finally:
        asyncio.run(log.close())


async def test_append_returns_contiguous_indexes_and_records_read_back(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4096, checkpoint_every=7)
    assert await log.append(record(1)) == 1
    for start in range(2, 42, 5):
        assert await append_batch(log, start, 5) == list(range(start, start + 5))
    got = list(log.records())
    assert [i for i, _ in got] == list(range(1, 42))
    assert [r.detail["i"] for _, r in got] == list(range(1, 42))
    await log.close()
    assert len(segments(tmp_path / "n1")) > 3  # rotated by size
    reopened = open_log(tmp_path)
    assert reopened.size == 41 and reopened.recovery.clean
    assert await reopened.append(record(42)) == 42
    await reopened.close()
    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    assert verdict.ok, verdict.nodes
    assert verdict.nodes[0].events == 42


async def test_concurrent_appends_are_group_committed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    syncs = 0
    real = log._sync

    def counting_sync() -> None:
        nonlocal syncs
        syncs += 1
        real()

    log._sync = counting_sync  # type: ignore[method-assign]
    indexes = await append_batch(log, 0, 64)
    assert sorted(indexes) == list(range(1, 65))
    assert syncs == 1, "64 concurrent appends must share one fdatasync"
    await log.close()


async def test_checkpoints_are_signed_every_n_and_on_close_and_prove_inclusion(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_every=10)
    for start in range(0, 25, 5):
        await append_batch(log, start, 5)
    sizes = [cp.size for cp in log.checkpoints()]
    assert sizes == [10, 20]
    await log.close()
    log = open_log(tmp_path)
    assert [cp.size for cp in log.checkpoints()] == [10, 20, 25]
    cp = log.latest_checkpoint()
    assert cp is not None
    SIGNER.verifier().verify(cp.note)
    tree = log.tree
    for i in range(25):
        verify_inclusion(tree.leaf(i), i, 25, tree.inclusion_proof(i, 25), cp.root)
    await log.close()


async def test_closed_log_refuses_appends_and_another_process_cannot_open_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(AuditError, match="in use"):
        open_log(tmp_path)
    await log.close()
    with pytest.raises(AuditError, match="closed"):
        await log.append(record(1))


def test_bad_options_and_node_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="segment_bytes"):
        WalOptions(segment_bytes=10)
    with pytest.raises(InvalidInput, match="recovery_workers"):
        WalOptions(recovery_workers=0)
    with pytest.raises(InvalidInput, match="node"):
        WalAuditLog(tmp_path, "../evil", signer=SIGNER)


async def test_opening_with_another_key_is_refused(tmp_path: Path) -> None:
    await open_log(tmp_path).close()
    with pytest.raises(AuditError, match="key"):
        WalAuditLog(tmp_path, "n1", signer=Signer("other"))


# ---------------------------------------------------------------- crash tests


async def _crashed_log(
    tmp_path: Path, batches: int = 4, per_batch: int = 8, **opts: object
) -> tuple[Path, Path]:
    """A log with ``batches`` synced batches, copied as a crash would leave it.

    No timed checkpoint unless asked: the tests cut the tail at byte offsets and count the
    records left, and on a slow machine a checkpoint signed on time would be the last frame.
    """
    opts.setdefault("checkpoint_interval", None)
    live = tmp_path / "live"
    log = open_log(live, **opts)
    for b in range(batches):
        await append_batch(log, b * per_batch, per_batch)
    image = crash_image(live / "n1", tmp_path / "crash")
    await log.close()
    return image.parent, image


async def test_torn_tail_is_cut_kept_aside_and_appends_continue(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path)
    seg = segments(node)[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-5])
    log = open_log(root)
    # only the torn last batch is lost: it was acknowledged as a whole, after its fsync
    assert log.size == 24
    rep = log.recovery
    assert rep.torn_bytes > 0 and not rep.clean
    assert "batch of 8 events from 25" in rep.torn_reason
    assert (node / rep.broken_file).read_bytes() == data[len(data) - 5 - rep.torn_bytes : -5]
    assert await log.append(record(99)) == 25
    await log.close()
    assert verify_path(root, key=SIGNER.vkey).ok


async def test_truncate_then_zero_extend_keeps_records_before_the_tear(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path)
    seg = segments(node)[-1]
    data = seg.read_bytes()
    cut = len(data) - 200
    seg.write_bytes(data[:cut] + b"\0" * 4096)
    log = open_log(root)
    kept = [i for i, _ in log.records()]
    assert kept == list(range(1, len(kept) + 1)) and len(kept) in (16, 24)  # whole batches
    await log.close()
    assert verify_path(root, key=SIGNER.vkey).ok


async def test_zeroed_sector_in_last_segment_keeps_only_what_precedes_it(tmp_path: Path) -> None:
    # damage in the last batch: nothing after it had been promised durable
    root, node = await _crashed_log(tmp_path, batches=5, per_batch=8)
    seg = segments(node)[-1]
    data = bytearray(seg.read_bytes())
    data[len(data) - 1500 : len(data) - 1500 + 512] = b"\0" * 512
    seg.write_bytes(bytes(data))
    log = open_log(root)
    assert log.size == 32
    assert all(r.detail["i"] == i - 1 for i, r in log.records())
    await log.close()


async def test_zeroed_sector_before_later_synced_batches_is_corruption(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path, batches=6, per_batch=8)
    seg = segments(node)[-1]
    data = bytearray(seg.read_bytes())
    data[1024 : 1024 + 512] = b"\0" * 512
    seg.write_bytes(bytes(data))
    with pytest.raises(AuditCorrupted, match="had been synced") as err:
        open_log(root)
    assert seg.name in str(err.value)
    assert not verify_path(root, key=SIGNER.vkey).ok


async def test_zeroed_record_in_a_sealed_segment_refuses_to_open(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path, batches=6, per_batch=8, segment_bytes=4096)
    first = segments(node)[0]
    assert len(segments(node)) > 1
    data = bytearray(first.read_bytes())
    data[512:1024] = b"\0" * 512
    first.write_bytes(bytes(data))
    with pytest.raises(AuditCorrupted, match="sealed segment") as err:
        open_log(root)
    assert first.name in err.value.where


async def test_length_past_end_of_file_is_a_torn_tail(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path, batches=2)
    seg = segments(node)[-1]
    data = seg.read_bytes()
    # append a frame header that promises more payload than the file holds
    fake = bytearray(data[:HEADER_SIZE])
    fake[4:8] = (10_000).to_bytes(4, "little")
    seg.write_bytes(data + bytes(fake) + b"x" * 100)
    log = open_log(root)
    assert log.size == 16 and "past the end" in log.recovery.torn_reason
    await log.close()


async def test_random_garbage_tails_are_cut_where_they_start(tmp_path: Path) -> None:
    _root, node = await _crashed_log(tmp_path, batches=6, per_batch=5)
    pristine = segments(node)[-1].read_bytes()
    rng = random.Random(1234)
    for round_ in range(40):
        offset = rng.randrange(HEADER_SIZE, len(pristine))
        case = tmp_path / f"round{round_}"
        shutil.copytree(node, case / "n1")
        seg = segments(case / "n1")[-1]
        seg.write_bytes(pristine[:offset] + rng.randbytes(rng.randrange(1, 3000)))
        log = open_log(case)
        got = [r.detail["i"] for _, r in log.records()]
        assert got == list(range(len(got))), "a prefix of the records, in order"
        assert log.recovery.torn_bytes > 0
        # every batch that ended before the garbage started survives
        assert log.size >= _complete_events(pristine[:offset])
        await log.close()
        shutil.rmtree(case)


def _complete_events(prefix: bytes) -> int:
    """Events of the batches whose frames lie entirely inside ``prefix`` (the pristine bytes
    before the damage): a batch counts whole or not at all."""
    off, n, in_batch = 0, 0, 0
    while off + HEADER_SIZE <= len(prefix):
        length = int.from_bytes(prefix[off + 4 : off + 8], "little")
        end = off + HEADER_SIZE + length
        end += -end % 8
        if end > len(prefix):
            break
        if prefix[off + 12] == 5:  # a commit frame: its batch's event count first
            in_batch = int.from_bytes(prefix[off + HEADER_SIZE : off + HEADER_SIZE + 4], "little")
            seen = 0
        elif prefix[off + 12] == 2:
            seen += 1
            if seen == in_batch:
                n += in_batch
        off = end
    return n


async def test_bad_crc_mid_log_is_never_repaired(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path, batches=6)
    seg = segments(node)[-1]
    data = bytearray(seg.read_bytes())
    data[HEADER_SIZE + 300] ^= 0x01
    seg.write_bytes(bytes(data))
    before = seg.read_bytes()
    with pytest.raises(AuditCorrupted, match="CRC-32C"):
        open_log(root)
    assert seg.read_bytes() == before, "nothing was cut"
    assert not list(node.glob("*.broken"))


async def test_leftover_temp_file_is_removed(tmp_path: Path) -> None:
    root, node = await _crashed_log(tmp_path, batches=1)
    leftover = node / "0000000000000001-0000000000000009.wal.tmp"
    leftover.write_bytes(b"half a segment header")
    log = open_log(root)
    assert not leftover.exists()
    assert leftover.name in log.recovery.removed_temp
    assert log.size == 8
    await log.close()


@pytest.mark.parametrize("damage", ["drop", "zeros", "scramble", "partial"])
async def test_loss_of_unsynced_data_recovers_exactly_the_synced_prefix(tmp_path: Path, damage: str) -> None:
    live = tmp_path / "live"
    log = open_log(live)
    synced = await append_batch(log, 0, 20)
    seg = segments(live / "n1")[-1]
    synced_len = seg.stat().st_size
    await append_batch(log, 20, 20)  # pretend this batch never reached the platter
    node = crash_image(live / "n1", tmp_path / "crash")
    await log.close()
    img = segments(node)[-1]
    data = img.read_bytes()
    rng = random.Random(damage)
    tail = data[synced_len:]
    if damage == "drop":
        tail = b""
    elif damage == "zeros":
        tail = b"\0" * len(tail)
    elif damage == "scramble":
        tail = rng.randbytes(len(tail))
    else:  # some later sectors made it, the first did not
        tail = b"\0" * 512 + tail[512:]
    img.write_bytes(data[:synced_len] + tail)
    recovered = open_log(tmp_path / "crash")
    assert [i for i, _ in recovered.records()] == synced
    await recovered.close()


async def test_checkpoint_covering_lost_records_is_reported_as_data_loss(tmp_path: Path) -> None:
    live = tmp_path / "live"
    log = open_log(live)
    for b in range(4):
        await append_batch(log, b * 8, 8)
    assert (await log.checkpoint()).size == 32
    node = crash_image(live / "n1", tmp_path / "crash")
    root = node.parent
    await log.close()
    seg = segments(node)[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) // 3])  # lose records the signed checkpoint covers
    with pytest.raises(AuditCorrupted, match="data lost"):
        open_log(root)


async def test_write_failure_fails_the_append_and_every_later_one(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await log.append(record(1))

    def broken_sync() -> None:
        raise OSError(5, "Input/output error")

    log._sync = broken_sync  # type: ignore[method-assign]
    with pytest.raises(AuditError, match="write failed"):
        await log.append(record(2))
    with pytest.raises(AuditError, match="failed earlier"):
        await log.append(record(3))
    await log.close()
    os.sync()


def _blocking_sync(log: WalAuditLog) -> tuple[threading.Event, threading.Event]:
    """Make the writer's next fdatasync wait: returns (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    real = log._sync

    def blocked() -> None:
        entered.set()
        release.wait(10)
        real()

    log._sync = blocked  # type: ignore[method-assign]
    return entered, release


async def test_batch_policy_acknowledges_only_after_fdatasync(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    entered, release = _blocking_sync(log)
    task = asyncio.create_task(log.append(record(1)))
    assert await asyncio.to_thread(entered.wait, 10)
    await asyncio.sleep(0)  # give a wrongly early acknowledgement every chance to land
    assert not task.done(), "acknowledged before the data was synced"
    release.set()
    assert await task == 1
    await log.close()


async def test_interval_policy_acknowledges_before_fdatasync(tmp_path: Path) -> None:
    log = open_log(tmp_path, fsync=FsyncPolicy.INTERVAL, fsync_interval=0.001)
    entered, release = _blocking_sync(log)
    try:
        assert await log.append(record(1)) == 1  # returns although the sync is held
        assert await asyncio.to_thread(entered.wait, 10)
    finally:
        release.set()
    await log.close()
    reopened = open_log(tmp_path)
    assert reopened.size == 1
    await reopened.close()


async def test_the_checkpoint_file_follows_the_log_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from middleware.audit import wal
    from middleware.audit.checkpoint import Checkpoint

    monkeypatch.setattr(wal, "PUBLISH_INTERVAL", 3600.0)  # nothing but asking or closing publishes
    log = open_log(tmp_path, checkpoint_every=5)
    path = tmp_path / "n1" / "checkpoint"

    def published() -> int:
        return Checkpoint.parse(path.read_text()).size if path.exists() else 0

    async def published_becomes(size: int) -> None:
        for _ in range(1000):  # up to 10 s: the writer thread publishes after the acks
            if published() == size:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"checkpoint file at {published()}, expected {size}")

    await append_batch(log, 0, 5)
    await published_becomes(5)  # the first checkpoint is published at once
    await append_batch(log, 5, 5)
    assert log.latest_checkpoint().size == 10 and published() == 5, "the file may lag the log"
    assert (await log.checkpoint()).size == 10 and published() == 10, "asking publishes"
    monkeypatch.setattr(wal, "PUBLISH_INTERVAL", 0.01)
    await append_batch(log, 10, 5)
    await published_becomes(15)  # the idle writer publishes it once the interval has passed
    await append_batch(log, 15, 3)
    await log.close()
    assert published() == 18, "closing publishes the final checkpoint"


async def test_a_checkpoint_is_handed_out_only_once_the_log_holding_it_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint read before its frame is synced could be taken back by a crash, and the
    # recovered log then re-signed at the same size with another root: a fork to an auditor.
    log = open_log(tmp_path, checkpoint_every=5)
    await append_batch(log, 0, 5)
    assert log.latest_checkpoint().size == 5
    entered, release = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def held_fdatasync(fd: int) -> None:
        entered.set()
        release.wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", held_fdatasync)
    appending = asyncio.ensure_future(append_batch(log, 5, 5))  # signs a checkpoint at 10
    try:
        assert await asyncio.to_thread(entered.wait, 10)
        assert log.latest_checkpoint().size == 5, "signed at 10 but not yet durable"
        assert [cp.size for cp in log.checkpoints()] == [5]
    finally:
        release.set()
    await appending
    assert log.latest_checkpoint().size == 10
    await log.close()


async def test_a_live_log_holds_a_bounded_number_of_checkpoints_and_verify_still_reads_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory does not grow with the checkpoints a long-running gateway signs: the log keeps the
    recent ones (``KEPT_CHECKPOINTS`` to twice it) in memory, also after reopening; every one stays
    in the segments, where verification reads and checks them all."""
    from middleware.audit import wal as wal_module
    from middleware.audit.verify import verify_path

    monkeypatch.setattr(wal_module, "KEPT_CHECKPOINTS", 3)
    log = open_log(tmp_path, checkpoint_every=2)
    for start in range(0, 40, 2):
        await append_batch(log, start, 2)
    held = [cp.size for cp in log.checkpoints()]
    assert 3 <= len(held) <= 6 and held[-1] == 40
    assert held == sorted(held)
    await log.close()
    log = open_log(tmp_path)
    assert [cp.size for cp in log.checkpoints()] == [36, 38, 40]
    await log.close()
    verified = verify_path(tmp_path, key=SIGNER.vkey)
    assert verified.ok and [n.checkpoints for n in verified.nodes] == [20]
