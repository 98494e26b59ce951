"""Retention: old segments go only up to a checkpoint; the log stays verifiable; removal is recorded."""

from __future__ import annotations

import io
import time
from datetime import timedelta
from pathlib import Path

import pytest

from middleware.audit.export import export
from middleware.audit.merkle import verify_inclusion
from middleware.audit.verify import verify_path
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
