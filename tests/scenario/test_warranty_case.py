"""The seed's warranty case (section 4) as the demo and the served example tell it."""

from __future__ import annotations

import pytest

from middleware import Agency, FailureType, TaskState
from middleware.audit import MemoryAuditLog
from middleware.demo import failing_claim_request, warranty_request


async def test_greeting_agent_extracts_the_context_and_anchors_the_goal(demo_agency):
    request = warranty_request()
    assert request.goal_id == "" and request.goal is None  # the client sends only what the user said
    outcome = await demo_agency.submit(request)
    assert outcome.state is TaskState.COMPLETED
    intake = outcome.steps[0]
    assert intake.agent == "greeting_agent@1.0.0"
    context = intake.output["context"]
    assert {"user_id", "device_model", "fault_type", "purchase_date"} <= set(context)
    assert context["user_id"] == "u_789" and context["device_model"] == "PhoneX"
    assert context["fault_type"] == "screen_shattered"
    # the warranty agent got the fault type without anyone asking again
    warranty = demo_agency.agents.get("warranty_agent@2.1.0").requests[0]
    assert warranty.input["fault_type"] == "screen_shattered"
    anchored = [r for _, r in demo_agency.audit.records() if r.event_type == "goal.anchored"]
    assert anchored[0].actors.agent == "greeting_agent@1.0.0"
    assert anchored[0].detail["context"]["device_model"] == "PhoneX"


async def test_the_reply_is_in_the_users_language(demo_agency):
    outcome = await demo_agency.submit(warranty_request())
    reply = outcome.output["reply"]
    assert reply.startswith("您好") and "PhoneX" in reply and "EXP123456" in reply and "免费" in reply


@pytest.mark.parametrize(
    ("kind", "sentence", "why"),
    [
        ("accidental", "确认故障类型为屏幕碎裂且非人为损坏", "$..accidental is True, expected False"),
        ("expired", "检查用户是否在保修期内（购机≤12个月）", "ago, more than 12 months"),
    ],
)
async def test_a_claim_the_warranty_does_not_cover_fails_the_goal(demo_agency, kind, sentence, why):
    outcome = await demo_agency.submit(failing_claim_request(kind))
    assert outcome.state is TaskState.INPUT_REQUIRED  # high criticality: a human takes over
    assert outcome.failed_stage == "eligibility"
    verdict = outcome.goal_verdict
    assert verdict is not None and not verdict.passed
    assert [s.step for s in verdict.failed_steps] == [sentence]
    assert why in verdict.failed_steps[0].reason
    assert outcome.failures[-1].type is FailureType.GOAL_UNMET
    assert why in outcome.reason
    # nothing was shipped for a claim that is not covered
    assert [s.name for s in outcome.steps] == ["intake", "order", "warranty"]
    assert demo_agency.agents.get("express_shipper@1.0.0").calls == 0
    # the human gets a suggested reply in the user's language
    packet = outcome.pending
    assert packet["kind"] == "human_handover"
    assert packet["suggested_reply"].startswith("您好")


async def test_an_english_request_gets_an_english_suggestion(demo_agency):
    request = failing_claim_request("accidental").model_copy(
        update={"text": "I dropped my phone and the screen shattered, I want a replacement"}
    )
    outcome = await demo_agency.submit(request)
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.pending["suggested_reply"].startswith("Hello")


async def test_reliability_is_computed_not_inherited():
    from middleware.demo import build_demo_agency

    async def no_sleep(_: float) -> None:
        return None

    audit = MemoryAuditLog()
    agency = await build_demo_agency(Agency(sleep=no_sleep, audit=audit))
    outcome = await agency.submit(warranty_request())
    assert outcome.state is TaskState.COMPLETED
    results = {r.actors.agent: r.detail for _, r in audit.records() if r.event_type == "agent.result"}
    reply = results["reply_agent@1.0.0"]
    # the reply agent named no source: it is scored as itself, not with warranty_db's 0.98
    assert reply["message"]["metadata"]["provenance"]["source"] == "reply_agent@1.0.0"
    assert reply["reliability"]["claimed"] is None
    warranty = results["warranty_agent@2.1.0"]["reliability"]
    assert warranty["claimed"] == 0.98 and warranty["source"] == "warranty_db"
    assert set(warranty) >= {"score", "authority", "recency", "consistency"}
    assert (
        warranty["score"]
        == results["warranty_agent@2.1.0"]["message"]["metadata"]["provenance"]["reliability_score"]
    )
    await agency.close()


async def test_a_goal_anchored_by_the_intake_agent_bounds_the_task_in_time():
    from middleware.testing import Hang, ScriptedAgent

    agency = Agency()
    agency.register_goal(
        {
            "id": "GOAL_QUICK_001",
            "description": "quick",
            "verification_steps": ["output contains x"],
            "timeout_seconds": 1,
        }
    )
    intake = {"intent": "quick", "goal_id": "GOAL_QUICK_001", "context": {"user_id": "u"}}
    await agency.register(
        {"name": "greeter", "can_do": ["extract_intent", "anchor_goal"]}, ScriptedAgent(intake)
    )
    await agency.register(
        {"name": "slow", "can_do": ["work"], "slo_latency_ms": 60_000}, ScriptedAgent(Hang())
    )
    outcome = await agency.submit(
        {
            "text": "hi",
            "steps": [{"name": "intake", "action": "extract_intent"}, {"name": "w", "action": "work"}],
        }
    )
    assert outcome.goal_id == "GOAL_QUICK_001"
    assert outcome.failures[-1].type is FailureType.GOAL_TIMEOUT


async def test_only_a_contract_that_may_anchor_goals_anchors_one():
    from middleware.testing import ScriptedAgent

    agency = Agency()
    agency.register_goal(
        {"id": "GOAL_QUICK_001", "description": "quick", "verification_steps": ["output contains x"]}
    )
    intake = {"intent": "quick", "goal_id": "GOAL_QUICK_001", "context": {"user_id": "u"}}
    await agency.register({"name": "greeter", "can_do": ["extract_intent"]}, ScriptedAgent(intake))
    outcome = await agency.submit({"text": "hi", "steps": [{"name": "intake", "action": "extract_intent"}]})
    assert outcome.state is TaskState.COMPLETED and outcome.goal_id == ""
    # an intake agent that anchors an unknown goal is a typed failure
    await agency.register(
        {"name": "greeter2", "can_do": ["greet", "anchor_goal"]},
        ScriptedAgent({"intent": "x", "goal_id": "GOAL_NOPE_001"}),
    )
    outcome = await agency.submit({"text": "hi", "steps": [{"name": "intake", "action": "greet"}]})
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert "GOAL_NOPE_001" in outcome.failures[0].detail


@pytest.mark.parametrize(
    "today",
    ["2026-01-31", "2026-02-28", "2026-03-31", "2026-12-31", "2027-01-01", "2028-02-29", "2026-12-01"],
)
async def test_the_case_holds_on_every_day_of_the_calendar(today):
    """The agents' dates and the goal's 12-month check follow one injected clock: month ends,
    a leap day and the turn of the year change nothing."""
    from datetime import date, timedelta

    from middleware.demo import build_demo_agency, clock_on, demo_config

    async def no_sleep(_: float) -> None:
        return None

    day = date.fromisoformat(today)
    agency = await build_demo_agency(Agency(config=demo_config(), sleep=no_sleep, clock=clock_on(day)))
    happy = await agency.submit(warranty_request())
    assert happy.state is TaskState.COMPLETED and happy.goal_verdict.passed
    assert happy.steps[1].output["purchase_date"] == (day - timedelta(days=7)).isoformat()
    assert happy.steps[2].provenance.reliability_score == pytest.approx(0.975)  # no disagreement
    for kind, why in [("accidental", "is True, expected False"), ("expired", "ago, more than 12 months")]:
        outcome = await agency.submit(failing_claim_request(kind))
        assert outcome.state is TaskState.INPUT_REQUIRED and why in outcome.reason
    await agency.close()
