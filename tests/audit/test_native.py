"""The compiled part of the audit log (``middleware.audit._native``) agrees with the pure Python.

Every function of ``_native.c`` is compared with the Python it replaces, on the same inputs:
frames (``encode_events``, ``encode_batch``), leaf and chain hashes, CRC-32C (the SSE4.2
instruction and the table), the Merkle reduction (roots and proofs), and ``segment.check`` on
whole segments, intact and corrupted at random: the same verdict (exception, message, place)
and the same state after it. Skipped when the extension is not built or pure Python is forced
(``AGENCY_PURE_PYTHON=1``: ``make test`` runs the suite that way too).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middleware.audit import merkle, segment
from middleware.audit.checkpoint import origin_for
from middleware.audit.merkle import MerkleTree, leaf_hash
from middleware.audit.native import NATIVE, pure_python_forced
from middleware.audit.record import AuditRecord, canonical_json, fast_canonical_json, plain_record
from middleware.audit.segment import (
    CHECKPOINT,
    HEADER,
    HEADER_SIZE,
    LEGACY_VERSION,
    SEAL,
    SEGMENT,
    VERSION,
    ZERO_HASH,
    ChainState,
    SegmentName,
    check,
    crc32c,
    encode_frame,
)
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, record

pytestmark = pytest.mark.skipif(
    NATIVE is None, reason="compiled part not built, or AGENCY_PURE_PYTHON set (pure Python only)"
)

ORIGIN = origin_for("n1")
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def pure(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's segment and merkle code runs as pure Python."""
    monkeypatch.setattr(segment, "_NATIVE", None)
    monkeypatch.setattr(merkle, "_NATIVE", None)


def test_the_environment_forces_pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENCY_PURE_PYTHON", "1")
    assert pure_python_forced()
    monkeypatch.setenv("AGENCY_PURE_PYTHON", "0")
    assert not pure_python_forced()


def test_crc32c_check_value_both_ways() -> None:
    assert NATIVE is not None
    assert NATIVE.crc32c(b"123456789") == 0xE3069283
    assert NATIVE.crc32c_table(b"123456789") == 0xE3069283
    assert segment.crc32c(b"123456789") == 0xE3069283
    assert NATIVE.crc32c(b"") == 0


@given(st.binary(max_size=2000), st.integers(0, 2**32 - 1), st.integers(0, 2000))
@SLOW
def test_crc32c_instruction_table_and_package_agree(data: bytes, value: int, cut: int) -> None:
    assert NATIVE is not None
    want = segment.crc32c(data, value)
    assert NATIVE.crc32c(data, value) == want
    assert NATIVE.crc32c_table(data, value) == want
    # continuing a CRC over a split is the CRC of the whole, unaligned starts included
    head, tail = data[:cut], data[cut:]
    assert NATIVE.crc32c(tail, NATIVE.crc32c(head)) == segment.crc32c(data)
    assert NATIVE.crc32c(memoryview(data)[1:]) == segment.crc32c(data[1:])


_payloads = st.lists(st.binary(max_size=700), max_size=40)
_u64 = st.integers(0, 2**64 - 1)


@given(
    _payloads,
    st.integers(1, 2**63),
    _u64,
    _u64,
    st.binary(min_size=32, max_size=32),
    st.sampled_from([VERSION, LEGACY_VERSION]),
    st.booleans(),
)
@SLOW
def test_encode_events_is_byte_identical(
    payloads: list[bytes], first: int, synced: int, ts: int, prev: bytes, version: int, give: bool
) -> None:
    leaves = [leaf_hash(p) for p in payloads] if give else None
    want = segment._encode_events_py(first, synced, ts, prev, payloads, leaves=leaves, version=version)
    got = segment.encode_events(first, synced, ts, prev, payloads, leaves=leaves, version=version)
    assert got == want
    assert NATIVE is not None
    frames, packed, chain = NATIVE.encode_events(first, synced, ts, prev, payloads, None, version)
    assert (frames, packed, chain) == (want[0], b"".join(want[1]), want[2])
    packed2, digest = NATIVE.leaf_hashes(payloads)
    assert packed2 == b"".join(want[1])
    assert digest == segment._sha256(packed2).digest()


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=30), st.integers(1, 2**40), _u64)
@SLOW
def test_encode_batch_is_byte_identical(ids: list[int], first: int, ts: int) -> None:
    payloads = [record(i).canonical() for i in ids]
    state = ChainState(origin=ORIGIN)
    prev = leaf_hash(str(first).encode())
    want = segment._encode_batch_py(first, 7, ts, prev, payloads, state=state, sign=SIGNER.sign_bytes)
    got = segment.encode_batch(first, 7, ts, prev, payloads, state=state, sign=SIGNER.sign_bytes)
    assert got == want
    packed = segment.encode_batch_packed(first, 7, ts, prev, payloads, state=state, sign=SIGNER.sign_bytes)
    assert packed == (want[0], b"".join(want[1]), want[2])


@given(st.integers(0, 600), st.integers(0, 10), st.randoms(use_true_random=False))
@SLOW
def test_reduce_is_byte_identical(count: int, levels: int, rnd: random.Random) -> None:
    hashes = rnd.randbytes(32 * count)  # odd counts too: a last lone hash is hashed as merkle does
    assert NATIVE is not None
    assert NATIVE.reduce(hashes, levels) == merkle._reduce_py(hashes, levels)


@pytest.mark.parametrize("cached_from", [1, 3, 8])
def test_merkle_roots_and_proofs_match_pure_python(cached_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(cached_from)
    leaves = [rng.randbytes(32) for _ in range(1500)]
    native_tree = MerkleTree(cached_from=cached_from)
    chunks = []
    at = 0
    while at < len(leaves):  # grown in uneven steps, as batches and checkpoints grow it
        step = rng.choice([1, 2, 7, 64, 255, 256, 300])
        chunks.append(leaves[at : at + step])
        at += step
    for chunk in chunks:
        native_tree.extend(chunk)
    monkeypatch.setattr(merkle, "_NATIVE", None)
    pure_tree = MerkleTree(cached_from=cached_from)
    for chunk in chunks:
        pure_tree.extend(chunk)
    for size in [0, 1, 2, 3, 255, 256, 257, 511, 512, 1000, 1500, *rng.sample(range(1, 1501), 20)]:
        assert native_tree.root(size) == pure_tree.root(size)
        if size:
            i = rng.randrange(size)
            assert native_tree.inclusion_proof(i, size) == pure_tree.inclusion_proof(i, size)
            old = rng.randint(1, size)
            assert native_tree.consistency_proof(old, size) == pure_tree.consistency_proof(old, size)


# ---------------------------------------------------------------------- segment.check


def _segment(rng: random.Random, *, malformed: bool = True) -> bytes:
    """A random segment: header, batches (some records malformed), checkpoints, maybe a seal."""
    state = ChainState(origin=ORIGIN)
    tree = MerkleTree()
    header = canonical_json({"seq": 0, "first_index": 1, "origin": ORIGIN, "node": "n1"})
    frame, _, chain = encode_frame(SEGMENT, 0, 0, 1, ZERO_HASH, header)
    parts = [frame]
    size, ts = 0, 10
    for _ in range(rng.randint(0, 8)):
        payloads = []
        for _ in range(rng.randint(1, 12)):
            roll = rng.random()
            if malformed and roll < 0.005:
                payloads.append(b"not json")
            elif malformed and roll < 0.01:
                payloads.append(b'{"event_type":""}')
            else:
                payloads.append(record(size + len(payloads), detail={"k": rng.random()}).canonical())
        ts += 1
        frames, leaves, chain = segment._encode_batch_py(
            size + 1, 0, ts, chain, payloads, state=state, sign=SIGNER.sign_bytes
        )
        parts.append(frames)
        tree.extend(leaves)
        size += len(payloads)
        if rng.random() < 0.4:
            cp = SIGNER.sign(ORIGIN, size, tree.root())
            frame, _, chain = encode_frame(CHECKPOINT, size, 0, ts, chain, cp.note.encode())
            parts.append(frame)
    if rng.random() < 0.5:
        frame, _, chain = encode_frame(SEAL, size, 0, ts, chain, b'{"sealed":true}')
        parts.append(frame)
    return b"".join(parts)


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(offset, end with padding) of each frame of an intact segment."""
    out, off = [], 0
    while off + HEADER_SIZE <= len(data):
        end = off + HEADER_SIZE + HEADER.unpack_from(data, off)[1]
        out.append((off, end + (-end % 8)))
        off = out[-1][1]
    return out


def _damage(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    how = rng.randrange(8)
    if how == 0 or not buf:
        return bytes(buf)
    frames = _frames(data)
    if how >= 6 and len(frames) > 2:
        i, j = sorted(rng.sample(range(1, len(frames)), 2))
        (a, b), (c, d) = frames[i], frames[j]
        if how == 6:  # two whole frames swapped, each still readable: chain and index errors
            return data[:a] + data[c:d] + data[b:c] + data[a:b] + data[d:]
        # a payload byte changed and the frame's CRC made right again: only the chain tells
        if b - a > HEADER_SIZE:
            at = rng.randrange(a + HEADER_SIZE, b)
            buf[at] ^= 0x20
            length = HEADER.unpack_from(buf, a)[1]
            buf[a + 8 : a + 12] = crc32c(bytes(buf[a + 12 : a + HEADER_SIZE + length])).to_bytes(4, "little")
        return bytes(buf)
    at = rng.randrange(len(buf))
    if how == 1:
        buf[at] ^= 1 << rng.randrange(8)
    elif how == 2:
        del buf[at:]
    elif how == 3:
        buf[at : at + 512] = bytes(len(buf[at : at + 512]))
    elif how == 4:
        buf += rng.randbytes(rng.randint(1, 200))
    else:  # a whole frame's bytes moved elsewhere: chain and index errors
        chunk = buf[at : at + rng.randint(8, 400)]
        del buf[at : at + len(chunk)]
        to = rng.randrange(len(buf) + 1)
        buf[to:to] = chunk
    return bytes(buf)


@dataclass
class Outcome:
    error: tuple[str, str, str, Any] | None
    end: int | None
    state: tuple[Any, ...]
    frames: list[tuple[int, int, int, int, int]]


def _check(data: bytes, *, records: bool) -> Outcome:
    state = ChainState(verifier=SIGNER.verifier(), check_records=records)
    frames: list[tuple[int, int, int, int, int]] = []
    error, end = None, None
    try:
        end = check(data, SegmentName(0, 1), "seg", state, frames)
    except AuditCorrupted as exc:
        error = (type(exc).__name__, exc.message, exc.where, getattr(exc, "offset", None))
    return Outcome(
        error,
        end,
        (
            state.chain,
            state.size,
            state.tree.size,
            state.tree.root(),
            state.last_time_ns,
            state.sealed,
            state.v2,
            state.commits,
            [cp.note for cp in state.checkpoints],
            state.legacy_last,
            state.origin,
        ),
        frames,
    )


@pytest.mark.parametrize("seed", range(200))
def test_check_gives_the_same_verdict_and_state_on_damaged_segments(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    data = _segment(rng)
    for _ in range(8):
        damaged = _damage(data, rng)
        records = rng.random() < 0.7
        native = _check(damaged, records=records)
        with monkeypatch.context() as m:
            m.setattr(segment, "_NATIVE", None)
            m.setattr(merkle, "_NATIVE", None)
            pure = _check(damaged, records=records)
        assert native == pure


def test_check_of_an_intact_segment_takes_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _segment(random.Random(7), malformed=False)
    assert NATIVE is not None
    taken: list[int] = []

    def counting(fn: Any) -> Any:
        def call(*args: Any) -> Any:
            got = fn(*args)
            taken.append(got[2] - args[3])  # events taken: the count after minus before
            return got

        return staticmethod(call)

    fake = type(
        "N", (), {"scan_events": counting(NATIVE.scan_events), "scan_batches": counting(NATIVE.scan_batches)}
    )()
    monkeypatch.setattr(segment, "_NATIVE", fake)
    for records in (False, True):
        taken.clear()
        outcome = _check(data, records=records)
        assert outcome.error is None
        assert outcome.state[1] > 0
        assert sum(taken) == outcome.state[1]  # every event went through compiled code


def test_pure_fixture_really_is_pure(pure: None) -> None:
    assert segment._NATIVE is None and merkle._NATIVE is None


# ---------------------------------------------------------------------- the record check in C

_validate_json = AuditRecord.__pydantic_validator__.validate_json


def _pydantic_accepts(payload: bytes) -> bool:
    try:
        _validate_json(payload)
    except ValueError:
        return False
    return True


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_name = st.text(max_size=70)


@given(
    st.dictionaries(st.text(max_size=10), _json, max_size=6),
    _name,
    _name,
    _name,
    st.text(max_size=130),
    st.booleans(),
)
@SLOW
def test_the_c_record_check_vouches_only_for_what_pydantic_accepts(
    detail: dict[str, Any], event_type: str, component: str, agent: str, node: str, tenant: bool
) -> None:
    raw = plain_record("x", node="n1", agent=agent, detail=detail)
    raw["event_type"], raw["component"], raw["node"] = event_type, component, node
    if tenant:
        raw["actors"]["tenant"] = "t1"
    payload = fast_canonical_json(raw)
    assert NATIVE is not None
    ok = NATIVE.record_ok(payload)
    assert not ok or _pydantic_accepts(payload)
    if 1 <= len(event_type) <= 64 and len(component) <= 64 and len(node) <= 128 and not detail:
        assert ok == _pydantic_accepts(payload)  # plain strings: vouched for whenever valid


_TOKENS = [
    b'"', b"\\", b"\\u0000", b"\\ud800", b"\\uDFFF", b"\\x", b"1e999", b"-", b"01", b"1.", b".5", b",", b"}",
    b"{", b"]", b"[", b" ", b"\n", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80",
    b'"x":1,', b"true", b"nul", b"9" * 25, b"0000-", b"-02-30", b"T24:", b":60", b".1234567", b"+01:00",
]  # fmt: skip


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.sampled_from(_TOKENS)), max_size=4))
@settings(max_examples=1500, deadline=None)
def test_the_c_record_check_is_sound_on_damaged_records(edits: list[tuple[int, int, bytes]]) -> None:
    payload = bytearray(record(1, detail={"a": [1, 2.5, "é"], "b": {"c": None}}).canonical())
    for at, how, token in edits:
        at %= len(payload) + 1
        if how == 0:
            payload[at:at] = token
        elif how == 1:
            payload[at : at + len(token)] = token
        elif how == 2:
            del payload[at : at + len(token)]
        else:
            payload[at : at + 1] = bytes([token[0] ^ 0x20])
    data = bytes(payload)
    assert NATIVE is not None
    assert not NATIVE.record_ok(data) or _pydantic_accepts(data), data


@given(st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{0,8})?Z?\Z"))
@settings(max_examples=500, deadline=None)
def test_the_c_record_check_reads_times_as_pydantic_does(when: str) -> None:
    raw = plain_record("x", node="n1")
    raw["time"] = when
    payload = fast_canonical_json(raw)
    assert NATIVE is not None
    ok = NATIVE.record_ok(payload)
    assert not ok or _pydantic_accepts(payload), when
    if int(when[:4]) >= 1000 and _pydantic_accepts(payload) and when.endswith("Z") and len(when) <= 27:
        assert ok or (when[19:20] == "." and len(when) == 21), (
            when
        )  # "…:SS.Z" (no digits) is left to pydantic


def test_the_c_record_check_vouches_for_what_the_log_writes() -> None:
    assert NATIVE is not None
    for i in range(50):
        assert NATIVE.record_ok(record(i, detail={"i": i, "x": [1.5, None, True, "é\u2028"]}).canonical())
        assert NATIVE.record_ok(fast_canonical_json(plain_record("task.step", node="n1", detail={"k": i})))
    assert not NATIVE.record_ok(b'{"event_type":"x"}')  # valid, but not the full form: left to pydantic
    assert NATIVE.record_ok(record(1, event_type="é" * 64).canonical())
    assert not NATIVE.record_ok(
        record(1).canonical().replace(b'"agent.step"', b'"' + "é".encode() * 65 + b'"')
    )
