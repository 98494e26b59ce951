"""The fast paths of the audit log agree with their plain definitions.

* ``AuditRecord.canonical`` (orjson): sorted, compact, UTF-8, stored exactly as hashed.
* ``encode_events`` (one pass per batch) builds the same bytes as ``encode_frame`` per record.
* ``check`` (one combined framing test per frame) reports exactly what the frame-by-frame
  reference checker below reports, on every corruption of many random rounds.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from middleware.audit.merkle import leaf_hash
from middleware.audit.record import canonical_json
from middleware.audit.segment import (
    EVENT,
    HEADER,
    HEADER_SIZE,
    LEGACY_VERSION,
    MAGIC,
    MAX_PAYLOAD,
    ZERO_HASH,
    ChainState,
    SegmentName,
    TornFrame,
    check,
    crc32c,
    encode_events,
    encode_frame,
    list_segments,
)
from middleware.audit.verify import verify_path
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, open_log, record

TRICKY = {
    "zeta": {"b": 1, "a": [0.1, 1e16, -0.0, 1.5e-7, 3]},
    "text": 'é 日本 \u2028 tab\t quote" back\\ ctl\x01',
    "Alpha": True,
    "none": None,
}


def _sorted_everywhere(raw: bytes) -> bool:
    ok = True

    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal ok
        keys = [k for k, _ in pairs]
        ok = ok and keys == sorted(keys)
        return dict(pairs)

    json.loads(raw, object_pairs_hook=hook)
    return ok


def test_canonical_bytes_are_sorted_compact_utf8_and_faithful() -> None:
    rec = record(1, detail=TRICKY)
    raw = rec.canonical()
    assert json.loads(raw) == rec.model_dump(mode="json")
    assert _sorted_everywhere(raw)
    assert b": " not in raw and b", " not in raw.replace(b"\xc3\xa9 ", b"")  # compact separators
    assert "é 日本".encode() in raw  # non-ASCII kept as UTF-8, not \u-escaped
    assert raw == rec.canonical()  # deterministic
    # Without floats the orjson form is byte-identical to the json-module form.
    plain = record(2, detail={"b": "é", "a": [1, 2, {"y": None, "x": "\u2028"}]})
    assert plain.canonical() == canonical_json(plain.model_dump(mode="json"))


def test_integers_beyond_64_bits_fall_back_to_the_json_module() -> None:
    rec = record(1, detail={"big": 2**70})
    raw = rec.canonical()
    assert b'"big":1180591620717411303424' in raw
    assert json.loads(raw)["detail"]["big"] == 2**70


async def test_stored_bytes_are_the_hashed_bytes_and_verify(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    recs = [record(i, detail=TRICKY | {"i": i}) for i in range(5)] + [record(9, detail={"big": 2**70})]
    for r in recs:
        await log.append(r)
    await log.close()
    log = open_log(tmp_path)
    stored = list(log.records())
    assert [r.model_dump(mode="json") for _, r in stored] == [r.model_dump(mode="json") for r in recs]
    for i, r in enumerate(recs):
        assert log.tree.leaf(i) == leaf_hash(r.canonical())
    await log.close()
    assert verify_path(tmp_path, key=SIGNER.vkey).ok


@pytest.mark.parametrize("seed", range(5))
def test_encode_events_builds_the_same_frames_as_encode_frame(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [rng.randbytes(rng.randrange(0, 40)) for _ in range(50)]
    prev = hashlib.sha256(bytes([seed])).digest()
    frames, leaves, chain = encode_events(7, 123, 456, prev, payloads)
    parts, want_leaves = [], []
    for k, p in enumerate(payloads):
        frame, leaf, prev = encode_frame(EVENT, 7 + k, 123, 456, prev, p)
        parts.append(frame)
        want_leaves.append(leaf)
    assert (frames, leaves, chain) == (b"".join(parts), want_leaves, prev)


# ---------------------------------------------------------------- reference checker


def _reference_check(buf: bytes, state: ChainState) -> int:
    """Frame by frame, one test at a time, in the documented order (events and framing only)."""
    mv, size, off, chain, count = memoryview(buf), len(buf), 0, state.chain, state.size
    try:
        while off < size:
            if size - off < HEADER_SIZE:
                raise TornFrame("partial frame header", where=f"s@{off}", offset=off)
            magic, length, crc, typ, _, _, index, _, _, prev = HEADER.unpack_from(mv, off)
            if magic != MAGIC:
                raise TornFrame("no frame here (bad magic)", where=f"s@{off}", offset=off)
            end = off + HEADER_SIZE + length
            if length > MAX_PAYLOAD or end > size:
                raise TornFrame("frame length runs past the end of the file", where=f"s@{off}", offset=off)
            if crc32c(mv[off + 12 : end]) != crc:
                raise TornFrame("CRC-32C mismatch", where=f"s@{off}", offset=off)
            nxt = end + (-end % 8)
            if nxt > size:
                raise TornFrame("frame padding cut off", where=f"s@{off}", offset=off)
            if prev != chain:
                raise AuditCorrupted(f"chain broken (event frame, index {index})", where=f"s@{off}")
            leaf = leaf_hash(mv[off + HEADER_SIZE : end])
            if typ != EVENT:
                raise AuditCorrupted("not an event", where=f"s@{off}")
            if index != count + 1:
                raise AuditCorrupted(f"index {index} where {count + 1} was expected", where=f"s@{off}")
            count = index
            state.tree.append(leaf)
            chain = hashlib.sha256(bytes([typ]) + index.to_bytes(8, "little") + prev + leaf).digest()
            off = nxt
    finally:
        state.chain, state.size = chain, count
    return off


def _outcome(fn, buf: bytes) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    state = ChainState()
    try:
        end = fn(buf, state)
        err: tuple[object, ...] = ("ok", end)
    except TornFrame as exc:
        err = ("torn", exc.message, exc.where, exc.offset)
    except AuditCorrupted as exc:
        err = ("corrupt", exc.message, exc.where)
    return (*err, state.size, state.chain, state.tree.root())


def _fast(buf: bytes, state: ChainState) -> int:
    return check(buf, SegmentName(0, 1), "s", state)


def test_fast_checker_agrees_with_the_reference_on_random_corruptions() -> None:
    rng = random.Random(6)
    payloads = [rng.randbytes(rng.randrange(1, 60)) for _ in range(40)]
    # old-format events (no commit frames): the framing checks alone
    good, _, _ = encode_events(1, 0, 0, ZERO_HASH, payloads, version=LEGACY_VERSION)
    assert _outcome(_fast, good) == _outcome(_reference_check, good)
    assert _outcome(_fast, good)[0] == "ok"
    kinds = {"ok": 0, "torn": 0, "corrupt": 0}
    for _ in range(400):
        buf = bytearray(good)
        action = rng.randrange(6)
        at = rng.randrange(len(buf))
        if action == 0:  # flip one byte anywhere (header, payload, padding)
            buf[at] ^= 1 << rng.randrange(8)
        elif action == 1:  # truncate
            del buf[at:]
        elif action == 2:  # zero a 512-byte "sector"
            buf[at : at + 512] = bytes(len(buf[at : at + 512]))
        elif action == 3:  # garbage tail
            buf[at:] = rng.randbytes(rng.randrange(1, 300))
        elif action == 4:  # tamper inside one frame and fix its CRC: chain/index must catch it
            frame = (at // 8) * 8
            while frame >= 0 and int.from_bytes(buf[frame : frame + 4], "little") != MAGIC:
                frame -= 8
            length = int.from_bytes(buf[frame + 4 : frame + 8], "little")
            pos = frame + 12 + rng.randrange(HEADER_SIZE - 12 + length)
            buf[pos] ^= 1 << rng.randrange(8)
            fixed = crc32c(bytes(buf[frame + 12 : frame + HEADER_SIZE + length]))
            buf[frame + 8 : frame + 12] = fixed.to_bytes(4, "little")
        else:  # a length field past the end, or beyond the frame limit
            frame = (at // 8) * 8
            while frame >= 0 and int.from_bytes(buf[frame : frame + 4], "little") != MAGIC:
                frame -= 8
            length = rng.choice([MAX_PAYLOAD + 1, len(buf), 1 << 31])
            buf[frame + 4 : frame + 8] = length.to_bytes(4, "little")
        got, want = _outcome(_fast, bytes(buf)), _outcome(_reference_check, bytes(buf))
        if str(want[1]).startswith("not an event"):  # check() says more (which header rule broke); same place
            got = (got[0], want[1], *got[2:])
        assert got == want, (action, at)
        kinds[str(got[0])] += 1
    assert all(kinds.values()), kinds  # every kind of outcome was exercised


def test_fast_checker_names_each_framing_failure() -> None:
    frame, _, _ = encode_frame(EVENT, 1, 0, 0, ZERO_HASH, b'{"a":1}')
    cases = {
        "no frame here (bad magic)": b"X" + frame[1:],
        "frame length runs past the end of the file": frame[:4] + (1 << 30).to_bytes(4, "little") + frame[8:],
        "CRC-32C mismatch": frame[:-9] + b"!" + frame[-8:],
        "frame padding cut off": frame[:-1],
        "partial frame header": frame[:40],
    }
    for message, buf in cases.items():
        with pytest.raises(TornFrame) as err:
            check(buf, SegmentName(0, 1), "s", ChainState())
        assert err.value.message.startswith(message) and err.value.offset == 0


def test_segments_of_a_real_log_pass_both_checkers(tmp_path: Path) -> None:
    """Sanity: the reference checker accepts the event frames a real log wrote."""
    payloads = [record(i).canonical() for i in range(20)]
    frames, _, chain = encode_events(1, 0, 0, ZERO_HASH, payloads, version=LEGACY_VERSION)
    state = ChainState()
    assert _reference_check(frames, state) == len(frames) and state.chain == chain
    assert list_segments(tmp_path) == []
