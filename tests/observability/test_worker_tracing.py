"""One trace per task across a gateway and a remote worker (``AgentWorker.Invoke``), with
the audit log's trace id: the gateway's task span, the worker's agent span and every
audit record of the task share one trace id. Gateway and worker have their own tracer
providers and exporters, as two processes would."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")

import grpc
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from worker_requests import agent_request

from middleware import Agency, AgentRequest, MemoryAuditLog
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.agents import AgentRegistry
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.tracing import TracingServerInterceptor
from middleware.server.remote_agent import RemoteAgent
from middleware.server.tracing import Tracing
from middleware.server.worker import Worker

CONTRACT = {"name": "echo", "version": "1.0.0", "can_do": ["echo"], "slo_latency_ms": 5000}
SUBMIT = agency_pb2.SubmitRequest(
    text="echo this", input_json='{"q": 1}', constraints_json='{"action": "echo"}'
)


async def _no_sleep(_: float) -> None:
    return None


def _tracing() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


def _hex(n: int) -> str:
    return f"{n:032x}"


def _parts(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


@pytest.fixture
async def gateway():
    """A traced gateway (server interceptor + spans from the audit stream) on port 0."""
    tracing, exporter = _tracing()
    audit = MemoryAuditLog()
    agency = Agency(
        audit=tracing.audit_log(audit),
        sleep=_no_sleep,
        agents=AgentRegistry(remote_factory=RemoteAgent.factory()),
    )
    agency.failures.policy.max_retries = 0
    server = build_server(agency, "127.0.0.1:0", interceptors=[TracingServerInterceptor(tracing)])
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield f"127.0.0.1:{server.port}", channel, audit, exporter
    await channel.close()
    await server.stop(0)
    await agency.close()


async def test_the_worker_span_joins_the_task_trace_with_the_audit_trace_id(gateway) -> None:
    address, channel, audit, gateway_spans = gateway
    worker_tracing, worker_spans = _tracing()
    seen: list[str] = []

    async def echo(request: AgentRequest) -> Any:
        seen.append(request.traceparent)
        return request.input

    async with Worker(echo, CONTRACT, gateway=address, tracing=worker_tracing):
        outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)
    assert outcome.state == "completed", outcome.reason
    trace_id = outcome.trace_id

    records = [r for _, r in audit.records() if r.task_id == outcome.task_id]
    assert records and {r.trace_id for r in records} == {trace_id}
    task = next(s for s in gateway_spans.get_finished_spans() if s.name == "agency.task")
    assert _hex(task.context.trace_id) == trace_id

    (agent_span,) = worker_spans.get_finished_spans()
    assert agent_span.name == "agency.agent echo@1.0.0"
    assert _hex(agent_span.context.trace_id) == trace_id
    # its parent is the gateway's task span: only the Invoke metadata could have told it
    assert agent_span.parent.span_id == task.context.span_id and agent_span.parent.is_remote
    assert agent_span.attributes["agency.task_id"] == outcome.task_id
    # the agent got the worker span's traceparent: same trace, nested under the worker span
    assert [_parts(tp) for tp in seen] == [(trace_id, f"{agent_span.context.span_id:016x}")]


async def test_a_worker_without_tracing_hands_the_agent_the_task_traceparent(gateway) -> None:
    address, channel, audit, gateway_spans = gateway
    seen: list[str] = []

    def echo(request: AgentRequest) -> Any:  # sync: runs in a thread, the request still carries it
        seen.append(request.traceparent)
        return request.input

    async with Worker(echo, CONTRACT, gateway=address):
        outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)
    assert outcome.state == "completed", outcome.reason
    task = next(s for s in gateway_spans.get_finished_spans() if s.name == "agency.task")
    assert [_parts(tp) for tp in seen] == [(outcome.trace_id, f"{task.context.span_id:016x}")]
    assert {r.trace_id for _, r in audit.records() if r.task_id == outcome.task_id} == {outcome.trace_id}


async def test_a_failed_call_marks_the_worker_span_and_tracestate_travels_along(gateway) -> None:
    address, _, _, _ = gateway
    worker_tracing, worker_spans = _tracing()

    def broken(_: AgentRequest) -> Any:
        raise ValueError("boom")

    caller_tracing, _ = _tracing()
    carrier = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "vendor=opaque",
    }
    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        async with Worker(broken, CONTRACT, gateway=address, tracing=worker_tracing) as worker:
            remote = RemoteAgent(worker.endpoint)
            try:
                with caller_tracing.tracer.start_as_current_span("dispatch") as caller:
                    request = agent_request()  # its traceparent: the current span's, as in the gateway
                    with pytest.raises(Exception, match="boom"):
                        await remote(request)
            finally:
                await remote.aclose()
    finally:
        otel_context.detach(token)
    (span,) = worker_spans.get_finished_spans()
    assert span.parent.span_id == caller.get_span_context().span_id
    assert _hex(span.context.trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert span.context.trace_state.get("vendor") == "opaque"  # sent as tracestate metadata
    assert span.status.status_code is StatusCode.ERROR and "TOOL_ERROR" in span.status.description


async def test_agency_worker_tracing_flag_exports_the_agent_span_in_the_task_trace(gateway, tmp_path) -> None:
    address, channel, _, _ = gateway
    (tmp_path / "traced_worker_agents.py").write_text(
        "def echo(request):\n    return {'traceparent': request.traceparent}\n"
    )
    (tmp_path / "contract.json").write_text(json.dumps(CONTRACT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "worker",
        "--agent",
        "traced_worker_agents:echo",
        "--contract",
        str(tmp_path / "contract.json"),
        "--gateway",
        address,
        "--tracing",
        "console",
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
    try:
        deadline = time.monotonic() + 30  # a fresh interpreter starting: poll the catalog, bounded
        while proc.returncode is None and time.monotonic() < deadline:
            try:
                await catalog.Get(catalog_pb2.GetCapabilityRequest(key="echo@1.0.0"))
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert outcome.state == "completed", outcome.reason
    assert _parts(json.loads(outcome.output_json)["traceparent"])[0] == outcome.trace_id
    text = out.decode()
    assert '"name": "agency.agent echo@1.0.0"' in text
    assert re.findall(r'"trace_id": "0x([0-9a-f]{32})"', text) == [outcome.trace_id]
