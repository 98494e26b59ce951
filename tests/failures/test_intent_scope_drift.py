"""INTENT_DRIFT about meaning: an answer outside the goal's intention scope (seed 3.4, 4.4)."""

from __future__ import annotations

import pytest

from middleware import Agency, FailureType, TaskState
from middleware.drift import LangChainIntentJudge, RuleBasedIntentJudge
from middleware.testing import ScriptedAgent

GOAL = {
    "id": "GOAL_WARRANTY_001",
    "description": "为用户提供符合保修条款的屏幕更换服务",
    "verification_steps": ["output contains EXP"],
    "intention_scope": {
        "actions": ["ship_replacement", "compose_reply"],
        "forbidden_fields": ["freight_quote", "freight_fee"],
    },
}
FREIGHT = {"freight_quote": "standard parcel", "freight_fee": 12.0, "currency": "CNY"}
SHIPMENT = {"tracking_number": "EXP123456", "estimated_delivery": "2026-12-02"}


async def no_sleep(_: float) -> None:
    return None


async def agency_with(output, **kwargs) -> tuple[Agency, ScriptedAgent]:
    agency = Agency(sleep=no_sleep, **kwargs)
    agent = ScriptedAgent(output, name="logistics_agent")
    await agency.register(
        {"name": "logistics_agent", "can_do": ["ship_replacement", "quote_freight"], "tags": ["shipping"]},
        agent,
    )
    return agency, agent


def request(action: str = "ship_replacement") -> dict:
    return {
        "text": "我上周买的手机屏幕碎了，要换新",
        "goal": GOAL,
        "steps": [{"name": "shipping", "action": action}],
    }


async def test_a_freight_quote_for_a_replacement_goal_is_intent_drift():
    agency, _ = await agency_with(FREIGHT)
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.INPUT_REQUIRED  # escalated to a human to re-anchor
    drift = outcome.failures[0]
    assert drift.type is FailureType.INTENT_DRIFT
    assert "freight_fee, freight_quote" in drift.detail and "GOAL_WARRANTY_001" in drift.detail
    assert drift.context["judge"] == "rules"
    assert drift.context["evidence"]["fields"] == ["freight_fee", "freight_quote"]
    assert drift.context["intention_trace"] == ["GOAL_WARRANTY_001"]  # shallow trace: still drift


async def test_a_step_routed_for_an_action_outside_the_scope_drifts():
    agency, _ = await agency_with(SHIPMENT)
    outcome = await agency.submit(request("quote_freight"))
    assert outcome.failures[0].type is FailureType.INTENT_DRIFT
    assert "quote_freight" in outcome.failures[0].detail


async def test_an_answer_in_scope_passes():
    agency, _ = await agency_with(SHIPMENT)
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.COMPLETED
    assert outcome.failures == []


async def test_without_a_scope_nothing_is_judged():
    agency, _ = await agency_with(FREIGHT)
    goal = {k: v for k, v in GOAL.items() if k != "intention_scope"}
    goal["verification_steps"] = ["output contains freight"]
    outcome = await agency.submit({**request(), "goal": goal})
    assert outcome.state is TaskState.COMPLETED


@pytest.mark.parametrize(
    ("reply", "drifts"),
    [
        ('{"drift": true, "reason": "the user wants a replacement, not a price"}', True),
        ('{"drift": false, "reason": "a shipment"}', False),
        ("not json at all", False),
    ],
)
async def test_an_optional_langchain_judge_catches_what_the_rules_do_not(reply, drifts):
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=[reply])
    # in scope for the rules (no forbidden field), but about something else
    output = {"tracking_number": "EXP123456", "note": "运费12元"}
    agency, _ = await agency_with(output, intent_judges=[RuleBasedIntentJudge(), LangChainIntentJudge(model)])
    outcome = await agency.submit(request())
    if drifts:
        assert outcome.failures[0].type is FailureType.INTENT_DRIFT
        assert outcome.failures[0].context["judge"] == "langchain"
        assert "not a price" in outcome.failures[0].detail
    else:
        assert outcome.state is TaskState.COMPLETED
