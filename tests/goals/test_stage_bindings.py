"""A task whose plan cannot satisfy its goal's stages is refused at Submit, naming the stage and
the missing step; every logged resolution is carried out or recorded as not carried out, with
the reason (issue 27, fourth item)."""

from __future__ import annotations

import grpc
import pytest

from middleware import (
    Agency,
    AgencyConfig,
    FailurePolicy,
    FailureType,
    ResolutionKind,
    TaskRequest,
    TaskState,
    TaskStep,
)
from middleware.demo import build_demo_agency, demo_config
from middleware.errors import InvalidInput
from middleware.goals import check_stage_bindings, stage_binding_problems
from middleware.testing import ScriptedAgent

ONLY_INTAKE = TaskRequest(
    text="我上周买的手机屏幕碎了，要换新",
    user_id="u_789",
    input={"user_id": "u_789", "device": "fp_7f3a"},
    steps=[TaskStep(name="intake", action="extract_intent")],
)


async def no_sleep(_: float) -> None:
    return None


def events(agency: Agency, event_type: str, task_id: str = "") -> list:
    return [
        r
        for _, r in agency.audit.records()
        if r.event_type == event_type and (not task_id or r.task_id == task_id)
    ]


async def test_a_plan_without_the_step_a_stage_is_bound_to_is_refused_at_submit():
    agency = await build_demo_agency(Agency(config=demo_config(), sleep=no_sleep))
    with pytest.raises(InvalidInput) as refused:
        await agency.submit(ONLY_INTAKE)
    [problem] = refused.value.problems
    assert problem.field == "goal.stages[0].step"
    assert (
        "stage 'eligibility' of goal GOAL_WARRANTY_001, anchored by greeting_agent@1.0.0," in problem.reason
    )
    assert "is bound to step 'warranty', which the task does not have (steps: intake)" in problem.reason
    # no agent is blamed, no resolution is logged that never happens
    assert events(agency, "failure.event") == [] and events(agency, "failure.resolution") == []
    [rejected] = [r for r in events(agency, "message.rejected") if r.task_id]
    assert "stage 'eligibility'" in rejected.detail["problems"][0]
    # the task ended in the log and in the store, rejected with the reason
    [ended] = events(agency, "task.completed")
    assert ended.outcome == "rejected" and "step 'warranty'" in ended.detail["reason"]
    stored = await agency.get_task(ended.task_id)
    assert stored.state is TaskState.REJECTED and "step 'warranty'" in stored.reason
    await agency.close()


async def test_the_same_refusal_over_grpc_is_invalid_argument(grpc_gateway):
    from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc

    _, channel, _ = grpc_gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    request = agency_pb2.SubmitRequest(
        text=ONLY_INTAKE.text,
        user_id="u_789",
        input_json='{"user_id": "u_789", "device": "fp_7f3a"}',
        steps=[agency_pb2.TaskStep(name="intake", action="extract_intent")],
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Submit(request)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "stage 'eligibility'" in refused.value.details() and "step 'warranty'" in refused.value.details()


async def test_a_goal_known_at_submit_is_checked_before_anything_runs():
    agency = Agency(sleep=no_sleep)
    agent = ScriptedAgent({"ok": True})
    await agency.register({"name": "a", "can_do": ["look"]}, agent)
    goal = {
        "id": "GOAL_TWO_001",
        "description": "two stages",
        "stages": [
            {"name": "first", "step": "look", "verification_steps": ["$.ok is true"]},
            {"name": "second", "step": "check", "verification_steps": ["$.ok is true"]},
        ],
    }
    with pytest.raises(InvalidInput, match="stage 'second' of goal GOAL_TWO_001 is bound to step 'check'"):
        await agency.submit({"text": "x", "goal": goal, "steps": [{"name": "look", "action": "look"}]})
    assert agent.calls == 0


def test_plan_problems_is_the_one_place_the_check_lives():
    from middleware.goals import GoalAssertion

    goal = GoalAssertion(
        id="GOAL_TWO_001",
        description="two stages",
        stages=[
            {"name": "first", "step": "look", "verification_steps": ["$.ok is true"]},
            {"name": "second", "step": "check", "verification_steps": ["$.ok is true"]},
        ],
    )
    assert stage_binding_problems(goal, ["look", "check"]) == []
    assert [p.field for p in stage_binding_problems(goal, [])] == [
        "goal.stages[0].step",
        "goal.stages[1].step",
    ]
    with pytest.raises(InvalidInput, match="steps: look"):
        check_stage_bindings(goal, ["look"])


async def test_an_intake_naming_an_unknown_goal_is_retried_for_real():
    """The agent's own mistake: its resolution (retry once, then a person) is carried out, each
    attempt in the log."""
    agency = Agency(sleep=no_sleep)
    greeter = ScriptedAgent({"intent": "x", "goal_id": "GOAL_NOPE_001", "context": {}}, name="greeter")
    await agency.register({"name": "greeter", "can_do": ["greet", "anchor_goal"]}, greeter)
    outcome = await agency.submit({"text": "hi", "steps": [{"name": "intake", "action": "greet"}]})
    assert greeter.calls == 2  # retry 1 of 1 happened
    assert [f.type for f in outcome.failures] == [FailureType.SCHEMA_VIOLATION] * 2
    assert [r.kind for r in outcome.resolutions] == [ResolutionKind.RETRY, ResolutionKind.ESCALATE_TO_HUMAN]
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert "anchored GOAL_NOPE_001, which is not a registered goal" in outcome.failures[-1].detail
    assert len(events(agency, "agent.dispatch")) == 2


async def test_a_resolution_the_executor_cannot_carry_out_is_recorded_with_the_reason():
    """A backup the policy forces when no more backups are allowed for the step: the task goes to
    a person, and the log says the backup was not carried out, why, and what happened instead."""
    config = AgencyConfig(
        max_backups=0,
        failure_policies={FailureType.TOOL_ERROR: FailurePolicy(resolution=ResolutionKind.USE_BACKUP)},
    )
    agency = Agency(sleep=no_sleep, config=config)
    broken = ScriptedAgent(lambda _: 1 / 0, name="broken")
    spare = ScriptedAgent({"ok": 1}, name="spare")
    await agency.register({"name": "broken", "can_do": ["look"], "slo_latency_ms": 100}, broken)
    await agency.register({"name": "spare", "can_do": ["look"], "slo_latency_ms": 5000}, spare)
    outcome = await agency.submit({"text": "x", "steps": [{"name": "look", "action": "look"}]})
    assert broken.calls == 1 and spare.calls == 0
    records = events(agency, "failure.resolution", outcome.task_id)
    assert [r.outcome for r in records] == ["use_backup", "not_carried_out"]
    assert records[1].detail["kind"] == "use_backup"
    assert "max_backups (0)" in records[1].detail["why"]
    assert records[1].detail["instead"] == "escalated to a person"
    assert outcome.state is TaskState.INPUT_REQUIRED and outcome.pending["kind"] == "human_handover"
    assert "not carried out" in outcome.reason
