"""Plans owned by goals: the user's sentence alone completes the warranty case (seed §4.2)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from middleware import Agency, InvalidInput, NotFound, TaskState
from middleware.audit.record import AuditEventType
from middleware.demo import (
    WARRANTY_GOAL,
    WARRANTY_STEPS,
    build_demo_agency,
    clock_on,
    demo_config,
    failing_claim_request,
    warranty_request,
)
from middleware.tasks import TaskStep


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture(params=[date(2026, 6, 15), date(2028, 2, 29), date(2027, 1, 1)], ids=str)
async def agency(request):
    clock = clock_on(request.param)
    agency = await build_demo_agency(Agency(config=demo_config(), clock=clock, sleep=no_sleep))
    yield agency
    await agency.close()


def records(agency: Agency, task_id: str, event: AuditEventType) -> list:
    return [r for _, r in agency.audit.records() if r.task_id == task_id and r.event_type == event]


async def test_the_users_sentence_alone_completes_the_warranty_case(agency):
    request = warranty_request()
    assert request.steps == [] and request.goal_id == ""  # only what the user said, and who
    outcome = await agency.submit(request)
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.goal_id == "GOAL_WARRANTY_001" and outcome.goal_verdict.passed
    assert [s.name for s in outcome.steps] == ["intake", "order", "warranty", "shipping", "reply"]
    assert "EXP123456" in outcome.output["reply"]
    [accepted] = records(agency, outcome.task_id, AuditEventType.PLAN_ACCEPTED)
    assert accepted.detail["source"] == "goal:GOAL_WARRANTY_001"
    assert [(s["name"], s["after"]) for s in accepted.detail["steps"]] == [
        ("intake", []),
        ("order", ["intake"]),
        ("warranty", ["order"]),
        ("shipping", ["warranty"]),
        ("reply", ["shipping"]),
    ]


async def test_each_step_gets_only_what_its_plan_maps(agency):
    outcome = await agency.submit(warranty_request())
    order = agency.agents.get("order_agent@1.0.0").requests[-1].input
    # what the customer said of the purchase ("last week") goes along: the order system falls
    # back on it for a customer it has no order of
    assert set(order) == {"user_id", "device_model", "purchase_date"} and order["device_model"] == "PhoneX"
    warranty = agency.agents.get("warranty_agent@2.1.0").requests[-1].input
    assert set(warranty) == {"user_id", "device_model", "fault_type", "accidental", "purchase_date", "order"}
    assert warranty["order"] == outcome.steps[1].output  # an earlier output, by name
    shipping = agency.agents.get("express_shipper@1.0.0").requests[-1].input
    assert set(shipping) == {"warranty", "order", "language"} and shipping["language"] == "zh"


@pytest.mark.parametrize(
    ("kind", "why"),
    [("accidental", "$..accidental is True, expected False"), ("expired", "14 months ago, more than 12")],
)
async def test_claims_the_warranty_does_not_cover_still_fail_with_their_reason(agency, kind, why):
    outcome = await agency.submit(failing_claim_request(kind))
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.failed_stage == "eligibility" and why in outcome.reason
    assert outcome.pending["kind"] == "human_handover"
    assert agency.agents.get("express_shipper@1.0.0").calls == 0  # nothing shipped


async def test_a_client_may_still_send_the_steps_and_they_are_checked_against_the_plan(agency):
    sent = warranty_request().model_copy(update={"steps": list(WARRANTY_STEPS), "session_id": ""})
    outcome = await agency.submit(sent)
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert records(agency, outcome.task_id, AuditEventType.PLAN_ACCEPTED) == []  # the client's plan ran
    wrong = [*WARRANTY_STEPS[:2], TaskStep(name="warranty", action="warranty_claim"), *WARRANTY_STEPS[3:]]
    with pytest.raises(InvalidInput) as refused:
        await agency.submit(
            {**sent.model_dump(), "task_id": "t_wrong", "goal_id": "GOAL_WARRANTY_001", "steps": wrong}
        )
    assert [str(p) for p in refused.value.problems] == [
        "steps[2].action: step 'warranty' of goal GOAL_WARRANTY_001's plan does warranty_check, "
        "not warranty_claim"
    ]
    # the same steps with the goal anchored by the greeting agent mid-task: stopped there, not run
    outcome = await agency.submit({**sent.model_dump(), "task_id": "t_wrong2", "steps": wrong})
    assert outcome.state is TaskState.FAILED
    assert "does warranty_check, not warranty_claim" in outcome.reason
    assert [s.name for s in outcome.steps] == ["intake"]


async def test_a_goal_named_by_the_client_asks_the_agent_its_plan_names_for_what_is_missing(agency):
    request = warranty_request().model_copy(update={"goal_id": "GOAL_WARRANTY_001", "session_id": ""})
    outcome = await agency.submit(request)
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    # no intake ran first: the warranty step lacked the fault type, and its plan says the
    # greeting agent (extract_intent) supplies what is missing
    assert [s.name for s in outcome.steps] == ["order", "warranty-supply", "warranty", "shipping", "reply"]
    greeting = agency.agents.get("greeting_agent@1.0.0")
    assert greeting.calls == 1 and greeting.requests[0].step == "warranty-supply"
    assert agency.agents.get("warranty_agent@2.1.0").requests[-1].input["fault_type"] == "screen_shattered"


async def test_a_goal_whose_plan_does_not_fit_the_contracts_is_refused_at_registration(agency):
    bad = WARRANTY_GOAL.model_dump(mode="json")
    bad["id"] = "GOAL_WARRANTY_002"
    del bad["plan"]["steps"][1]["input"]["device_model"]
    with pytest.raises(InvalidInput) as refused:
        await agency.check_plan(bad)
    assert [str(p) for p in refused.value.problems] == [
        "goal.plan.steps[1].input.device_model: warranty_agent@2.1.0 requires 'device_model'; "
        "the step's input does not map it"
    ]
    await agency.check_plan(WARRANTY_GOAL)  # the demo's own plan fits


async def test_goal_service_refuses_a_plan_the_contracts_cannot_run_naming_the_field(grpc_gateway):
    import grpc

    from middleware._proto.agency.v1 import goals_pb2, goals_pb2_grpc

    agency, channel, _ = grpc_gateway
    bad = WARRANTY_GOAL.model_dump(mode="json")
    bad["id"] = "GOAL_WARRANTY_003"
    bad["plan"]["steps"][2]["input"].pop("warranty")
    stub = goals_pb2_grpc.GoalServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=json.dumps(bad)), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(refused.value.trailing_metadata())
    assert trailers["agency-field"] == "goal_json.plan.steps[2].input.warranty"
    assert "express_shipper@1.0.0 requires 'warranty'" in refused.value.details()
    with pytest.raises(NotFound):
        agency.get_goal("GOAL_WARRANTY_003")  # nothing registered
    good = WARRANTY_GOAL.model_dump(mode="json") | {"id": "GOAL_WARRANTY_004"}
    registered = await stub.RegisterGoal(
        goals_pb2.RegisterGoalRequest(goal_json=json.dumps(good)), timeout=10
    )
    assert list(registered.plan_steps) == ["order", "warranty", "shipping", "reply"]


def test_the_definition_file_checks_each_goals_plan_against_its_contracts():
    from pathlib import Path

    import yaml

    from middleware.server.definition import definition_from

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "ecommerce.yaml").read_text())
    del data["goals"][0]["plan"]["steps"][1]["input"]["device_model"]
    with pytest.raises(InvalidInput) as refused:
        definition_from(data, env={})
    assert [str(p) for p in refused.value.problems] == [
        "goals[0].plan.steps[1].input.device_model: warranty_agent@2.1.0 requires 'device_model'; "
        "the step's input does not map it"
    ]
    data["goals"][0]["plan"]["steps"][2]["action"] = "issue_refund"  # outside the goal's own scope
    with pytest.raises(InvalidInput, match=r"plan.steps\[2\].action: issue_refund is outside"):
        definition_from(data, env={})


def test_goal_lint_holds_a_plan_against_the_catalog_it_is_given(tmp_path, capsys):
    from middleware.cli import main

    bad = WARRANTY_GOAL.model_dump(mode="json")
    del bad["plan"]["steps"][1]["input"]["device_model"]
    goals = tmp_path / "goals.json"
    goals.write_text(json.dumps({"goals": [bad]}))
    catalog = Path(__file__).resolve().parents[2] / "examples" / "ecommerce.yaml"
    assert main(["goal", "lint", str(goals), "--catalog", str(catalog)]) == 1
    out = capsys.readouterr().out
    assert "plan.steps[1].input.device_model: warranty_agent@2.1.0 requires 'device_model'" in out
    assert "[plan-contract]" in out
    assert main(["goal", "lint", str(catalog), "--catalog", str(catalog)]) == 0  # the shipped plan fits
