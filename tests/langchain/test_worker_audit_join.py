"""``agency worker --audit-dir`` writes the same verifiable log as the gateway, and the two
join on the trace id.

A real gateway (``agency serve --config``) and a real worker process serving a wrapped
LangChain agent: the worker's inner steps (LLM calls) go to its own write-ahead log
(segments, signed checkpoints) under ``--audit-dir``, which ``agency audit verify``
accepts; ``agency audit export GATEWAY_AUDIT WORKER_AUDIT --trace T`` merges the
gateway's records of the task and the worker's steps of it into one bundle that verifies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from gateway_processes import start_gateway, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.cli import main

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


async def test_worker_and_gateway_logs_verify_and_join_on_the_trace_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_definition(
        tmp_path / "agency.yaml", {"server": {"address": "127.0.0.1:0", "metrics_address": ""}}
    )
    gateway = await start_gateway(config, "g1", tmp_path)
    worker_audit = tmp_path / "worker-audit"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env["PYTHONPATH"] = str(ROOT)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "worker",
        "--agent",
        "examples.langchain_agent:agent",
        "--gateway",
        gateway.address,
        "--audit-dir",
        str(worker_audit),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
            deadline = time.monotonic() + 30  # a fresh interpreter importing langchain-core
            while True:  # the gateway's catalog: the other process's observable state
                try:
                    await catalog.Get(catalog_pb2.GetCapabilityRequest(key="warranty_faq@1.0.0"))
                    break
                except grpc.aio.AioRpcError:
                    assert time.monotonic() < deadline and worker.returncode is None, "worker not registered"
                    await asyncio.sleep(0.05)
            outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                agency_pb2.SubmitRequest(
                    text="covered?",
                    input_json='{"question": "covered?"}',
                    constraints_json='{"action": "answer_faq"}',
                ),
                timeout=20,
            )
        assert outcome.state == "completed", outcome
        worker.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(worker.communicate(), 30)
        assert worker.returncode == 0, out.decode()
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        assert await gateway.stop() == 0, gateway.output()

    assert main(["audit", "verify", str(worker_audit)]) == 5  # intact, unpinned; was: "no audit log segments"
    assert "OK   worker-warranty_faq" in capsys.readouterr().out
    bundle = tmp_path / "joined.jsonl"
    gateway_audit = tmp_path / "g1" / "audit"
    args = ["audit", "export", str(gateway_audit), str(worker_audit), "--trace", outcome.trace_id]
    assert main([*args, "-o", str(bundle)]) == 0
    lines = [json.loads(line) for line in bundle.read_text().splitlines()]
    records = [x for x in lines if x["kind"] == "record"]
    by_node = {x["node"] for x in records}
    assert by_node == {"g1", "worker-warranty_faq"}, by_node
    steps = [x["record"] for x in records if x["node"] == "worker-warranty_faq"]
    assert steps and {s["event_type"] for s in steps} == {"agent.step"}
    assert {s["trace_id"] for s in steps} == {outcome.trace_id}
    assert any(x["record"]["event_type"] == "agent.dispatch" for x in records if x["node"] == "g1")
    assert main(["audit", "verify", str(bundle)]) == 5  # intact, no --key pinned
