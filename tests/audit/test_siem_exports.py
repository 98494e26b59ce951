"""SIEM-ready exports: CEF lines a real CEF parser reads back (escaping round trips, 1,024-byte
policy), OCSF events valid against the vendored OCSF 1.8.0 JSON Schema, flat JSON Lines."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pycef
import pytest
from jsonschema import Draft202012Validator

from middleware import Agency
from middleware.audit.checkpoint import Signer
from middleware.audit.export import CEF_CUT, CEF_MAX_BYTES, cef_extensions, export, iter_records
from middleware.audit.record import Actors, AuditRecord
from middleware.audit.wal import WalAuditLog
from middleware.demo import build_demo_agency, refused_request, warranty_request

OCSF_SCHEMA = json.loads((Path(__file__).parent / "ocsf" / "api_activity-1.8.0.schema.json").read_text())

#: Values that need every CEF escape, and text that looks like CEF syntax.
TRICKY = "a=b \\ c|d\nnext line  two  spaces cs1=fake é"


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    """A node log with the reference scenario (every event type a task writes), a refusal,
    a gateway record with no actors, a record with tricky values and one with a huge detail."""
    root = tmp_path_factory.mktemp("audit")

    async def fill() -> None:
        async def no_sleep(_: float) -> None:
            return None

        audit = WalAuditLog(root, "n1", signer=Signer("siem-test"))
        agency = await build_demo_agency(Agency(audit=audit, sleep=no_sleep))
        await agency.submit(warranty_request())
        await agency.submit(refused_request())
        await audit.append(AuditRecord(event_type="gateway.started", node="n1", outcome="info"))
        await audit.append(
            AuditRecord(
                event_type="agent.step",
                node="n1",
                actors=Actors(user=TRICKY, agent="calc=1", session="s\\1"),
                trace_id="t" * 32,
                rule=TRICKY,
                outcome="success",
                detail={"text": TRICKY},
            )
        )
        await audit.append(
            AuditRecord(
                event_type="agent.step",
                node="n1",
                actors=Actors(user="u1", agent="big"),
                outcome="success",
                detail={"output": "x=y " * 2000, "note": "é" * 500},
            )
        )
        await agency.close()

    asyncio.run(fill())
    return root


def _export(path: Path, fmt: str) -> list[str]:
    out = io.BytesIO()
    export(path, out, fmt)
    return out.getvalue().decode().splitlines()


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def test_every_cef_line_parses_back_to_the_record(log_dir: Path) -> None:
    _, records = iter_records(log_dir)
    recs = list(records)
    lines = _export(log_dir, "cef")
    assert len(lines) == len(recs) > 20
    cut = 0
    for rec, line in zip(recs, lines, strict=True):
        assert len(line.encode()) <= CEF_MAX_BYTES, line[:200]
        parsed = pycef.parse(line)
        assert parsed is not None, line
        o = rec.obj()
        assert parsed["DeviceVendor"] == "Agency" and parsed["DeviceEventClassID"] == o["event_type"]
        assert "dvc" not in parsed  # dvc is an IPv4 address field: the node is dvchost
        assert parsed["dvchost"] == "n1" and parsed["index"] == str(rec.index)  # cn1, by its label
        expected = {k: str(v) for k, v in cef_extensions(rec).items()}
        truncated = set(_unescape(parsed["truncated"]).split(",")) if "truncated" in parsed else set()
        cut += bool(truncated)
        if o["actors"].get("agent") == "big":
            assert "msg" in truncated
        for key, value in expected.items():
            if key.endswith("Label"):
                continue
            label = expected.get(f"{key}Label")
            got = _unescape(parsed[label] if label else parsed[key])
            if key in truncated:
                assert got.endswith(CEF_CUT) and value.startswith(got[: -len(CEF_CUT)])
            else:
                assert got == value, (key, got, value)
        for empty in ("suser", "trace_id", "goal_id", "session", "msg"):  # absent values are left out
            assert parsed.get(empty, "x") != ""
    assert 1 <= cut < len(lines) // 2  # long ones are cut (the huge one and some demo steps)


def test_the_tricky_record_round_trips_exactly(log_dir: Path) -> None:
    line = next(x for x in _export(log_dir, "cef") if "calc\\=1" in x)
    parsed = pycef.parse(line)
    assert _unescape(parsed["suser"]) == TRICKY
    assert _unescape(parsed["rule"]) == TRICKY
    assert _unescape(parsed["agent"]) == "calc=1"
    assert _unescape(parsed["session"]) == "s\\1"
    assert json.loads(_unescape(parsed["msg"])) == {"text": TRICKY}


def _empty_strings(value: Any, path: str = "") -> list[str]:
    if value == "":
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _empty_strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _empty_strings(v, f"{path}[{i}]")]
    return []


def test_every_ocsf_event_is_valid_against_the_ocsf_schema(log_dir: Path) -> None:
    validator = Draft202012Validator(OCSF_SCHEMA)
    events = [json.loads(x) for x in _export(log_dir, "ocsf")]
    types = {e["activity_name"] for e in events}
    assert {"task.submitted", "agent.step", "failure.event", "gateway.started"} <= types, types
    for event in events:
        errors = sorted(validator.iter_errors(event), key=str)
        assert not errors, (event["activity_name"], [f"{list(e.path)}: {e.message}" for e in errors[:3]])
        assert _empty_strings(event) == [], event["activity_name"]
    bare = next(e for e in events if e["activity_name"] == "gateway.started")
    assert bare["actor"] == {"app_name": "Agency Middleware"} and "correlation_uid" not in bare["metadata"]


def test_the_schema_check_can_fail() -> None:
    validator = Draft202012Validator(OCSF_SCHEMA)
    assert list(validator.iter_errors({"class_uid": 6003, "actor": {"user": {"name": ""}, "nope": 1}}))


def test_flat_jsonl_is_one_record_object_per_line(log_dir: Path) -> None:
    _, records = iter_records(log_dir)
    recs = list(records)
    lines = [json.loads(x) for x in _export(log_dir, "jsonl-flat")]
    assert len(lines) == len(recs)
    for rec, line in zip(recs, lines, strict=True):
        assert line.pop("log_node") == "n1" and line.pop("log_index") == rec.index
        assert line == rec.obj()


#: Every event type the product writes (grep the sources for ``event_type``), with the outcomes
#: that change the severity and status mappings.
EVENT_TYPES = [
    "agent.circuit", "agent.dispatch", "agent.handoff", "agent.result", "agent.step", "agent.turn",
    "audit.retention", "catalog.change", "contract.review", "failure.event", "failure.quarantine",
    "failure.resolution", "goal.anchored", "goal.verification", "human.handover", "message.accepted",
    "message.acked", "message.dead_lettered", "message.duplicate", "message.expired", "message.forged",
    "message.lost", "message.rejected", "plan.accepted", "plan.proposed", "plan.refused", "plan.skipped",
    "policy.resolution", "routing.decision", "routing.refused",
    "task.completed", "task.interrupted", "task.resumed", "task.submitted", "task.transition",
]  # fmt: skip


@pytest.mark.parametrize("outcome", ["success", "failure", "rejected", "info", ""])
def test_every_event_type_exports_valid_ocsf_and_parseable_cef(tmp_path: Path, outcome: str) -> None:
    async def fill() -> None:
        log = WalAuditLog(tmp_path, "n1", signer=Signer("siem-test"))
        for i, etype in enumerate(EVENT_TYPES):
            actors = Actors(user="u1", agent="a@1.0.0", session="s1") if i % 2 else Actors()
            await log.append(
                AuditRecord(
                    event_type=etype, node="n1", actors=actors, outcome=outcome, trace_id="t" * (i % 3)
                )
            )
        await log.close()

    asyncio.run(fill())
    validator = Draft202012Validator(OCSF_SCHEMA)
    events = [json.loads(x) for x in _export(tmp_path, "ocsf")]
    assert [e["activity_name"] for e in events] == EVENT_TYPES
    for event in events:
        assert not list(validator.iter_errors(event)), event
        assert _empty_strings(event) == []
    for line, etype in zip(_export(tmp_path, "cef"), EVENT_TYPES, strict=True):
        parsed = pycef.parse(line)
        assert parsed is not None and parsed["DeviceEventClassID"] == etype


def test_the_cef_line_limit_can_be_raised_for_collectors_that_take_more(log_dir: Path, capsys) -> None:
    from middleware.cli import main
    from middleware.errors import InvalidInput

    default = _export(log_dir, "cef")
    cut_by_default = sum("Label=truncated" in x for x in default)
    for limit, cut_at_most in ((2048, cut_by_default - 1), (1 << 16, 0)):  # a TCP or TLS collector's
        out = io.BytesIO()
        export(log_dir, out, "cef", cef_max_bytes=limit)
        lines = out.getvalue().decode().splitlines()
        assert len(lines) == len(default) and all(len(x.encode()) <= limit for x in lines)
        assert all(pycef.parse(x) is not None for x in lines)
        assert sum("Label=truncated" in x for x in lines) <= cut_at_most
    for bad, fmt in ((512, "cef"), (4096, "jsonl")):
        with pytest.raises(InvalidInput) as info:
            export(log_dir, io.BytesIO(), fmt, cef_max_bytes=bad)
        assert info.value.field == "cef_max_bytes"
    argv = ["audit", "export", str(log_dir), "--format", "cef", "--cef-max-bytes", "65536", "--no-progress"]
    assert main(argv) == 0
    assert max(len(x.encode()) for x in capsys.readouterr().out.splitlines()) > CEF_MAX_BYTES
    assert main(["audit", "export", str(log_dir), "--cef-max-bytes", "4096", "--no-progress"]) == 2
