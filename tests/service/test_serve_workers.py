"""``agency serve --workers N``: N real processes on one port, each its own audit node."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import BinaryIO

import grpc
import pytest
from gateway_processes import redis_definition, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.cli import main
from middleware.cli.serve_workers import worker_argv

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent  # replica_agents.py
WORK = agency_pb2.SubmitRequest(text="do the work", constraints_json='{"action": "work"}')
_READY = re.compile(r"^agency: serving on [\d.]+:(\d+) \(2 workers", re.MULTILINE)


def _create(path: Path) -> BinaryIO:
    return open(path, "wb")


def test_worker_command_line_drops_what_the_parent_decides() -> None:
    argv = ["-v", "serve", "--config", "f.yaml", "--workers", "2", "--address=0.0.0.0:1", "--reuse-port"]
    assert worker_argv(argv, "127.0.0.1:5", "") == [
        "-v", "serve", "--config", "f.yaml",
        "--address", "127.0.0.1:5", "--metrics-address", "", "--reuse-port",
    ]  # fmt: skip


def test_workers_with_in_memory_storage_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("AGENCY_"):
            monkeypatch.delenv(name)
    code = main(["serve", "--workers", "2", "--data-dir", str(tmp_path), "--metrics-address", ""])
    assert code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "redis" in err
    assert not (tmp_path / "audit").exists(), "nothing may start"


async def test_two_workers_share_the_port_spread_connections_and_drain_on_sigterm(
    tmp_path: Path, redis_prefix: str
) -> None:
    definition = redis_definition(
        redis_prefix,
        agents=[
            {
                "agent": "replica_agents:steady",
                "contract": {"name": "steady", "can_do": ["work"], "slo_latency_ms": 2000},
            }
        ],
    )
    config = write_definition(tmp_path / "agency.yaml", definition)
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env.update(AGENCY_NODE_ID="gw", PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]))
    log = tmp_path / "serve.log"
    with _create(log) as out:  # the child keeps its own descriptor
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "middleware", "serve", "--config", str(config), "--workers", "2",
            "--data-dir", str(data), stdout=out, stderr=asyncio.subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        port = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.returncode is None and not port:
            match = _READY.search(log.read_text(errors="replace"))
            port = int(match.group(1)) if match else 0
            await asyncio.sleep(0.05)
        assert port, f"the workers did not start:\n{log.read_text(errors='replace')}"
        # separate connections (no shared subchannel pool): the kernel spreads them over the workers
        channels = [
            grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(16)
        ]
        try:
            outcomes = await asyncio.gather(
                *(agency_pb2_grpc.AgencyServiceStub(c).Submit(WORK, timeout=30) for c in channels)
            )
        finally:
            for c in channels:
                await c.close()
        assert {o.state for o in outcomes} == {"completed"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 60)
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert output.count("agency: stopped") == 2, "both workers drained and closed their audit logs"
    assert "all workers stopped" in output

    bundle = tmp_path / "bundle.jsonl"
    assert main(["audit", "export", str(data / "audit"), "--format", "jsonl", "--output", str(bundle)]) == 0
    assert main(["audit", "verify", str(bundle)]) == 5  # intact; authenticity needs the pinned --key
    tasks_by_node: dict[str, set[str]] = {}
    for line in bundle.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("kind") == "record" and entry["record"]["event_type"] == "task.submitted":
            tasks_by_node.setdefault(entry["node"], set()).add(entry["record"]["task_id"])
    assert set(tasks_by_node) == {"gw-w1", "gw-w2"}, "connections landed on both workers"
    assert {t for ts in tasks_by_node.values() for t in ts} == {o.task_id for o in outcomes}


def test_workers_refuse_a_port_another_process_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_prefix: str
) -> None:
    import socket

    from gateway_processes import REDIS_URL

    for name in list(os.environ):
        if name.startswith("AGENCY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENCY_REDIS_URL", REDIS_URL)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            ["serve", "--workers", "2", "--address", f"127.0.0.1:{port}", "--data-dir", str(tmp_path),
             "--metrics-address", ""]
        )  # fmt: skip
    assert code == 2
    assert "the port is taken" in capsys.readouterr().err
    assert not (tmp_path / "audit").exists(), "no worker may start"
