"""Export formats, filters, multi-node merge, and the ``agency audit`` commands."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from middleware.audit.export import ExportFilter, cef_ext, cef_header, export, iter_records
from middleware.audit.verify import record_line_prefix, verify_path
from middleware.cli import main
from middleware.errors import AuditCorrupted, InvalidInput

from .helpers import SIGNER, append_batch, open_log, record, segments


async def _two_nodes(root: Path) -> None:
    a, b = open_log(root, "node-a"), open_log(root, "node-b")
    for k in range(4):  # interleave in time
        await append_batch(a, 10 * k, 3)
        await append_batch(b, 100 + 10 * k, 2)
    await a.append(record(7, event_type="failure.event", outcome="failure", detail={"why": "a|b=c\\d\nx"}))
    await a.close()
    await b.close()


def _export(root: Path, fmt: str, flt: ExportFilter | None = None) -> bytes:
    out = io.BytesIO()
    export(root, out, fmt, flt)
    return out.getvalue()


async def test_jsonl_merges_nodes_in_time_order_and_verifies(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)
    lines = _export(tmp_path, "jsonl").splitlines()
    head, logs = json.loads(lines[0]), [json.loads(x) for x in lines[1:3]]
    assert head["kind"] == "bundle" and head["complete"]
    assert {x["node"] for x in logs} == {"node-a", "node-b"}
    recs = [json.loads(x) for x in lines[3:]]
    assert len(recs) == 21
    times = [r["time_ns"] for r in recs]
    assert times == sorted(times)
    nodes = [r["node"] for r in recs]
    assert nodes[:5] == ["node-a"] * 3 + ["node-b"] * 2
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(b"\n".join(lines) + b"\n")
    verdict = verify_path(bundle, key=SIGNER.vkey)
    assert verdict.ok and [n.events for n in verdict.nodes] == [13, 8]


async def test_filters_select_records(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)

    def picked(flt: ExportFilter) -> list[dict]:
        lines = _export(tmp_path, "jsonl", flt).splitlines()
        return [json.loads(x)["record"] for x in lines if b'"kind":"record"' in x]

    assert {r["trace_id"] for r in picked(ExportFilter(trace_id="trace-1"))} == {"trace-1"}
    assert {r["goal_id"] for r in picked(ExportFilter(goal_id="goal-0"))} == {"goal-0"}
    assert {r["actors"]["agent"] for r in picked(ExportFilter(agent="agent-2"))} == {"agent-2"}
    assert [r["detail"]["why"] for r in picked(ExportFilter(event_types=frozenset({"failure.event"})))] == [
        "a|b=c\\d\nx"
    ]
    now = datetime.now(UTC)
    assert len(picked(ExportFilter(since=now - timedelta(hours=1)))) == 21
    assert picked(ExportFilter(until=now - timedelta(hours=1))) == []
    with pytest.raises(InvalidInput, match="until"):
        ExportFilter(since=now, until=now - timedelta(seconds=1))
    with pytest.raises(InvalidInput, match="since"):
        ExportFilter(since=datetime(2026, 1, 1))


async def test_csv_has_one_row_per_record(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)
    rows = list(csv.DictReader(io.StringIO(_export(tmp_path, "csv").decode())))
    assert len(rows) == 21
    fail = next(r for r in rows if r["event_type"] == "failure.event")
    assert fail["node"] == "node-a" and fail["outcome"] == "failure"
    assert json.loads(fail["detail"]) == {"why": "a|b=c\\d\nx"}


async def test_cef_lines_are_escaped(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)
    lines = _export(tmp_path, "cef").decode().splitlines()
    assert len(lines) == 21 and all(x.startswith("CEF:0|Agency|Agency Middleware|") for x in lines)
    fail = next(x for x in lines if "|failure.event|" in x)
    assert fail.split("|")[6] == "7"  # severity
    assert "dvchost=node-a" in fail
    assert 'msg={"why": "a|b\\=c\\\\\\\\d\\\\nx"}' in fail
    assert cef_header("a|b\\c\nd") == "a\\|b\\\\c d"
    assert cef_ext("k=v\\x\r\ny") == "k\\=v\\\\x\\ny"


async def test_ocsf_events_carry_the_required_fields(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)
    events = [json.loads(x) for x in _export(tmp_path, "ocsf").splitlines()]
    assert len(events) == 21
    for e in events:
        assert (e["class_uid"], e["category_uid"], e["type_uid"]) == (6003, 6, 600399)
        assert e["activity_id"] == 99 and e["severity_id"] in {1, 3, 4}
        assert isinstance(e["time"], int)
        assert e["metadata"]["version"] == "1.8.0" and e["metadata"]["product"]["name"]
        assert e["actor"]["user"]["name"] == "u1" and e["api"]["operation"] and e["src_endpoint"]["hostname"]
    fail = next(e for e in events if e["api"]["operation"] == "failure.event")
    assert fail["status_id"] == 2 and fail["severity_id"] == 4


async def test_export_refuses_a_log_that_does_not_verify(tmp_path: Path) -> None:
    await _two_nodes(tmp_path)
    seg = segments(tmp_path / "node-b")[0]
    data = bytearray(seg.read_bytes())
    data[200] ^= 1
    seg.write_bytes(bytes(data))
    with pytest.raises(AuditCorrupted, match="node-b"):
        _export(tmp_path, "csv")


# ---------------------------------------------------------------- CLI


async def test_cli_export_verify_checkpoint_prove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await _two_nodes(tmp_path)
    key = tmp_path / "published.vkey"
    key.write_text(SIGNER.vkey)
    bundle = tmp_path / "out.jsonl"
    run = lambda *a: asyncio.to_thread(main, list(a))  # noqa: E731
    assert await run("audit", "export", str(tmp_path), "--output", str(bundle), "--key", str(key)) == 0
    assert await run("audit", "verify", str(bundle), "--key", str(key)) == 0
    assert await run("audit", "verify", str(tmp_path), "--key", str(key)) == 0
    out = capsys.readouterr().out
    assert out.count("VERIFIED") == 2 and "OK   node-a: 13 events" in out
    assert (
        await run("audit", "export", str(tmp_path), "--format", "csv", "--event-type", "failure.event") == 0
    )
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert await run("audit", "checkpoint", str(tmp_path)) == 0
    assert "agency-middleware/audit/node-a\n13\n" in capsys.readouterr().out
    assert await run("audit", "prove", str(tmp_path), "--node", "node-a", "--index", "3") == 0
    proof = json.loads(capsys.readouterr().out)
    assert proof["tree_size"] == 13 and proof["inclusion_proof"]
    assert await run("audit", "prove", str(tmp_path), "--index", "3") == 2  # two nodes: which?
    assert "--node" in capsys.readouterr().err
    # tamper: exit status 1 and the first bad record
    lines = bundle.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"outcome":"success"', b'"outcome":"refused"')
    bundle.write_bytes(b"".join(lines))
    assert await run("audit", "verify", str(bundle), "--key", str(key)) == 1
    err = capsys.readouterr().err
    assert "VERIFICATION FAILED" in err and "first bad record" in err


async def test_read_only_reader_merges_nodes(tmp_path: Path) -> None:
    from middleware.audit import AuditLog
    from middleware.audit.wal_reader import WalLogReader, is_wal_directory
    from middleware.errors import AuditError

    await _two_nodes(tmp_path)
    assert is_wal_directory(tmp_path) and not is_wal_directory(tmp_path / "missing")
    reader = WalLogReader(tmp_path)
    assert isinstance(reader, AuditLog)
    got = list(reader.records())
    assert len(got) == 21 and {r.node for _, r in got} == {"n1"}
    with pytest.raises(AuditError, match="read-only"):
        await reader.append(record(1))


async def test_single_node_fast_path_writes_the_generic_bundle_lines(tmp_path: Path) -> None:
    node = 'n0,"é'  # a name that needs JSON escaping and contains the digits of an index
    log = open_log(tmp_path, node, segment_bytes=4096, checkpoint_every=7)
    for k in range(6):
        await append_batch(log, 10 * k, 5)
    await log.close()
    assert len(segments(tmp_path / node)) > 1
    out = io.BytesIO()
    summary = export(tmp_path, out, "jsonl")
    lines = out.getvalue().splitlines()
    _, records = iter_records(tmp_path)
    want = [record_line_prefix(r.node, r.index, r.time_ns, None) + r.raw + b"}" for r in records]
    assert lines[2:] == want and summary.records == 30
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(out.getvalue())
    verdict = verify_path(bundle, key=SIGNER.vkey)
    assert verdict.ok and verdict.nodes[0].events == 30


async def test_fast_path_reports_progress_across_segments(tmp_path: Path) -> None:
    # Segments that rotate mid-chunk (not at multiples of 1,000 records) must not stall the ticks.
    log = open_log(tmp_path, segment_bytes=1 << 20, checkpoint_every=777, fsync="interval")
    for k in range(75):  # batches of 333: segments end at odd record counts
        await append_batch(log, 333 * k, 333 + (k == 74) * 25)
    await log.close()
    assert len(segments(tmp_path / "n1")) >= 3
    seen: list[tuple[int, int]] = []
    summary = export(tmp_path, io.BytesIO(), "jsonl", progress=lambda done, total: seen.append((done, total)))
    assert summary.records == 25_000
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (25_000, 25_000)
    assert len(seen) >= 3  # ticks every ~10,000 records, not only at the end


async def test_logs_of_replicas_on_separate_volumes_export_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each gateway writes its own audit directory; one export merges them, and one bundle verifies."""
    vol_a, vol_b = tmp_path / "gw-a" / "audit", tmp_path / "gw-b" / "audit"
    a, b = open_log(vol_a, "node-a"), open_log(vol_b, "node-b")
    for k in range(3):
        await append_batch(a, 10 * k, 2)
        await append_batch(b, 100 + 10 * k, 2)
    await a.close()
    await b.close()
    bundle = tmp_path / "both.jsonl"
    argv = ["audit", "export", str(vol_a), str(vol_b / "node-b"), "--output", str(bundle)]
    assert await asyncio.to_thread(main, argv) == 0
    recs = [json.loads(x) for x in bundle.read_bytes().splitlines() if b'"kind":"record"' in x]
    assert {r["node"] for r in recs} == {"node-a", "node-b"} and len(recs) == 12
    assert [r["time_ns"] for r in recs] == sorted(r["time_ns"] for r in recs)
    assert verify_path(bundle, key=SIGNER.vkey).ok
    # the same node twice (a live log and its backup, say) would duplicate records: refused
    argv = ["audit", "export", str(vol_a), str(vol_a / "node-a"), "--output", str(tmp_path / "x.jsonl")]
    assert await asyncio.to_thread(main, argv) == 2
    assert "node node-a is both" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists(), "nothing half-written"


async def test_a_partial_bundle_of_a_log_first_closed_empty_verifies(tmp_path: Path) -> None:
    """The first checkpoint of a log closed empty has size 0: no consistency proof from it
    (RFC 9162 §2.1.4), and the bundle still verifies."""
    empty = open_log(tmp_path, "node-a")
    await empty.close()  # signs a checkpoint of size 0
    log = open_log(tmp_path, "node-a", checkpoint_every=3)
    await append_batch(log, 0, 7)
    await log.close()
    out = _export(tmp_path, "jsonl", ExportFilter(trace_id="trace-1"))
    node = json.loads(out.splitlines()[1])
    assert len(node["checkpoints"]) >= 2 and node["consistency"][0] == []
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(out)
    assert verify_path(bundle, key=SIGNER.vkey).ok
