"""Values no request may carry are refused at the boundary, naming the field, and audited:
a lone UTF-16 surrogate or NaN/Infinity in any ``*_json`` field, a non-finite float in
any numeric field (issue 13, items 3 and 4). None of them is INTERNAL or stored as null."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import (
    agency_pb2,
    agency_pb2_grpc,
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    goals_pb2,
    goals_pb2_grpc,
    messages_pb2,
    messages_pb2_grpc,
)
from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput
from middleware.server.grpc_api.convert import loads

LONE = '{"a": "\\ud800"}'  # the JSON text holds the escape, as a client would send it
LONE_KEY = '{"\\udfff": 1}'
NAN = '{"a": NaN}'
INF = '{"a": [1, -Infinity]}'
OVERFLOW = '{"a": 1e999}'


def _contract(**json_fields: str) -> common_pb2.CapabilityContract:
    return common_pb2.CapabilityContract(name="odd", version="1.0.0", can_do=["odd"], **json_fields)


def _message(content_json: str, **metadata: Any) -> common_pb2.SMFMessage:
    return common_pb2.SMFMessage(
        sender="a",
        receiver="b",
        content_json=content_json,
        metadata=common_pb2.SMFMetadata(**metadata),
    )


def _cases(bad: str) -> list[tuple[str, str, Any]]:
    """(method, the field the refusal must name, request) for every ``*_json`` request field."""
    return [
        ("Submit", "input_json", agency_pb2.SubmitRequest(text="x", input_json=bad)),
        ("Submit", "constraints_json", agency_pb2.SubmitRequest(text="x", constraints_json=bad)),
        ("Submit", "goal_json", agency_pb2.SubmitRequest(text="x", goal_json=bad)),
        (
            "Submit",
            "steps[1].input_json",
            agency_pb2.SubmitRequest(
                text="x", steps=[agency_pb2.TaskStep(name="a"), agency_pb2.TaskStep(name="b", input_json=bad)]
            ),
        ),
        ("Route", "constraints_json", agency_pb2.RouteRequest(text="x", constraints_json=bad)),
        ("Resume", "decision_json", agency_pb2.ResumeRequest(task_id="t", decision_json=bad)),
        (
            "Register",
            "contract.input_schema_json",
            catalog_pb2.RegisterRequest(contract=_contract(input_schema_json=bad)),
        ),
        (
            "Update",
            "contract.output_schema_json",
            catalog_pb2.UpdateRequest(contract=_contract(output_schema_json=bad)),
        ),
        ("RegisterGoal", "goal_json", goals_pb2.RegisterGoalRequest(goal_json=bad)),
        ("Send", "message.content_json", messages_pb2.SendMessageRequest(message=_message(bad))),
        (
            "Send",
            "params_json",
            messages_pb2.SendMessageRequest(message=_message("{}"), params_json=bad),
        ),
    ]


async def _call(channel: grpc.aio.Channel, method: str, request: Any) -> grpc.aio.AioRpcError:
    stubs = {
        "Submit": agency_pb2_grpc.AgencyServiceStub,
        "Route": agency_pb2_grpc.AgencyServiceStub,
        "Resume": agency_pb2_grpc.AgencyServiceStub,
        "GetTask": agency_pb2_grpc.AgencyServiceStub,
        "Register": catalog_pb2_grpc.CatalogServiceStub,
        "Update": catalog_pb2_grpc.CatalogServiceStub,
        "RegisterGoal": goals_pb2_grpc.GoalServiceStub,
        "Send": messages_pb2_grpc.MessageServiceStub,
        "Pull": messages_pb2_grpc.MessageServiceStub,
    }
    stub = stubs[method](channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await getattr(stub, method)(request)
    return info.value


def _rejections(agency: Any) -> list[str]:
    return [
        " ".join(r.detail.get("problems", []))
        for _, r in agency.audit.records()
        if r.event_type == AuditEventType.MESSAGE_REJECTED
    ]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (LONE, "lone UTF-16 surrogate"),
        (LONE_KEY, "lone UTF-16 surrogate"),
        (NAN, "NaN is not a JSON value"),
        (INF, "-Infinity is not a JSON value"),
        (OVERFLOW, "out of range"),
    ],
)
async def test_every_json_field_refuses_what_json_has_not(grpc_gateway, bad: str, says: str) -> None:
    agency, channel, _ = grpc_gateway
    for method, field, request in _cases(bad):
        before = len(_rejections(agency))
        err = await _call(channel, method, request)
        assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, (method, field, err.code(), err.details())
        md = dict(err.trailing_metadata() or ())
        assert md["agency-reason"] == "INVALID_INPUT"
        assert md["agency-field"] == field, (method, md)
        assert says in err.details()
        audited = _rejections(agency)[before:]
        assert len(audited) == 1 and field in audited[0], (method, field, audited)


@pytest.mark.parametrize(
    ("method", "request_", "field"),
    [
        ("Route", agency_pb2.RouteRequest(text="x", constraints_json="[1]"), "constraints_json"),
        (
            "Route",
            agency_pb2.RouteRequest(text="x", constraints_json='{"max_latency_ms": -5}'),
            "max_latency_ms",
        ),
        ("Resume", agency_pb2.ResumeRequest(task_id="t", decision_json='"approve"'), "decision_json"),
    ],
)
async def test_well_formed_json_of_the_wrong_shape_is_refused_and_audited(
    grpc_gateway, method: str, request_: Any, field: str
) -> None:
    # Valid JSON, wrong shape or value: refused at the transport or the router, and audited
    # like any refused input (the previous note's "not audited" gap).
    agency, channel, _ = grpc_gateway
    before = len(_rejections(agency))
    err = await _call(channel, method, request_)
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert field in dict(err.trailing_metadata() or ())["agency-field"]
    audited = _rejections(agency)[before:]
    assert len(audited) == 1 and field in audited[0], audited


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
async def test_non_finite_floats_are_refused_naming_the_field(grpc_gateway, value: float) -> None:
    agency, channel, _ = grpc_gateway
    err = await _call(channel, "Pull", messages_pb2.PullRequest(wait_seconds=value))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["agency-field"] == "wait_seconds"
    err = await _call(
        channel,
        "Send",
        messages_pb2.SendMessageRequest(message=_message("{}", confidence_score=value)),
    )
    assert dict(err.trailing_metadata() or ())["agency-field"] == "message.metadata.confidence_score"
    err = await _call(
        channel, "Send", messages_pb2.SendMessageRequest(message=_message("{}"), ttl_seconds=value)
    )
    assert dict(err.trailing_metadata() or ())["agency-field"] == "ttl_seconds"
    assert any("ttl_seconds" in r for r in _rejections(agency))


def test_the_one_decoder_refuses_and_keeps_what_json_has() -> None:
    for bad in (LONE, LONE_KEY, NAN, INF, OVERFLOW, '["\\udc00x"]'):
        with pytest.raises(InvalidInput) as info:
            loads(bad, "input_json")
        assert info.value.field == "input_json"
    # a surrogate pair is one character; escapes of ordinary characters are fine
    assert loads('{"e": "\\ud83d\\ude00", "f": "\\u00e9", "n": 1e308}', "x") == {
        "e": "\U0001f600",
        "f": "\u00e9",
        "n": 1e308,
    }


@pytest.mark.parametrize("ttl", [float("nan"), float("inf"), 1e300])
async def test_an_agents_freshness_ttl_must_be_a_date_away(ttl: float) -> None:
    """A worker's ``InvokeResult.freshness_ttl`` of infinity (or 1e300) crashed the task with an
    OverflowError (INTERNAL); it is a typed failure of that attempt now."""
    from middleware import Agency, AgentReply

    with pytest.raises(InvalidInput) as info:
        AgentReply.parse({"output": 1, "freshness_ttl": ttl})
    assert info.value.field == "freshness_ttl"

    async def no_sleep(_: float) -> None:
        return None

    agency = Agency(sleep=no_sleep)

    def agent(request: object) -> AgentReply:
        return AgentReply(output={"a": 1}, freshness_ttl=ttl)

    await agency.register({"name": "c", "version": "1.0.0", "can_do": ["x"], "slo_latency_ms": 1000}, agent)
    outcome = await agency.submit({"text": "go", "steps": [{"name": "a", "action": "x"}]})
    assert outcome.failures and outcome.output is None
