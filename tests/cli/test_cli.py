"""The ``agency`` command line: demo, serve (a real process, stopped with SIGTERM), help."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from datetime import date, timedelta
from pathlib import Path

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.compression import read_segment
from middleware.cli import main
from middleware.cli.demo import run_demo
from middleware.demo import clock_on

#: Days the demo is told on: month ends, a leap day, the year's end and start, an ordinary day.
DEMO_DAYS = [
    "2026-01-31",
    "2026-02-28",
    "2026-03-31",
    "2026-04-30",
    "2026-11-30",
    "2026-12-01",
    "2026-12-31",
    "2027-01-01",
    "2028-02-29",
    "2028-03-01",
    "2026-06-15",
]


@pytest.mark.parametrize("today", DEMO_DAYS)
async def test_demo_tells_the_story_and_writes_the_audit_log(tmp_path, today):
    out = io.StringIO()
    assert await run_demo(tmp_path, out=out, clock=clock_on(date.fromisoformat(today))) == 0
    text = out.getvalue()
    happy = text.split("== 2.")[0]
    assert "Goal anchored: GOAL_WARRANTY_001 by greeting_agent@1.0.0" in happy
    assert '"device_model": "PhoneX", "fault_type": "screen_shattered"' in happy  # the extracted context
    assert "chose warranty_agent@2.1.0" in happy
    # the routing score explained by its parts
    assert "score 0.782 = (0.4×SLO term 0.455 [SLO 1200 ms] + 0.4×success 1.000" in happy
    # the SMF metadata of each hop, with the computed reliability and the agent's claim beside it
    # the order system and the user agree on the purchase date (one week ago) on every day
    assert "warranty_db reliability 0.975 (authority 0.95, recency 1.00, consistency 1.00" in happy
    bought = (date.fromisoformat(today) - timedelta(days=7)).isoformat()
    assert f"[PASS] 检查用户是否在保修期内（购机≤12个月） (actual: {bought})" in happy
    assert "agent claimed 0.98" in happy and "freshness_ttl 3600 s (logistics)" in happy
    assert happy.count("TOOL_TIMEOUT on replacement_shipper@1.0.0") == 3
    assert "use_backup" in happy and "express_shipper@1.0.0" in happy
    assert happy.count("[PASS]") == 3 and "[FAIL]" not in happy  # the seed's three sentences
    assert "Reply: 您好，您的PhoneX屏幕更换申请已受理" in happy
    assert "Context carried over from session s_demo" in text
    # the failing claims fail the goal, explained, with a suggested reply in Chinese
    assert "[FAIL] 确认故障类型为屏幕碎裂且非人为损坏" in text
    assert "ago, more than 12 months" in text
    assert text.count("GOAL FAILED: waiting for a person") == 2
    assert "Suggested reply: 您好" in text
    # a freight quote for a replacement goal is intent drift, refused before the logistics agent
    # runs; the §4.4 measures close the story
    assert (
        "INTENT_DRIFT before dispatch (no agent ran)" in text and "INTENT DRIFT: waiting for a person" in text
    )
    assert "[freight] done by" not in text
    assert "Intent-drift rate:        16.7% (1/6)" in text
    assert "First-contact resolution: 33.3% (2/6)" in text
    assert "COMPLETED" in text
    assert "contract says it cannot do stock_prediction" in text
    assert "REJECTED before any agent ran" in text
    assert str(tmp_path / "audit" / "demo") in text
    assert any(p.stat().st_size > 0 for p in (tmp_path / "audit" / "demo").glob("*.wal*"))
    # each trace's timeline command, and it works
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith("agency trace show")]
    assert len(commands) == 6 and all(c.endswith(f"--data-dir {tmp_path}") for c in commands)
    assert main(commands[0].split()[1:]) == 0


async def test_demo_without_a_data_dir_removes_its_temporary_directory():
    out = io.StringIO()
    assert await run_demo(None, out=out) == 0
    text = out.getvalue()
    temp = next(w for w in text.split() if "agency-demo-" in w and w.startswith("/"))
    assert not os.path.exists(temp)  # noqa: ASYNC240 - a check after the run, nothing to wait for
    assert "run 'agency demo --data-dir DIR' to keep the audit log" in text


async def test_demo_json_output(tmp_path):
    out = io.StringIO()
    assert await run_demo(tmp_path, as_json=True, out=out) == 0
    states = [o["state"] for o in json.loads(out.getvalue())]
    assert states == [
        "completed",
        "completed",
        "input_required",
        "input_required",
        "input_required",
        "rejected",
    ]


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out and "demo" in out


def test_demo_runs_as_a_console_script(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "middleware", "demo", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "COMPLETED" in proc.stdout


def test_serve_answers_grpc_and_stops_cleanly_on_sigterm(tmp_path):
    env = {**os.environ, "AGENCY_NODE_ID": "node-test"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "middleware",
            "--log-format",
            "json",
            "serve",
            "--address",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path),
            "--demo",
            "--metrics-address",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        metrics_line = proc.stdout.readline()  # blocks until the server prints its addresses
        metrics_url = re.search(r"metrics on (\S+)", metrics_line)
        line = proc.stdout.readline()
        m = re.search(r"serving on (\S+):(\d+)", line)
        assert m and metrics_url, metrics_line + line + proc.stderr.read()
        with grpc.insecure_channel(f"127.0.0.1:{m.group(2)}") as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            decision = stub.Route(agency_pb2.RouteRequest(text="predict the stock price"), timeout=10)
            assert decision.refused
            outcome = stub.Submit(agency_pb2.SubmitRequest(text="predict the stock price"), timeout=10)
            assert outcome.state == "rejected"
            with pytest.raises(grpc.RpcError):
                stub.Submit(agency_pb2.SubmitRequest(text="x", user_id="u" * 300), timeout=10)
            warranty = stub.Submit(
                agency_pb2.SubmitRequest(
                    text="我上周买的手机屏幕碎了，要换新",
                    user_id="u_789",
                    input_json=json.dumps({"user_id": "u_789", "device": "fp_7f3a"}),
                    steps=[
                        agency_pb2.TaskStep(name=name, action=action)
                        for name, action in (
                            ("intake", "extract_intent"),
                            ("order", "get_order_detail"),
                            ("warranty", "warranty_check"),
                            ("shipping", "ship_replacement"),
                            ("reply", "compose_reply"),
                        )
                    ],
                ),
                timeout=10,
            )
            assert warranty.state == "completed", warranty.reason
        exposition = urllib.request.urlopen(metrics_url.group(1), timeout=10).read().decode()
        assert 'agency_tasks_total{state="rejected"} 1.0' in exposition
        assert 'agency_routing_decisions_total{outcome="refused"} 1.0' in exposition
        # a client's bad request is a refused request, not an SMF failure (issue 13, item 7)
        assert "smf_validation_errors_total 0.0" in exposition
        assert 'agency_requests_refused_total{reason="invalid_input"} 1.0' in exposition
        fsyncs = re.search(r"^agency_audit_fsync_duration_seconds_count (\S+)$", exposition, re.M)
        assert fsyncs and float(fsyncs.group(1)) > 0, "the audit log's fdatasyncs are measured"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped" in out
    errors = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    assert not any(e["level"] == "ERROR" for e in errors), err
    segments = (Path(tmp_path) / "audit" / "node-test").glob("*.wal*")  # compressed once sealed
    assert any(b'"node":"node-test"' in read_segment(p) for p in segments)
    # --demo scores answers with the scenario's authority table, as `agency demo` does
    from middleware.audit.wal_reader import WalLogReader

    scored = [
        r.detail["reliability"]
        for _, r in WalLogReader(Path(tmp_path) / "audit").records()
        if r.event_type == "agent.result" and r.actors.agent.startswith("greeting_agent")
    ]
    assert scored and scored[0]["authority"] == 0.8, scored


def test_serve_rejects_a_bad_address(tmp_path, capsys):
    assert (
        main(["serve", "--address", "not an address", "--data-dir", str(tmp_path), "--metrics-address", ""])
        == 2
    )
    assert "error" in capsys.readouterr().err


def test_serve_reports_a_port_in_use(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [
            "serve",
            "--address",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path),
            "--metrics-address",
            "",
        ]
        assert main(argv) == 2
    assert "cannot listen" in capsys.readouterr().err


def test_demo_today_must_be_a_real_date(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--today", "2027-02-29"])
    assert info.value.code == 2
    assert "'2027-02-29' is not a date (YYYY-MM-DD)" in capsys.readouterr().err
