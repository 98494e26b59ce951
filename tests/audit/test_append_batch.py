"""append_batch: one hand-over and one future per batch, every record still its own leaf."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from middleware.audit import AuditRecord, FileAuditLog, MemoryAuditLog
from middleware.audit.merkle import leaf_hash, verify_inclusion
from middleware.audit.record import fast_canonical_json, plain_record, record_bytes
from middleware.audit.segment import MAX_PAYLOAD
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog
from middleware.errors import InvalidInput

from .helpers import SIGNER, open_log, record


def _plain(i: int) -> dict[str, object]:
    return plain_record(
        "agent.step",
        node="n1",
        outcome="success",
        detail={"i": i, "at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)},
        user="u1",
        agent="a",
        session="s1",
        task_id="t1",
        trace_id="trace-1",
        rule="r",
    )


def test_a_plain_record_has_the_bytes_of_the_record_it_validates_to() -> None:
    plain = _plain(1)
    model = AuditRecord.model_validate(plain)
    assert model.model_dump(mode="json") == {**plain, "detail": {"i": 1, "at": "2026-01-02T03:04:05.000006Z"}}
    assert record_bytes(plain) == model.canonical() == record_bytes(model)
    assert fast_canonical_json({"big": 1 << 70}) == b'{"big":1180591620717411303424}'


async def test_wal_batch_takes_consecutive_indexes_one_fsync_and_each_record_is_a_leaf(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, checkpoint_every=1000)
    syncs = 0
    real = log._sync

    def counting() -> None:
        nonlocal syncs
        syncs += 1
        real()

    log._sync = counting  # type: ignore[method-assign]
    assert await log.append(record(0)) == 1
    batch = [_plain(i) for i in range(1, 11)] + [record(11)]
    got = await log.append_batch(batch)
    assert got == range(2, 13)
    assert syncs == 2, "one fdatasync per batch"
    assert await log.append_batch([]) == range(13, 13)
    cp = await log.checkpoint()
    assert cp.size == 12
    read = list(log.records())
    assert [i for i, _ in read] == list(range(1, 13))
    assert [r.detail["i"] for _, r in read[1:11]] == list(range(1, 11))
    # one event of the batch, proved on its own against the signed root
    size, leaf, path = log.inclusion_proof(5)
    assert leaf == leaf_hash(record_bytes(batch[3]))
    verify_inclusion(leaf, 4, size, path, cp.root)
    await log.close()
    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    assert verdict.ok and verdict.nodes[0].events == 12


async def test_a_batch_with_a_record_too_large_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    huge = record(1, detail={"x": "y" * (MAX_PAYLOAD + 1)})
    with pytest.raises(InvalidInput, match="larger than"):
        await log.append_batch([record(0), huge])
    assert await log.append(record(2)) == 1
    await log.close()


async def test_the_writer_frames_the_next_batch_while_the_fsync_runs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    entered, release = threading.Event(), threading.Event()
    real = log._sync
    calls = 0

    def first_blocks() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            release.wait(10)
        real()

    log._sync = first_blocks  # type: ignore[method-assign]
    first = asyncio.ensure_future(log.append_batch([record(i) for i in range(5)]))
    try:
        assert await asyncio.to_thread(entered.wait, 10)
        second = asyncio.ensure_future(log.append_batch([record(i) for i in range(5, 8)]))
        # while the first fdatasync is held, the writer frames, hashes and writes the second batch
        for _ in range(1000):
            if log.size == 8:
                break
            await asyncio.to_thread(threading.Event().wait, 0.01)
        assert log.size == 8, "the second batch waited for the first fdatasync"
        assert not first.done() and not second.done(), "acknowledged before the fdatasync"
    finally:
        release.set()
    assert await first == range(1, 6)
    assert await second == range(6, 9)
    await log.close()


async def test_memory_and_file_logs_append_batches(tmp_path: Path) -> None:
    memory = MemoryAuditLog()
    await memory.append(record(0))
    assert await memory.append_batch([_plain(1), record(2)]) == range(2, 4)
    assert [(i, r.detail.get("i")) for i, r in memory.records()] == [(1, 0), (2, 1), (3, 2)]
    file_log = FileAuditLog(tmp_path)
    assert await file_log.append_batch([_plain(1), record(2)]) == range(1, 3)
    assert await file_log.append(record(3)) == 3
    await file_log.close()
    reopened = FileAuditLog(tmp_path)  # re-verifies the chain
    assert [r.detail["i"] for _, r in reopened.records()] == [1, 2, 3]
    await reopened.close()


def test_wal_is_an_audit_log_with_batches(tmp_path: Path) -> None:
    log = WalAuditLog(tmp_path, "n1", signer=SIGNER)
    try:
        assert callable(log.append_batch)
    finally:
        asyncio.run(log.close())
