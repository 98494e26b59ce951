"""Retention: old segments go only up to a checkpoint; the log stays verifiable; removal is recorded."""

from __future__ import annotations

import asyncio
import io
import time
from datetime import timedelta
from pathlib import Path

import pytest

from middleware.audit.export import export
from middleware.audit.merkle import verify_inclusion
from middleware.audit.retention import RetentionSchedule, parse_age
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.cli import main
from middleware.errors import InvalidInput

from .helpers import SIGNER, append_batch, open_log, segments

HOUR = 3600 * 10**9


async def _aged_log(root: Path):
    log = open_log(root, segment_bytes=4096, checkpoint_every=10)
    for start in range(0, 40, 5):
        await append_batch(log, start, 5)
    await log.checkpoint()
    return log


@pytest.mark.parametrize("archive", [False, True])
async def test_old_segments_go_and_the_log_still_verifies(tmp_path: Path, archive: bool) -> None:
    log = await _aged_log(tmp_path / "log")
    node = tmp_path / "log" / "n1"
    before = segments(node)
    root_before = log.tree.root()
    archive_dir = tmp_path / "archive" if archive else None
    removed = await log.apply_retention(
        timedelta(hours=1), archive_dir=archive_dir, now_ns=time.time_ns() + 2 * HOUR
    )
    assert removed and removed == [p.name for p in before[: len(removed)]]
    assert segments(node)[0].name not in removed and len(segments(node)) == len(before) - len(removed)
    # the removal is itself recorded
    last_index, last = list(log.records())[-1]
    assert last.event_type == "audit.retention" and last.detail["segments"] == removed
    assert last.outcome == ("archived" if archive else "deleted")
    # roots and proofs still cover the removed events
    assert log.tree.root(40) == root_before
    await log.close()
    reopened = open_log(tmp_path / "log")
    assert reopened.recovery.pruned == last.detail["events"][1]
    assert reopened.size == last_index
    cp = await reopened.checkpoint()
    verify_inclusion(reopened.tree.leaf(0), 0, cp.size, reopened.tree.inclusion_proof(0, cp.size), cp.root)
    await reopened.close()
    verdict = verify_path(tmp_path / "log", key=SIGNER.vkey)
    assert verdict.ok, verdict.nodes
    assert any("removed by retention" in w for w in verdict.nodes[0].warnings)
    # a complete export of the pruned log still verifies offline
    buf = io.BytesIO()
    export(tmp_path / "log", buf, "jsonl")
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(buf.getvalue())
    assert verify_path(bundle, key=SIGNER.vkey).ok
    if archive:
        assert sorted(p.name for p in segments(tmp_path / "archive" / "n1")) == removed
        assert verify_path(tmp_path / "archive" / "n1", key=SIGNER.vkey).ok


async def test_nothing_goes_past_the_latest_checkpoint_or_when_young(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4096, checkpoint_every=1000)
    for start in range(0, 40, 5):
        await append_batch(log, start, 5)
    assert await log.apply_retention(timedelta(hours=1), now_ns=time.time_ns() + 2 * HOUR) == []  # unsigned
    await log.checkpoint()
    assert await log.apply_retention(timedelta(hours=1)) == []  # too young
    with pytest.raises(InvalidInput, match="max_age"):
        await log.apply_retention(timedelta(0))
    await log.close()


async def test_tampered_pruned_leaves_are_caught(tmp_path: Path) -> None:
    log = await _aged_log(tmp_path)
    await log.apply_retention(timedelta(hours=1), now_ns=time.time_ns() + 2 * HOUR)
    await log.close()
    leaves = tmp_path / "n1" / "pruned.leaves"
    data = bytearray(leaves.read_bytes())
    data[5] ^= 1
    leaves.write_bytes(bytes(data))
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and "does not match" in bad.error


async def test_a_schedule_prunes_a_live_log_and_stops_at_once(tmp_path: Path) -> None:
    log = await _aged_log(tmp_path)
    before = segments(tmp_path / "n1")
    runs: list[list[str] | BaseException] = []
    ran = asyncio.Event()

    def on_run(result: list[str] | BaseException) -> None:
        runs.append(result)
        ran.set()

    # 1 ms: every sealed segment is older than that by the time the schedule starts
    schedule = RetentionSchedule(log, timedelta(milliseconds=1), interval=timedelta(hours=1), on_run=on_run)
    async with schedule:
        await asyncio.wait_for(ran.wait(), 10)
    assert len(runs) == 1, "stopping does not wait for the next interval"
    removed = runs[0]
    assert isinstance(removed, list) and removed == [p.name for p in before[: len(removed)]]
    assert list(log.records())[-1][1].event_type == "audit.retention"
    await log.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok


async def test_a_failed_run_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    class FullDisk:
        node = "n9"
        calls = 0

        async def apply_retention(self, max_age: timedelta, *, archive_dir: object = None) -> list[str]:
            self.calls += 1
            if self.calls == 1:
                raise OSError("No space left on device")
            return ["0000000000000000-0000000000000001.wal"]

    results: list[list[str] | BaseException] = []
    twice = asyncio.Event()

    def on_run(result: list[str] | BaseException) -> None:
        results.append(result)
        if len(results) == 2:
            twice.set()

    async with RetentionSchedule(
        FullDisk(), timedelta(days=1), interval=timedelta(milliseconds=10), on_run=on_run
    ):
        await asyncio.wait_for(twice.wait(), 10)
    assert isinstance(results[0], OSError) and results[1] == ["0000000000000000-0000000000000001.wal"]
    assert "audit retention on n9 failed: No space left on device" in caplog.text


def test_ages_are_read_with_their_unit() -> None:
    assert parse_age("90d") == timedelta(days=90)
    assert parse_age("12h") == timedelta(hours=12)
    assert parse_age("2w") == timedelta(weeks=2)
    assert parse_age("0.5s") == timedelta(milliseconds=500)
    for bad in ["90", "d", "-1d", "0s", "3 years"]:
        with pytest.raises(ValueError):
            parse_age(bad)
    with pytest.raises(InvalidInput, match="interval"):
        RetentionSchedule(FakeLog(), timedelta(days=1), interval=timedelta(0))


class FakeLog:
    node = "n0"

    async def apply_retention(self, max_age: timedelta, *, archive_dir: object = None) -> list[str]:
        return []


async def test_agency_audit_retain_on_a_stopped_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = WalAuditLog(tmp_path, "n1", options=WalOptions(segment_bytes=4096, checkpoint_every=10))
    for start in range(0, 40, 5):
        await append_batch(log, start, 5)
    await log.close()
    before = segments(tmp_path / "n1")
    archive = tmp_path / "archive"
    argv = ["audit", "retain", str(tmp_path), "--max-age", "1ms"]
    assert main(argv) == 2
    assert "max-age: '1ms' is not an age" in capsys.readouterr().err
    argv[-1] = "0.001s"  # the segments were sealed before the command ran
    assert await asyncio.to_thread(main, [*argv, "--signing-key", str(tmp_path / "nokey")]) == 2
    assert "signing-key: no checkpoint key at" in capsys.readouterr().err
    assert segments(tmp_path / "n1") == before, "nothing touched when a key is missing"
    assert await asyncio.to_thread(main, [*argv, "--archive", str(archive)]) == 0
    out = capsys.readouterr().out
    moved = sorted(p.name for p in segments(archive / "n1"))
    assert moved and out.startswith(f"n1: archived {len(moved)} segment(s): {moved[0]}")
    assert verify_path(tmp_path).ok and verify_path(archive / "n1").ok
