"""An attacker who can write the audit directory but not the key: no forged record is adopted.

Every batch of events is announced by a commit frame signed with the log's key before the
batch is acknowledged. The forgeries of issue 25 — a segment appended after the seal of a
cleanly closed log, events appended to or rewritten in the tail of a crashed log, all
made with the public ``encode_frame`` — fail ``verify --key``, and a gateway opening the
log sets them aside (``*.unsigned``), records that it did, and never signs them.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from middleware.audit.checkpoint import Signer
from middleware.audit.compression import read_segment
from middleware.audit.segment import (
    COMMIT,
    EVENT,
    HEADER,
    HEADER_SIZE,
    LEGACY_VERSION,
    SEAL,
    SEGMENT,
    SegmentName,
    crc32c,
    encode_events,
    encode_frame,
)
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, open_log, record, segments

pytestmark = pytest.mark.timeout(120)


def _frames(data: bytes) -> list[tuple[int, int, int, int, bytes]]:
    """(type, index, offset, end, prev) of every frame."""
    out, off = [], 0
    while off + HEADER_SIZE <= len(data):
        _, length, _, typ, _, _, index, _, _, prev = HEADER.unpack_from(data, off)
        end = off + HEADER_SIZE + length
        out.append((typ, index, off, end, prev))
        off = end + (-end % 8)
    return out


def _chain_end(data: bytes) -> bytes:
    """The chain hash after the last frame of a segment (what a forger recomputes: all public)."""
    import hashlib

    typ, index, off, end, prev = _frames(data)[-1]
    leaf = hashlib.sha256(b"\x00" + data[off + HEADER_SIZE : end]).digest()
    return hashlib.sha256(bytes([typ]) + index.to_bytes(8, "little") + prev + leaf).digest()


def _forged(i: int) -> bytes:
    return record(1000 + i, outcome="forged").canonical()


async def _closed(root: Path, n: int = 12) -> WalAuditLog:
    log = open_log(root, checkpoint_interval=None)
    await log.append_batch([record(i) for i in range(n)])
    await log.close()
    return log


def _append_segment_after_seal(node: Path, count: int) -> None:
    """g1: a new segment after the seal, header and events made with the public encode_frame."""
    last = segments(node)[-1]
    data = read_segment(last)  # compressed once sealed, by a gateway
    assert _frames(data)[-1][0] == SEAL
    name = SegmentName.parse(last.name)
    assert name is not None
    size = max(i for t, i, *_ in _frames(data) if t in (EVENT, SEAL))
    header = b'{"first_index":%d,"node":"n1","origin":"agency-middleware/audit/n1","seq":%d}' % (
        size + 1,
        name.seq + 1,
    )
    frame, _, chain = encode_frame(SEGMENT, size, 0, time.time_ns(), _chain_end(data), header)
    events, _, _ = encode_events(size + 1, 0, time.time_ns(), chain, [_forged(k) for k in range(count)])
    (node / SegmentName(name.seq + 1, size + 1).filename).write_bytes(frame + events)


def _set_aside_files(node: Path) -> list[Path]:
    return sorted(node.glob("*.unsigned"))


def _events(log: WalAuditLog) -> list[str]:
    return [r.outcome for _, r in log.records()]


async def test_g1_a_segment_after_the_seal_fails_verify_and_is_never_signed(tmp_path: Path) -> None:
    await _closed(tmp_path)
    node = tmp_path / "n1"
    _append_segment_after_seal(node, 3)

    verdict = verify_path(tmp_path, key=SIGNER.vkey)
    bad = verdict.first_failure
    assert bad is not None, "a forged segment must not verify"
    assert "3 event(s) from index 13 are not signed by the log's key" in bad.error
    assert bad.where.startswith(segments(node)[-1].name + "@")

    log = open_log(tmp_path)  # what the next `agency serve` does
    try:
        assert log.recovery.set_aside_events == 3
        assert "forged" not in _events(log)
        assert _events(log)[-1] == "set_aside"  # recorded in the log itself
        assert len(_set_aside_files(node)) == 1
    finally:
        await log.close()
    after = verify_path(tmp_path, key=SIGNER.vkey)
    assert after.ok and after.nodes[0].events == 13  # 12 genuine + the audit.set_aside record
    # and the forged events were never signed: no checkpoint covers more than what the log kept
    assert all(cp.size <= 13 for cp in after.nodes[0].state.checkpoints)  # type: ignore[union-attr]


async def test_g2_events_appended_to_a_crashed_logs_tail_are_set_aside(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_interval=None)
    await log.append_batch([record(i) for i in range(5)])
    await log.append_batch([record(i) for i in range(5, 9)])  # after the last checkpoint: no close
    node = tmp_path / "n1"
    seg = segments(node)[-1]
    data = seg.read_bytes()
    log._closing = True  # the crash: this process writes nothing more (lock released below)
    os.close(log._lock_fd)
    events, _, _ = encode_events(10, 0, time.time_ns(), _chain_end(data), [_forged(0), _forged(1)])
    seg.write_bytes(data + events)

    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and "2 event(s) from index 10 are not signed" in bad.error

    reopened = WalAuditLog(tmp_path, "n1", signer=SIGNER)
    try:
        assert reopened.recovery.set_aside_events == 2
        assert [r.detail.get("i") for _, r in reopened.records()][:9] == list(range(9))
        assert "forged" not in _events(reopened)
    finally:
        await reopened.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok


async def test_g3_an_event_rewritten_in_the_tail_is_refused_never_signed(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_interval=None)
    await log.append_batch([record(i) for i in range(6)])
    await log.append_batch([record(i, outcome="paid 10") for i in range(6, 9)])
    log._closing = True
    os.close(log._lock_fd)
    seg = segments(tmp_path / "n1")[-1]
    data = bytearray(seg.read_bytes())
    # rewrite the last event ("paid 10" -> "paid 99"), then fix its CRC (the chain ends there)
    typ, index, off, end, _ = _frames(bytes(data))[-1]
    assert typ == EVENT and index == 9
    pos = bytes(data).index(b"paid 10", off)
    data[pos : pos + 7] = b"paid 99"
    data[off + 8 : off + 12] = crc32c(bytes(data[off + 12 : end])).to_bytes(4, "little")
    seg.write_bytes(bytes(data))

    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and "commit signature of events 7..9 is not by the log's key" in bad.error
    with pytest.raises(AuditCorrupted, match=r"commit signature of events 7\.\.9"):
        WalAuditLog(tmp_path, "n1", signer=SIGNER)


async def test_a_commit_frame_the_forger_signed_with_another_key_is_refused(tmp_path: Path) -> None:
    await _closed(tmp_path, 4)
    node = tmp_path / "n1"
    (node / "checkpoint").unlink()
    seg = segments(node)[-1]
    data = seg.read_bytes()
    cut = _frames(data)[-2][2]  # drop checkpoint and seal: the batch stands alone again
    data = data[:cut]
    forger = Signer("audit-test")
    from middleware.audit.segment import ChainState, encode_batch

    state = ChainState(origin="agency-middleware/audit/n1")
    frames, _, _ = encode_batch(
        5, 0, time.time_ns(), _chain_end(data), [_forged(0)], state=state, sign=forger.sign_bytes
    )
    seg.write_bytes(data + frames)
    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and "commit signature" in bad.error
    with pytest.raises(AuditCorrupted, match="commit signature"):
        open_log(tmp_path)


async def test_an_old_format_logs_unsigned_tail_is_set_aside(tmp_path: Path) -> None:
    """A log of the old format (events signed only by later checkpoints): its tail after the
    last checkpoint cannot be told from a forgery, so it is set aside, never signed."""
    node = tmp_path / "n1"
    node.mkdir()
    header = b'{"first_index":1,"node":"n1","origin":"agency-middleware/audit/n1","seq":0}'
    frame, _, chain = encode_frame(SEGMENT, 0, 0, 1, bytes(32), header, version=LEGACY_VERSION)
    signed, leaves, chain = encode_events(
        1, 0, 1, chain, [record(i).canonical() for i in range(4)], version=1
    )
    from middleware.audit.merkle import MerkleTree

    tree = MerkleTree()
    tree.extend(leaves)
    cp = SIGNER.sign("agency-middleware/audit/n1", 4, tree.root())
    cpf, _, chain = encode_frame(3, 4, 0, 1, chain, cp.note.encode(), version=LEGACY_VERSION)
    tail, _, _ = encode_events(5, 0, 1, chain, [_forged(0), _forged(1)], version=LEGACY_VERSION)
    (node / SegmentName(0, 1).filename).write_bytes(frame + signed + cpf + tail)
    (node / "checkpoint.vkey").write_text(SIGNER.vkey + "\n")

    bad = verify_path(tmp_path, key=SIGNER.vkey).first_failure
    assert bad is not None and "2 event(s) from index 5 are not signed" in bad.error
    log = open_log(tmp_path)
    try:
        assert log.recovery.set_aside_events == 2
        assert "forged" not in _events(log)
        assert await log.append(record(50)) == 6  # new frames follow, commit-signed
    finally:
        await log.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok


async def test_every_acknowledged_batch_is_announced_by_a_signed_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_interval=None)
    await log.append_batch([record(i) for i in range(3)])
    await log.append(record(3))
    await log.close()
    frames = _frames(segments(tmp_path / "n1")[0].read_bytes())
    kinds = [t for t, *_ in frames]
    assert kinds == [SEGMENT, COMMIT, EVENT, EVENT, EVENT, COMMIT, EVENT, 3, SEAL]


# ---------------------------------------------------------------------- a real gateway


_SERVE = [sys.executable, "-m", "middleware", "serve"]


def _serve(data: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env["AGENCY_NODE_ID"] = "n1"
    return subprocess.Popen(
        [*_SERVE, "--data-dir", str(data), "--address", "127.0.0.1:0", "--metrics-address", ""],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait_serving(proc: subprocess.Popen[str], within: float = 60) -> str:
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if re.search(r"serving on", line):
            return seen
    proc.kill()
    raise AssertionError(f"the gateway did not start:\n{seen}")


def test_agency_serve_never_signs_a_forged_segment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    root = data / "audit"

    async def build() -> str:
        log = WalAuditLog(root, "n1", options=WalOptions(checkpoint_interval=None))
        await log.append_batch([record(i) for i in range(5)])
        await log.close()
        return log.vkey

    vkey = asyncio.run(build())
    _append_segment_after_seal(root / "n1", 2)
    proc = _serve(data)
    try:
        out = _wait_serving(proc)
        assert "set aside" in out  # the gateway says so in its own log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    verdict = verify_path(root, key=vkey)
    assert verdict.ok, verdict.nodes
    log = WalAuditLog(root, "n1")
    try:
        outcomes = _events(log)
    finally:
        asyncio.run(log.close())
    assert "forged" not in outcomes and "set_aside" in outcomes


async def test_a_record_line_appended_to_a_bundle_fails_verify(tmp_path: Path) -> None:
    import io

    from middleware.audit.export import export
    from middleware.audit.verify import record_line_prefix

    await _closed(tmp_path / "audit", 4)
    out = io.BytesIO()
    export(tmp_path / "audit", out)
    bundle = tmp_path / "bundle.jsonl"
    forged = record_line_prefix("n1", 5, 0, None) + _forged(0) + b"}\n"
    bundle.write_bytes(out.getvalue() + forged)
    assert verify_path(tmp_path / "bundle.jsonl", key=SIGNER.vkey).ok is False
    bundle.write_bytes(out.getvalue())
    assert verify_path(bundle, key=SIGNER.vkey).ok


async def test_a_bundle_leaves_out_what_no_checkpoint_covers_yet(tmp_path: Path) -> None:
    import io

    from middleware.audit.export import export

    log = open_log(tmp_path / "audit", checkpoint_interval=None, checkpoint_every=3)
    await log.append_batch([record(i) for i in range(4)])  # checkpoint at 4
    await log.append(record(4))  # signed by its commit frame only
    out = io.BytesIO()
    summary = export(tmp_path / "audit", out)
    await log.close()
    assert summary.records == 4 and summary.left_out == 1
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(out.getvalue())
    assert verify_path(bundle, key=SIGNER.vkey).ok
