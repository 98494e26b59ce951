"""OpenTelemetry: one trace per task across client, gateway, agents and a remote hop,
with the audit log's trace id; checked with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import contextvars
import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.agents import AgentRequest
from middleware.audit import MemoryAuditLog
from middleware.demo import build_demo_agency
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.channel import open_channel
from middleware.server.grpc_api.tracing import TracingClientInterceptor, TracingServerInterceptor
from middleware.server.tracing import Tracing

WARRANTY = agency_pb2.SubmitRequest(  # the seed's request: greeting_agent anchors the goal
    text="我上周买的手机屏幕碎了，要换新",
    user_id="u_789",
    input_json=json.dumps({"user_id": "u_789", "device": "fp_7f3a"}),
    steps=[
        agency_pb2.TaskStep(name="intake", action="extract_intent"),
        agency_pb2.TaskStep(name="order", action="get_order_detail"),
        agency_pb2.TaskStep(name="warranty", action="warranty_check"),
        agency_pb2.TaskStep(name="shipping", action="ship_replacement"),
        agency_pb2.TaskStep(name="reply", action="compose_reply"),
    ],
)


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider)


@pytest.fixture
async def traced_gateway(tracing):
    audit = MemoryAuditLog()
    agency = await build_demo_agency(Agency(audit=tracing.audit_log(audit), sleep=_no_sleep))
    server = build_server(agency, "127.0.0.1:0", interceptors=[TracingServerInterceptor(tracing)])
    await server.start()
    channel = open_channel(f"127.0.0.1:{server.port}", interceptors=[TracingClientInterceptor(tracing)])
    yield agency, audit, channel, server
    await channel.close()
    await server.stop(0)
    await agency.close()


def _hex(trace_id: int) -> str:
    return f"{trace_id:032x}"


async def test_one_trace_per_task_with_the_audit_trace_id(traced_gateway, tracing, exporter):
    _, audit, channel, _ = traced_gateway
    with tracing.tracer.start_as_current_span("caller") as caller:
        outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(WARRANTY, timeout=10)
    assert outcome.state == "completed"
    trace_id = _hex(caller.get_span_context().trace_id)
    # the client's traceparent was adopted as the task's trace id, end to end
    assert outcome.trace_id == trace_id
    task_records = [r for _, r in audit.records() if r.task_id == outcome.task_id]
    assert task_records and {r.trace_id for r in task_records} == {trace_id}

    spans = exporter.get_finished_spans()
    assert {_hex(s.context.trace_id) for s in spans} == {trace_id}
    by_name = {s.name: s for s in spans}
    client = by_name["agency.v1.AgencyService/Submit"]  # client and server share the name
    server = next(s for s in spans if s.name == client.name and s.kind.name == "SERVER")
    client = next(s for s in spans if s.name == client.name and s.kind.name == "CLIENT")
    task = by_name["agency.task"]
    assert client.parent.span_id == caller.get_span_context().span_id
    assert server.parent.span_id == client.context.span_id  # propagated in gRPC metadata
    assert task.parent.span_id == server.context.span_id
    assert task.attributes["agency.task_id"] == outcome.task_id
    assert task.attributes["agency.state"] == "completed"
    dispatches = [s for s in spans if s.name.startswith("agency.dispatch")]
    assert [s.attributes["agency.agent"] for s in dispatches] == [
        "greeting_agent@1.0.0",
        "order_agent@1.0.0",
        "warranty_agent@2.1.0",
        "replacement_shipper@1.0.0",
        "replacement_shipper@1.0.0",
        "replacement_shipper@1.0.0",
        "express_shipper@1.0.0",
        "reply_agent@1.0.0",
    ]
    assert all(s.parent.span_id == task.context.span_id for s in dispatches)
    assert [s.status.status_code for s in dispatches].count(StatusCode.ERROR) == 3
    assert "TOOL_TIMEOUT" in dispatches[3].status.description
    events = [e.name for e in task.events]
    assert events[0] == "task.submitted" and events[-1] == "task.completed"
    assert "goal.verification" in events and events.count("failure.resolution") == 3


async def test_client_set_trace_id_becomes_the_otel_trace_id(traced_gateway, exporter):
    _, _, _, server = traced_gateway
    wanted = "0af7651916cd43dd8448eb211c80319c"
    async with open_channel(f"127.0.0.1:{server.port}") as plain:  # no traceparent sent
        outcome = await agency_pb2_grpc.AgencyServiceStub(plain).Submit(
            agency_pb2.SubmitRequest(text="Predict next quarter's stock price", trace_id=wanted)
        )
    assert outcome.trace_id == wanted and outcome.state == "rejected"
    task = next(s for s in exporter.get_finished_spans() if s.name == "agency.task")
    assert _hex(task.context.trace_id) == wanted
    assert task.status.status_code is StatusCode.ERROR
    # the gateway's own server span (a trace it started) is linked from the task span
    server = next(s for s in exporter.get_finished_spans() if s.kind.name == "SERVER")
    assert [link.context.span_id for link in task.links] == [server.context.span_id]


async def test_without_a_client_trace_the_gateway_trace_id_is_the_task_trace_id(traced_gateway, exporter):
    _, _, _, server = traced_gateway
    async with open_channel(f"127.0.0.1:{server.port}") as plain:
        outcome = await agency_pb2_grpc.AgencyServiceStub(plain).Submit(WARRANTY, timeout=10)
    ids = {_hex(s.context.trace_id) for s in exporter.get_finished_spans()}
    assert ids == {outcome.trace_id}


async def test_remote_hops_continue_the_task_trace(tracing, exporter):
    """An agent that calls another gRPC service, and a worker that gets the AgentRequest
    as JSON in a fresh context (another process), both land in the task's trace."""
    downstream = await build_demo_agency(Agency(sleep=_no_sleep))
    remote = build_server(downstream, "127.0.0.1:0", interceptors=[TracingServerInterceptor(tracing)])
    await remote.start()
    channel = open_channel(f"127.0.0.1:{remote.port}", interceptors=[TracingClientInterceptor(tracing)])
    shipped: list[str] = []

    async def remote_agent(request: AgentRequest) -> dict:
        await agency_pb2_grpc.AgencyServiceStub(channel).Route(agency_pb2.RouteRequest(text="screen"))
        shipped.append(request.model_dump_json())
        return {"ok": True}

    agency = Agency(audit=tracing.audit_log(MemoryAuditLog()), sleep=_no_sleep)
    await agency.register(
        {"name": "remote", "version": "1.0.0", "can_do": ["hop"], "slo_latency_ms": 5000}, remote_agent
    )
    try:
        outcome = await agency.submit({"text": "hop", "constraints": {"action": "hop"}})  # in process
    finally:
        await channel.close()
        await remote.stop(0)
    assert outcome.state == "completed"

    def worker(payload: str) -> None:  # what a worker process does with the request it received
        request = AgentRequest.model_validate_json(payload)
        with tracing.agent_span(request):
            pass

    contextvars.Context().run(worker, shipped[0])
    await asyncio.sleep(0)
    spans = exporter.get_finished_spans()
    assert {_hex(s.context.trace_id) for s in spans} == {outcome.trace_id}
    task = next(s for s in spans if s.name == "agency.task")
    hop = next(s for s in spans if s.kind.name == "SERVER")
    assert hop.name == "agency.v1.AgencyService/Route"
    worker_span = next(s for s in spans if s.name == "agency.agent remote@1.0.0")
    assert worker_span.parent.span_id == task.context.span_id
    assert json.loads(shipped[0])["traceparent"].split("-")[1] == outcome.trace_id
