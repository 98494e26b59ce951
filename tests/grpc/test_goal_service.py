"""``agency.v1.GoalService`` through a real gRPC server on port 0."""

from __future__ import annotations

import json

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, goals_pb2, goals_pb2_grpc

GOAL = {
    "id": "GOAL_KYC_001",
    "description": "Pay only after a verified KYC report",
    "stages": [{"name": "kyc", "step": "warranty", "verification_steps": ["字段in_warranty等于true"]}],
    "verification_steps": ["output contains the tracking number", "$.fee == 0"],
    "timeout_seconds": 120,
    "criticality": "high",
}


def problems(err: grpc.aio.AioRpcError) -> list[dict]:
    md = dict(err.trailing_metadata() or ())
    return json.loads(md["agency-problems"])


async def test_register_then_get_and_submit_by_id(grpc_gateway):
    agency, channel, _ = grpc_gateway
    stub = goals_pb2_grpc.GoalServiceStub(channel)
    registered = await stub.RegisterGoal(
        goals_pb2.RegisterGoalRequest(goal_json=json.dumps(GOAL, ensure_ascii=False))
    )
    assert registered.id == "GOAL_KYC_001" and registered.criticality == "high"
    assert list(registered.stages) == ["kyc"] and registered.verification_step_count == 2
    stored = json.loads(registered.goal_json)
    assert stored["verification_steps"][1] == {
        "description": "$.fee == 0",
        "kind": "json_path",
        "path": "$.fee",
        "op": "equals",
        "value": 0,
    }
    fetched = await stub.GetGoal(goals_pb2.GetGoalRequest(goal_id="GOAL_KYC_001"))
    assert fetched == registered
    assert agency.get_goal("GOAL_KYC_001").stages[0].name == "kyc"

    # a task references the goal by id; its stage is verified after the warranty step
    outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
        agency_pb2.SubmitRequest(
            text="My phone bought last week has a shattered screen, I want a replacement.",
            goal_id="GOAL_KYC_001",  # the client gives the goal and the context itself here
            input_json=json.dumps(
                {"user_id": "u_789", "device_model": "PhoneX", "fault_type": "screen_shattered"}
            ),
            steps=[
                agency_pb2.TaskStep(name="order", action="get_order_detail"),
                agency_pb2.TaskStep(name="warranty", action="warranty_check"),
                agency_pb2.TaskStep(name="shipping", action="ship_replacement"),
                agency_pb2.TaskStep(name="reply", action="compose_reply"),
            ],
        )
    )
    assert outcome.state == "completed", outcome.reason
    whole = json.loads(outcome.outcome_json)
    assert [v["stage"] for v in whole["stage_verdicts"]] == ["kyc"] and whole["failed_stage"] == ""


async def test_a_bad_goal_is_refused_with_every_problem_named(grpc_gateway):
    _, channel, _ = grpc_gateway
    stub = goals_pb2_grpc.GoalServiceStub(channel)
    bad = {
        **GOAL,
        "verification_steps": ["确保用户满意", {"kind": "regex", "pattern": "("}],
        "timeout_seconds": 0,
    }
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=json.dumps(bad)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = [p["field"] for p in problems(info.value)]
    assert fields == [
        "goal_json.verification_steps[0]",
        "goal_json.verification_steps[1].pattern",
        "goal_json.timeout_seconds",
    ]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json="{nope"))
    assert (
        info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and problems(info.value)[0]["field"] == "goal_json"
    )


async def test_not_found_and_conflicting_registration(grpc_gateway):
    _, channel, _ = grpc_gateway
    stub = goals_pb2_grpc.GoalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetGoal(goals_pb2.GetGoalRequest(goal_id="GOAL_NOPE_001"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    body = json.dumps(GOAL)
    await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=body))
    await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=body))  # identical: idempotent
    changed = json.dumps({**GOAL, "timeout_seconds": 200})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=changed))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    replaced = await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=changed, replace=True))
    assert replaced.timeout_seconds == 200
