"""The gRPC surface through a real in-process server on port 0."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2
from middleware.server.grpc_api.server import LIVENESS_SERVICE


def metadata(err: grpc.aio.AioRpcError) -> dict[str, str]:
    return {k: v for k, v in (err.trailing_metadata() or ())}


async def test_submit_runs_the_reference_scenario(grpc_gateway):
    _, channel, _ = grpc_gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    outcome = await stub.Submit(
        agency_pb2.SubmitRequest(  # only what the user said: greeting_agent anchors the goal
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
    )
    assert outcome.state == "completed"
    assert outcome.a2a_state == "TASK_STATE_COMPLETED"
    assert outcome.goal_id == "GOAL_WARRANTY_001"
    assert outcome.goal_verdict.passed and len(outcome.goal_verdict.steps) == 1  # + 2 at the stage
    assert [r.kind for r in outcome.resolutions] == ["retry", "retry", "use_backup"]
    assert json.loads(outcome.output_json)["tracking_number"] == "EXP123456"
    assert outcome.trace_id and outcome.audit_index > 0


async def test_submit_refused_and_route_dry_run(grpc_gateway):
    _, channel, _ = grpc_gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    outcome = await stub.Submit(agency_pb2.SubmitRequest(text="Predict next quarter's stock price"))
    assert outcome.state == "rejected"
    assert "cannot do stock_prediction" in outcome.reason
    decision = await stub.Route(agency_pb2.RouteRequest(text="I need a replacement for my shattered screen"))
    assert decision.chosen == "warranty_agent@2.1.0" and not decision.refused
    assert decision.candidates[0].agent == "warranty_agent@2.1.0"
    refused = await stub.Route(
        agency_pb2.RouteRequest(text="anything", constraints_json=json.dumps({"action": "stock_prediction"}))
    )
    assert refused.refused
    assert refused.rejected[0].agent == "financial_calculator@1.0.0"
    assert refused.rejected[0].constraint == "cannot_do"


async def test_catalog_register_get_query(grpc_gateway):
    agency, channel, _ = grpc_gateway
    stub = catalog_pb2_grpc.CatalogServiceStub(channel)
    contract = common_pb2.CapabilityContract(
        name="refund_agent",
        version="1.0.0",
        tags=["Payments"],
        slo_latency_ms=800,
        can_do=["issue_refund"],
        input_schema_json=json.dumps({"type": "object"}),
    )
    entry = await stub.Register(catalog_pb2.RegisterRequest(contract=contract))
    assert entry.key == "refund_agent@1.0.0"
    assert list(entry.contract.tags) == ["payments"]
    got = await stub.Get(catalog_pb2.GetCapabilityRequest(key="refund_agent@1.0.0"))
    assert got.contract.slo_latency_ms == 800
    found = await stub.Query(catalog_pb2.QueryRequest(action="issue_refund"))
    assert sorted(e.key for e in found.entries) == ["refund_agent@1.0.0", "refund_executor@1.0.0"]
    by_tag = await stub.Query(catalog_pb2.QueryRequest(tags=["shipping"]))
    assert {e.key for e in by_tag.entries} == {"replacement_shipper@1.0.0", "express_shipper@1.0.0"}
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Register(catalog_pb2.RegisterRequest(contract=contract))
    assert info.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert (await agency.catalog.get("refund_agent@1.0.0")).contract.can_do == ["issue_refund"]


async def test_bad_input_is_invalid_argument_naming_the_field(grpc_gateway):
    _, channel, _ = grpc_gateway
    catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
    bad = common_pb2.CapabilityContract(
        name="calc",
        version="1.0",
        can_do=["a"],
        cannot_do=["a"],
        slo_latency_ms=-1,
        input_schema_json="{nope",
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog.Register(catalog_pb2.RegisterRequest(contract=bad))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    md = metadata(info.value)
    assert md["agency-reason"] == "INVALID_INPUT"
    assert md["agency-field"] == "contract.input_schema_json"
    assert "not valid JSON" in info.value.details()

    bad2 = common_pb2.CapabilityContract(name="calc", version="1.0", can_do=["a"], slo_latency_ms=-1)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog.Register(catalog_pb2.RegisterRequest(contract=bad2))
    problems = {p["field"] for p in json.loads(metadata(info.value)["agency-problems"])}
    assert problems == {"contract.version", "contract.slo_latency_ms"}

    agency = agency_pb2_grpc.AgencyServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await agency.Submit(agency_pb2.SubmitRequest(text=""))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert metadata(info.value)["agency-field"] == "text"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await agency.Submit(agency_pb2.SubmitRequest(text="x", input_json="[1]"))
    assert metadata(info.value)["agency-field"] == "input_json"


async def test_unknown_capability_and_goal_are_not_found(grpc_gateway):
    _, channel, _ = grpc_gateway
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog_pb2_grpc.CatalogServiceStub(channel).Get(
            catalog_pb2.GetCapabilityRequest(key="nope@1.0.0")
        )
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
            agency_pb2.SubmitRequest(text="x", goal_id="GOAL_UNKNOWN_1")
        )
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


async def test_health_and_reflection(grpc_gateway):
    _, channel, server = grpc_gateway
    health = health_pb2_grpc.HealthStub(channel)
    for service in ["", "agency.v1.AgencyService", "agency.v1.CatalogService"]:
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await server.set_serving(False)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    # the liveness probe's service: the process answers, whatever its backends say
    reply = await health.Check(health_pb2.HealthCheckRequest(service=LIVENESS_SERVICE))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

    refl = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def ask():
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    names = set()
    async for resp in refl.ServerReflectionInfo(ask()):
        names |= {s.name for s in resp.list_services_response.service}
    assert {"agency.v1.AgencyService", "agency.v1.CatalogService", "grpc.health.v1.Health"} <= names
