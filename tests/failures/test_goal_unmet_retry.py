"""GOAL_UNMET may be configured to retry (the seed: "retry or escalate")."""

from __future__ import annotations

import pytest

from middleware import Agency, AgencyConfig, FailureType, InvalidInput, ResolutionKind, TaskState
from middleware.testing import ScriptedAgent

GOAL = {
    "id": "GOAL_REPLY_001",
    "description": "a reply with a tracking number",
    "verification_steps": ["output contains EXP"],
}


async def no_sleep(_: float) -> None:
    return None


def retrying(max_retries: int = 1) -> AgencyConfig:
    return AgencyConfig(failure_policies={"GOAL_UNMET": {"resolution": "retry", "max_retries": max_retries}})


async def test_a_failed_goal_is_retried_when_configured():
    agent = ScriptedAgent("no number yet", "tracking EXP123456")
    agency = Agency(sleep=no_sleep, config=retrying())
    await agency.register({"name": "replier", "can_do": ["reply"]}, agent)
    outcome = await agency.submit({"text": "reply", "goal": GOAL, "constraints": {"action": "reply"}})
    assert outcome.state is TaskState.COMPLETED
    assert [f.type for f in outcome.failures] == [FailureType.GOAL_UNMET]
    assert [r.kind for r in outcome.resolutions] == [ResolutionKind.RETRY]
    assert agent.calls == 2 and outcome.goal_verdict.passed


async def test_retries_run_out_and_a_person_takes_over():
    agent = ScriptedAgent("never a number")
    agency = Agency(sleep=no_sleep, config=retrying(max_retries=2))
    await agency.register({"name": "replier", "can_do": ["reply"]}, agent)
    outcome = await agency.submit({"text": "reply", "goal": GOAL, "constraints": {"action": "reply"}})
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert [f.attempt for f in outcome.failures] == [1, 2, 3]
    assert [r.kind for r in outcome.resolutions] == [
        ResolutionKind.RETRY,
        ResolutionKind.RETRY,
        ResolutionKind.ESCALATE_TO_HUMAN,
    ]
    assert agent.calls == 3


async def test_by_default_an_unmet_goal_is_not_retried():
    agent = ScriptedAgent("never a number")
    agency = Agency(sleep=no_sleep)
    await agency.register({"name": "replier", "can_do": ["reply"]}, agent)
    outcome = await agency.submit({"text": "reply", "goal": GOAL, "constraints": {"action": "reply"}})
    assert outcome.state is TaskState.INPUT_REQUIRED and agent.calls == 1


def test_use_backup_is_still_not_allowed_for_goal_unmet():
    with pytest.raises(InvalidInput) as err:
        AgencyConfig.parse({"failure_policies": {"GOAL_UNMET": {"resolution": "use_backup"}}})
    assert "allowed: abort, escalate_to_human, retry" in str(err.value)
