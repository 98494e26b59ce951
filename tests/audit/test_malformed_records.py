"""Malformed and hostile bytes in a log: always a verdict naming the record, never a traceback.

A record that is not an ``AuditRecord`` (an unknown field, a wrong type, not JSON) in an
otherwise intact log is ``VERIFICATION FAILED`` in ``agency audit verify`` and ``agency:
error:`` with exit status 2 in ``agency serve``; a record of a newer schema version is read
with the fields this release knows. The reader is fuzzed with mutated segments.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middleware.audit.record import AUDIT_SCHEMA_VERSION, parse_record, record_problem
from middleware.audit.segment import EVENT, encode_frame
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.cli import main as cli_main
from middleware.errors import AgencyError, AuditCorrupted

from .helpers import SIGNER, record, segments

pytestmark = pytest.mark.timeout(120)

UNKNOWN_FIELD = (
    b'{"actors":{"agent":"","session":"","user":""},"bogus":1,"component":"gateway","detail":{},'
    b'"event_id":"evt_x","event_type":"agent.step","goal_id":"","node":"n1","outcome":"",'
    b'"rule":"","schema_version":1,"task_id":"","time":"2026-01-01T00:00:00Z","trace_id":""}'
)


async def _write_raw(log: WalAuditLog, payloads: list[bytes]) -> None:
    """Append payloads as the log's own writer would (signed): a buggy or newer writer's records."""
    await log._stage(payloads)


def _log_with(root: Path, raw: bytes, *, node: str = "n1") -> WalAuditLog:
    async def build() -> WalAuditLog:
        log = WalAuditLog(root, node, options=WalOptions(checkpoint_interval=None))
        await log.append_batch([record(i) for i in range(3)])
        await _write_raw(log, [raw])
        await log.append(record(9))
        await log.close()
        return log

    return asyncio.run(build())


def _vkey(root: Path, node: str = "n1") -> str:
    return (root / node / "checkpoint.vkey").read_text().strip()


def _agency(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, str]:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    run_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "middleware", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=run_env,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_record_problem_names_the_field() -> None:
    assert record_problem(record(1).canonical()) is None
    assert "bogus" in (record_problem(UNKNOWN_FIELD) or "")
    assert "not a valid audit record" in (record_problem(b"[1,2]") or "")
    assert record_problem(b"\xff\xfe") is not None
    assert record_problem(b'{"event_type":3}') is not None


def test_a_record_of_a_newer_schema_is_read_with_the_known_fields() -> None:
    newer = record(1).model_dump(mode="json") | {
        "schema_version": AUDIT_SCHEMA_VERSION + 1,
        "sealed_fields": {"user": "k1"},
    }
    import orjson

    raw = orjson.dumps(newer, option=orjson.OPT_SORT_KEYS)
    assert record_problem(raw) is None
    assert parse_record(raw).event_type == "agent.step"
    with pytest.raises(AuditCorrupted, match="bogus"):
        parse_record(UNKNOWN_FIELD, where="here")


def test_verify_names_a_record_with_an_unknown_field(tmp_path: Path) -> None:
    root = tmp_path / "data" / "audit"
    _log_with(root, UNKNOWN_FIELD)
    code, out, err = _agency("audit", "verify", str(root), "--key", _vkey(root))
    assert code == 1, (out, err)
    assert "Traceback" not in out + err
    assert "VERIFICATION FAILED: record 4: not a valid audit record (bogus" in err
    assert "first bad record: " in err and ".wal" in err


def test_serve_refuses_a_log_with_a_malformed_record_with_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _log_with(data / "audit", UNKNOWN_FIELD)
    code, out, err = _agency(
        "serve",
        "--data-dir",
        str(data),
        "--address",
        "127.0.0.1:0",
        "--metrics-address",
        "",
        env={"AGENCY_NODE_ID": "n1"},
    )
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert "agency: error:" in err and "record 4: not a valid audit record" in err


def test_a_signed_newer_schema_record_verifies(tmp_path: Path) -> None:
    root = tmp_path / "audit"
    raw = (
        b'{"actors":{},"event_id":"e","event_type":"task.cancelled","future":{"x":1},'
        b'"schema_version":%d}' % (AUDIT_SCHEMA_VERSION + 1)
    )
    log = _log_with(root, raw)
    assert verify_path(root, key=log.vkey).ok
    reopened = WalAuditLog(root, "n1")
    try:
        assert [r.event_type for _, r in reopened.records()][3] == "task.cancelled"
    finally:
        asyncio.run(reopened.close())


# ---------------------------------------------------------------------- fuzzing


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small log over several sealed segments and an unsealed last one (a crash image)."""
    root = tmp_path_factory.mktemp("pristine") / "audit"

    async def build() -> None:
        log = WalAuditLog(
            root, "n1", signer=SIGNER, options=WalOptions(segment_bytes=4096, checkpoint_every=7)
        )
        for i in range(6):
            await log.append_batch([record(10 * i + k) for k in range(5)])
        await log.close()
        log = WalAuditLog(root, "n1", signer=SIGNER, options=WalOptions(segment_bytes=4096))
        await log.append_batch([record(100 + k) for k in range(4)])
        # no close: the copy below is what a crash leaves
        shutil.copytree(root, root.parent / "crashed", ignore=shutil.ignore_patterns("LOCK"))
        await log.close()

    asyncio.run(build())
    return root.parent / "crashed"


_MUTATIONS = st.sampled_from(["flip", "overwrite", "truncate", "insert", "append_frame", "zero"])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    segment=st.integers(min_value=0, max_value=100),
    position=st.integers(min_value=0, max_value=1 << 16),
    mutation=_MUTATIONS,
    junk=st.binary(min_size=1, max_size=80),
)
def test_mutated_segments_get_a_verdict_never_a_traceback(
    pristine: Path, segment: int, position: int, mutation: str, junk: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "audit"
        shutil.copytree(pristine, root)
        segs = segments(root / "n1")
        path = segs[segment % len(segs)]
        data = bytearray(path.read_bytes())
        pos = position % max(len(data), 1)
        if mutation == "flip":
            data[pos] ^= junk[0] or 1
        elif mutation == "overwrite":
            data[pos : pos + len(junk)] = junk
        elif mutation == "truncate":
            del data[pos:]
        elif mutation == "insert":
            data[pos:pos] = junk
        elif mutation == "zero":
            data[pos : pos + 512] = bytes(min(512, len(data) - pos))
        else:  # a well-formed frame with hostile content, chained to nothing in particular
            frame, _, _ = encode_frame(EVENT, 999, 0, 0, bytes(32), junk)
            data += frame
        path.write_bytes(bytes(data))
        vkey = SIGNER.vkey

        verdict = verify_path(root, key=vkey)  # a verdict, whatever the bytes
        for node in verdict.nodes:
            assert node.ok or node.error

        code = cli_main(["audit", "verify", str(root), "--key", vkey])
        assert code in (0, 1), code

        try:
            log = WalAuditLog(root, "n1", signer=SIGNER)
        except AgencyError:
            return
        try:
            for _ in log.records():
                pass
        finally:
            asyncio.run(log.close())
        assert verify_path(root, key=vkey).ok  # what the writer kept (and signed) verifies
