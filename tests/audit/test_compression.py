"""Sealed segments compressed (``.wal.zst``): the same bytes once read, so verify and proofs are unchanged."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest

from middleware.audit.compression import COMPRESSED_SUFFIX, read_segment, restore, strip
from middleware.audit.export import export
from middleware.audit.verify import verify_path
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, open_log, record, segments


async def _log(root: Path, *, compress: bool, batches: int = 12):  # type: ignore[no-untyped-def]
    log = open_log(root, segment_bytes=8192, checkpoint_every=10, compress_sealed=compress)
    for b in range(batches):
        await log.append_batch([record(10 * b + k) for k in range(6)])
    return log


async def test_sealed_segments_are_compressed_and_verify_with_the_same_proofs(tmp_path: Path) -> None:
    log = await _log(tmp_path, compress=True)
    before = [log.inclusion_proof(i) for i in (1, 17, 40)]
    size, root = log.tree.size, log.tree.root()
    assert size == 72
    await log.close()
    files = segments(tmp_path / "n1")
    assert files and all(p.name.endswith(COMPRESSED_SUFFIX) for p in files)  # the last one too, on close
    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    assert verdict.ok and verdict.nodes[0].events == 72
    again = open_log(tmp_path, compress_sealed=True)  # recovery reads them
    try:
        assert [again.inclusion_proof(i, before[0][0]) for i in (1, 17, 40)] == before
        assert again.tree.root(len(before) and log.tree.size) == root
        assert [r.detail["i"] for _, r in again.records()][:72] == [
            10 * b + k for b in range(12) for k in range(6)
        ]
    finally:
        await again.close()
    out = io.BytesIO()
    export(tmp_path, out)
    bundle = tmp_path.parent / "bundle.jsonl"
    bundle.write_bytes(out.getvalue())
    assert verify_path(bundle, key=SIGNER.vkey).ok


async def test_compressed_segments_are_much_smaller(tmp_path: Path) -> None:
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for root, compress in ((plain, False), (packed, True)):
        log = await _log(root, compress=compress, batches=40)
        await log.close()
    size = {r: sum(p.stat().st_size for p in segments(r / "n1")) for r in (plain, packed)}
    assert size[packed] < size[plain] / 4, size


async def test_strip_and_restore_give_back_the_sealed_bytes(tmp_path: Path) -> None:
    log = await _log(tmp_path, compress=False)
    await log.close()
    for path in segments(tmp_path / "n1"):
        data = path.read_bytes()
        assert restore(strip(data)) == data


@pytest.mark.parametrize("damage", ["flip", "truncate"])
async def test_a_damaged_compressed_segment_is_a_verdict_not_a_crash(tmp_path: Path, damage: str) -> None:
    log = await _log(tmp_path, compress=True)
    await log.close()
    first = segments(tmp_path / "n1")[0]
    data = bytearray(first.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    else:
        del data[len(data) // 2 :]
    first.write_bytes(bytes(data))
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and first.name in bad.where + bad.error
    with pytest.raises(AuditCorrupted):
        open_log(tmp_path)


async def test_retention_removes_compressed_segments(tmp_path: Path) -> None:
    log = await _log(tmp_path, compress=True, batches=20)
    await log.checkpoint()
    await log.close()
    log = open_log(tmp_path, compress_sealed=True)
    try:
        removed = await log.apply_retention(timedelta(seconds=1), now_ns=2**62)
        assert removed and all(name.endswith(COMPRESSED_SUFFIX) for name in removed)
    finally:
        await log.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok


def test_reading_a_segment_that_is_not_there_compressed_or_plain_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_segment(tmp_path / "0000000000000000-0000000000000001.wal")
