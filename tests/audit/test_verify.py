"""Offline verification: tampering with a log or a bundle is caught, and the verdict says where."""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import pytest

from middleware.audit.checkpoint import Signer
from middleware.audit.export import ExportFilter, export
from middleware.audit.segment import HEADER, HEADER_SIZE, crc32c
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, append_batch, open_log, record, segments


async def _closed_log(root: Path, n: int = 30, **opts: object) -> Path:
    log = open_log(root, segment_bytes=opts.pop("segment_bytes", 4096), checkpoint_every=10, **opts)
    for start in range(0, n, 5):
        await append_batch(log, start, 5)
    await log.close()
    return root / "n1"


def _frames(data: bytes) -> list[tuple[int, int, int, int]]:
    """(offset, padded end, type, index) of every frame of a segment."""
    out, off = [], 0
    while off + HEADER_SIZE <= len(data):
        _, length, _, typ, _, _, index, *_ = HEADER.unpack_from(data, off)
        end = off + HEADER_SIZE + length
        end += -end % 8
        out.append((off, end, typ, index))
        off = end
    return out


def _events(data: bytes) -> list[tuple[int, int, int, int]]:
    return [f for f in _frames(data) if f[2] == 2]


async def test_intact_log_verifies_with_the_pinned_key(tmp_path: Path) -> None:
    await _closed_log(tmp_path)
    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    assert verdict.ok
    node = verdict.nodes[0]
    assert (node.events, node.checkpoints) == (30, 3)
    assert "OK" in node.describe()


@pytest.mark.parametrize("which", ["sealed", "last"])
async def test_one_changed_byte_is_caught_at_its_record(tmp_path: Path, which: str) -> None:
    node = await _closed_log(tmp_path)
    with_events = [p for p in segments(node) if len(_events(p.read_bytes())) >= 2]
    seg = with_events[0 if which == "sealed" else -1]
    data = bytearray(seg.read_bytes())
    off, _, _, _index = _events(bytes(data))[1]
    data[off + HEADER_SIZE + 20] ^= 0x20
    seg.write_bytes(bytes(data))
    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    bad = verdict.first_failure
    assert bad is not None and not verdict.ok
    assert "CRC-32C" in bad.error
    assert bad.where == f"{seg.name}@{off}"


async def test_changed_byte_with_recomputed_crc_breaks_the_chain(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path)
    seg = segments(node)[0]
    data = bytearray(seg.read_bytes())
    off, _end, _, _index = _events(bytes(data))[2]
    length = struct.unpack_from("<I", data, off + 4)[0]
    data[off + HEADER_SIZE + 20] ^= 0x20
    struct.pack_into("<I", data, off + 8, crc32c(bytes(data[off + 12 : off + HEADER_SIZE + length])))
    seg.write_bytes(bytes(data))
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None
    assert "chain broken" in bad.error
    nxt = _frames(bytes(data))[[f[0] for f in _frames(bytes(data))].index(off) + 1][0]
    assert bad.where == f"{seg.name}@{nxt}", "the frame after the altered one no longer chains"


async def test_deleted_record_is_caught(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path)
    seg = segments(node)[0]
    data = seg.read_bytes()
    off, end, _, _index = _events(data)[2]
    seg.write_bytes(data[:off] + data[end:])
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None
    assert bad.where == f"{seg.name}@{off}"
    assert "chain broken" in bad.error


async def test_two_reordered_records_are_caught(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path)
    seg = segments(node)[0]
    data = seg.read_bytes()
    (a0, a1, _, _), (b0, b1, _, _) = _events(data)[1:3]
    seg.write_bytes(data[:a0] + data[b0:b1] + data[a0:a1] + data[b1:])
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None
    assert bad.where == f"{seg.name}@{a0}"
    assert "chain broken" in bad.error


async def test_truncated_and_resigned_with_another_key_is_caught(tmp_path: Path) -> None:
    node = await _closed_log(tmp_path, segment_bytes=1 << 20)
    (seg,) = segments(node)
    data = seg.read_bytes()
    _, end, _, _ = _events(data)[7]  # keep the first batch of 8 events, before the first checkpoint
    seg.write_bytes(data[:end])
    (node / "checkpoint").unlink()
    attacker = Signer("audit-test")  # same name, different key
    (node / "checkpoint.vkey").write_text(attacker.vkey + "\n")
    # a gateway never adopts batches another key signed ...
    with pytest.raises(AuditCorrupted, match="not by the log's key"):
        WalAuditLog(tmp_path, "n1", signer=attacker)
    # ... so the attacker writes the records kept again, signed with their own key
    forged = tmp_path / "forged"
    log = WalAuditLog(forged, "n1", signer=attacker)
    await log.append_batch([record(i) for i in range(8)])
    await log.close()
    shutil.rmtree(node)
    shutil.copytree(forged / "n1", node)
    (seg,) = segments(node)
    # the forged log verifies only against the forger's own key ...
    assert verify_path(tmp_path).ok
    # ... not against the published one
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None
    assert "not signed by the trusted key" in bad.error
    assert bad.where.startswith(seg.name + "@")
    # and a checkpoint published before the truncation proves records are missing
    assert not verify_path(tmp_path, trusted_checkpoint=_published_checkpoint(tmp_path)).ok


def _published_checkpoint(tmp_path: Path) -> str:
    return SIGNER.sign("agency-middleware/audit/n1", 30, b"\x00" * 32).note


async def test_trusted_checkpoint_detects_truncation_to_an_older_checkpoint(tmp_path: Path) -> None:
    live = tmp_path / "live"
    node = await _closed_log(live)
    final = (node / "checkpoint").read_text()
    copy = tmp_path / "copy"
    shutil.copytree(live, copy)
    # an operator drops the last segments and restores an older checkpoint file
    segs = segments(copy / "n1")
    for p in segs[-2:]:
        p.unlink()
    (copy / "n1" / "checkpoint").unlink()
    verdict = verify_path(copy / "n1", key=SIGNER.vkey, trusted_checkpoint=final)
    assert not verdict.ok
    assert verdict.first_failure is not None
    assert "missing" in verdict.first_failure.error or "not sealed" in verdict.first_failure.error


# ---------------------------------------------------------------- bundles


async def _bundle(tmp_path: Path, flt: ExportFilter | None = None) -> list[bytes]:
    await _closed_log(tmp_path / "log")
    buf = io.BytesIO()
    export(tmp_path / "log", buf, "jsonl", flt)
    return buf.getvalue().splitlines(keepends=True)


def _write(tmp_path: Path, lines: list[bytes]) -> Path:
    p = tmp_path / "bundle.jsonl"
    p.write_bytes(b"".join(lines))
    return p


async def test_complete_bundle_verifies_offline(tmp_path: Path) -> None:
    lines = await _bundle(tmp_path)
    shutil.rmtree(tmp_path / "log")  # no original log needed
    verdict = verify_path(_write(tmp_path, lines), key=SIGNER.vkey)
    assert verdict.ok, verdict.nodes
    assert verdict.nodes[0].events == 30


async def test_bundle_with_a_changed_byte_names_the_checkpoint_range(tmp_path: Path) -> None:
    lines = await _bundle(tmp_path)
    i = next(k for k, ln in enumerate(lines) if b'"index":13,' in ln)
    lines[i] = lines[i].replace(b'"outcome":"success"', b'"outcome":"successs"')
    bad = verify_path(_write(tmp_path, lines), key=SIGNER.vkey).first_failure
    assert bad is not None
    assert "records 11..20" in bad.error and "altered" in bad.error


async def test_bundle_with_a_deleted_or_reordered_record_names_the_line(tmp_path: Path) -> None:
    lines = await _bundle(tmp_path)
    i = next(k for k, ln in enumerate(lines) if b'"index":7,' in ln)
    deleted = lines[:i] + lines[i + 1 :]
    bad = verify_path(_write(tmp_path, deleted), key=SIGNER.vkey).first_failure
    assert bad is not None and bad.where.endswith(f":{i + 1}")
    assert "record 8 where 7 was expected" in bad.error
    swapped = list(lines)
    swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
    bad = verify_path(_write(tmp_path, swapped), key=SIGNER.vkey).first_failure
    assert bad is not None and bad.where.endswith(f":{i + 1}")


async def test_filtered_bundle_carries_inclusion_proofs(tmp_path: Path) -> None:
    lines = await _bundle(tmp_path, ExportFilter(trace_id="trace-1"))
    records = [json.loads(ln) for ln in lines if b'"kind":"record"' in ln]
    assert records and all(r["record"]["trace_id"] == "trace-1" for r in records)
    assert all(r["proof"] for r in records)
    bundle = _write(tmp_path, lines)
    assert verify_path(bundle, key=SIGNER.vkey).ok
    i = next(k for k, ln in enumerate(lines) if b'"kind":"record"' in ln)
    lines[i] = lines[i].replace(b'"outcome":"success"', b'"outcome":"failure"')
    bad = verify_path(_write(tmp_path, lines), key=SIGNER.vkey).first_failure
    assert bad is not None and "inclusion proof fails" in bad.error
    assert bad.where.endswith(f":{i + 1}")


async def test_bundle_resigned_with_another_key_fails_against_the_pinned_key(tmp_path: Path) -> None:
    lines = await _bundle(tmp_path)
    head = json.loads(lines[1])
    forger = Signer("audit-test")
    head["vkey"] = forger.vkey
    head["checkpoints"] = [forger.sign("agency-middleware/audit/n1", 30, b"\x01" * 32).note]
    lines[1] = (json.dumps(head) + "\n").encode()
    bad = verify_path(_write(tmp_path, lines), key=SIGNER.vkey).first_failure
    assert bad is not None and "not signed by the trusted key" in bad.error


async def test_trusted_checkpoint_is_matched_to_its_node_by_origin(tmp_path: Path) -> None:
    await _closed_log(tmp_path / "log")
    other = open_log(tmp_path / "log", "n2")
    await append_batch(other, 0, 3)
    await other.close()
    good = (tmp_path / "log" / "n1" / "checkpoint").read_text()
    assert verify_path(tmp_path / "log", key=SIGNER.vkey, trusted_checkpoint=good).ok
    future = SIGNER.sign("agency-middleware/audit/n1", 99, b"\x00" * 32).note
    bad = verify_path(tmp_path / "log", key=SIGNER.vkey, trusted_checkpoint=future).first_failure
    assert bad is not None and bad.node == "n1" and "records missing" in bad.error
    stranger = SIGNER.sign("agency-middleware/audit/n9", 1, b"\x00" * 32).note
    bad = verify_path(tmp_path / "log", key=SIGNER.vkey, trusted_checkpoint=stranger).first_failure
    assert bad is not None and "no log for the trusted checkpoint" in bad.error
