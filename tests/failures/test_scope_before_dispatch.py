"""A goal's intention scope is enforced at routing, before dispatch; a trace that does not start
at the task's goal is INTENT_DRIFT at runtime (issue 27, third item; seed 003 §5.3)."""

from __future__ import annotations

import pytest

from middleware import Agency, AgencyConfig, AgentReply, FailurePolicy, FailureType, TaskState
from middleware.demo import build_demo_agency, demo_config, drifting_request
from middleware.errors import InvalidInput
from middleware.failures import ResolutionKind
from middleware.testing import ScriptedAgent

GOAL = {
    "id": "GOAL_WARRANTY_001",
    "description": "为用户提供符合保修条款的屏幕更换服务",
    "verification_steps": ["output contains EXP"],
    "intention_scope": {
        "actions": ["warranty_check", "ship_replacement"],
        "forbidden_fields": ["freight_quote", "freight_fee"],
    },
}
SHIPMENT = {"tracking_number": "EXP123456", "estimated_delivery": "2026-12-02"}


async def no_sleep(_: float) -> None:
    return None


def records(agency: Agency, event_type: str) -> list:
    return [r for _, r in agency.audit.records() if r.event_type == event_type]


async def warranty_agency(**kwargs) -> tuple[Agency, ScriptedAgent, ScriptedAgent]:
    agency = Agency(sleep=no_sleep, **kwargs)
    claims = ScriptedAgent({"claim_id": "CL-1", "filed": True}, name="warranty_agent")
    freight = ScriptedAgent({"freight_quote": "parcel", "freight_fee": 12.0}, name="logistics_agent")
    await agency.register({"name": "warranty_agent", "can_do": ["warranty_check", "warranty_claim"]}, claims)
    await agency.register({"name": "logistics_agent", "can_do": ["quote_freight"]}, freight)
    return agency, claims, freight


@pytest.mark.parametrize("action", ["warranty_claim", "quote_freight"])
async def test_an_action_outside_the_goals_scope_is_never_executed(action):
    agency, claims, freight = await warranty_agency()
    outcome = await agency.submit(
        {"text": "换新", "goal": GOAL, "steps": [{"name": "act", "action": action}]}
    )
    assert claims.calls == 0 and freight.calls == 0  # no side effect happened
    assert records(agency, "agent.dispatch") == []
    assert outcome.state is TaskState.INPUT_REQUIRED  # by default a person re-anchors the goal
    drift = outcome.failures[0]
    assert drift.type is FailureType.INTENT_DRIFT
    assert drift.context["before_dispatch"] is True and drift.context["judge"] == "rules"
    assert drift.context["evidence"]["action"] == action
    assert f"for action {action}, outside the scope of goal GOAL_WARRANTY_001" in drift.detail
    assert "refused before dispatch" in drift.detail
    refused = records(agency, "routing.refused")
    assert refused and refused[0].rule == "intention_scope"
    assert outcome.pending["kind"] == "human_handover"
    assert outcome.pending["blocking_point"]["failure_type"] == "INTENT_DRIFT"


async def test_by_policy_an_out_of_scope_action_is_refused_outright():
    config = AgencyConfig(
        failure_policies={FailureType.INTENT_DRIFT: FailurePolicy(resolution=ResolutionKind.ABORT)}
    )
    agency, claims, _ = await warranty_agency(config=config)
    outcome = await agency.submit(
        {"text": "换新", "goal": GOAL, "steps": [{"name": "act", "action": "warranty_claim"}]}
    )
    assert outcome.state is TaskState.FAILED and claims.calls == 0
    assert [r.kind for r in outcome.resolutions] == [ResolutionKind.ABORT]


async def test_the_router_picks_an_in_scope_agent_over_a_better_scored_one_out_of_scope():
    goal = {**GOAL, "intention_scope": {"actions": ["ship_replacement"], "tags": ["warranty_partner"]}}
    agency = Agency(sleep=no_sleep)
    fast = ScriptedAgent(SHIPMENT, name="fast")
    partner = ScriptedAgent(SHIPMENT, name="partner")
    await agency.register(
        {"name": "fast", "can_do": ["ship_replacement"], "tags": ["shipping"], "slo_latency_ms": 10}, fast
    )
    await agency.register(
        {
            "name": "partner",
            "can_do": ["ship_replacement"],
            "tags": ["shipping", "warranty_partner"],
            "slo_latency_ms": 900,
        },
        partner,
    )
    outcome = await agency.submit(
        {"text": "ship it", "goal": goal, "steps": [{"name": "ship", "action": "ship_replacement"}]}
    )
    assert outcome.state is TaskState.COMPLETED and fast.calls == 0 and partner.calls == 1
    decision = outcome.routing[0]
    assert decision["chosen"] == "partner@1.0.0" and decision["fallbacks"] == []
    assert {"agent": "fast@1.0.0", "constraint": "intention_scope"}.items() <= decision["rejected"][0].items()
    assert "outside the scope of goal GOAL_WARRANTY_001" in decision["explanation"]


async def test_the_demos_freight_step_never_runs():
    agency = await build_demo_agency(Agency(config=demo_config(), sleep=no_sleep))
    outcome = await agency.submit(drifting_request())
    assert outcome.failures[-1].type is FailureType.INTENT_DRIFT
    assert outcome.failures[-1].context["before_dispatch"] is True
    assert agency.agents.get("logistics_agent@1.0.0").calls == 0
    assert [s.name for s in outcome.steps] == ["intake", "order", "warranty"]
    await agency.close()


async def test_what_the_answer_itself_reveals_is_still_judged_after_it():
    """In scope by action, the answer carries a forbidden field: the agent ran, the drift is
    found after (the held answer goes to the person)."""
    agency = Agency(sleep=no_sleep)
    sneaky = ScriptedAgent({"tracking_number": "EXP1", "freight_fee": 12.0}, name="shipper")
    await agency.register({"name": "shipper", "can_do": ["ship_replacement"]}, sneaky)
    outcome = await agency.submit(
        {"text": "ship", "goal": GOAL, "steps": [{"name": "ship", "action": "ship_replacement"}]}
    )
    assert sneaky.calls == 1
    drift = outcome.failures[0]
    assert drift.type is FailureType.INTENT_DRIFT and "before_dispatch" not in drift.context
    assert drift.context["evidence"]["fields"] == ["freight_fee"]


async def test_a_person_cannot_route_the_step_to_an_agent_outside_the_scope():
    goal = {**GOAL, "intention_scope": {"actions": ["ship_replacement"], "tags": ["warranty_partner"]}}
    agency = Agency(sleep=no_sleep)
    await agency.register(
        {"name": "fast", "can_do": ["ship_replacement"], "tags": ["shipping"]}, ScriptedAgent(SHIPMENT)
    )
    await agency.register(
        {"name": "partner", "can_do": ["ship_replacement"], "tags": ["warranty_partner"]},
        ScriptedAgent({"no": "tracking"}),
    )
    outcome = await agency.submit(
        {"text": "ship", "goal": goal, "steps": [{"name": "ship", "action": "ship_replacement"}]}
    )
    assert outcome.state is TaskState.INPUT_REQUIRED  # the goal is unmet: a person decides
    with pytest.raises(InvalidInput, match="outside the scope of goal GOAL_WARRANTY_001"):
        await agency.resume(outcome.task_id, decision={"action": "use_agent", "agent": "fast@1.0.0"})


async def test_a_trace_that_does_not_start_at_the_tasks_goal_is_intent_drift():
    agency = Agency(sleep=no_sleep)
    elsewhere = AgentReply(output={"price": 100}, intention_trace=["GOAL_SOMETHING_ELSE"])
    agent = ScriptedAgent(elsewhere, name="pricer")
    await agency.register({"name": "pricer", "can_do": ["quote_price"]}, agent)
    goal = {"id": "GOAL_PRICE_001", "description": "a price", "verification_steps": ["$.price exists"]}
    outcome = await agency.submit(
        {"text": "price?", "goal": goal, "steps": [{"name": "quote", "action": "quote_price"}]}
    )
    assert outcome.state is not TaskState.COMPLETED
    drift = outcome.failures[0]
    assert drift.type is FailureType.INTENT_DRIFT
    assert drift.context["intention_trace"] == ["GOAL_SOMETHING_ELSE"]
    assert drift.context["expected_root"] == "GOAL_PRICE_001"
    assert "starts at GOAL_SOMETHING_ELSE, not at the task's goal GOAL_PRICE_001" in drift.detail
    # a trace rooted at the goal, however deep (up to 5), is fine
    rooted = AgentReply(output={"price": 100}, intention_trace=["GOAL_PRICE_001", "GOAL_SUB_001"])
    agency.agents.add("pricer@1.0.0", ScriptedAgent(rooted))
    outcome = await agency.submit(
        {"text": "price?", "goal": goal, "steps": [{"name": "quote", "action": "quote_price"}]}
    )
    assert outcome.state is TaskState.COMPLETED
