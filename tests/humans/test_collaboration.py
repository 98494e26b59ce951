"""The collaboration plan (003 §6): hard cases reach a person with what to verify, the evidence
with its SMF provenance, and a suggested reply; the console shows it."""

from __future__ import annotations

from middleware import Agency, AgentReply, CapabilityContract, GoalAssertion, TaskRequest, TaskStep
from middleware.smf import Provenance
from middleware.testing import ScriptedAgent


def _contract(name: str, action: str) -> CapabilityContract:
    return CapabilityContract(name=name, can_do=[action], slo_latency_ms=500)


async def test_a_conflict_carries_a_plan_with_both_values_and_their_provenance():
    shop = ScriptedAgent(
        AgentReply(output={"price": 100}, provenance=Provenance(source="shop_db", reliability_score=0.9))
    )
    feed = ScriptedAgent(
        AgentReply(output={"price": 120}, provenance=Provenance(source="partner_feed", reliability_score=0.6))
    )
    agency = Agency()
    await agency.register(_contract("shop", "lookup"), shop)
    await agency.register(_contract("feed", "quote"), feed)
    out = await agency.submit(
        TaskRequest(
            text="what does it cost",
            steps=[TaskStep(name="list", action="lookup"), TaskStep(name="quote", action="quote")],
        )
    )
    plan = out.pending["plan"]
    assert any("shop_db and partner_feed disagree" in v for v in plan["verify"])
    sourced = [(e["value"], e["source"], e["reliability"], e["step"]) for e in plan["evidence"][:2]]
    # the reliability shown is the computed one (docs/semantics.md), not the agents' claims of
    # 0.9 and 0.6: unknown sources get the default authority, and the second answer disagrees
    # with what the task already held, so it scores lower on consistency
    assert sourced == [(100, "shop_db", 0.75, "list"), (120, "partner_feed", 0.5, "quote")]
    assert plan["evidence"][2]["label"] == "output of step list"  # what else the task gathered
    assert "price" in plan["suggested_reply"]


async def test_a_high_criticality_goal_unmet_handover_carries_a_plan_a_low_one_none():
    for criticality, expect_plan in (("high", True), ("medium", False)):
        agency = Agency()
        await agency.register(
            _contract("replier", "lookup"),
            ScriptedAgent(
                AgentReply(
                    output={"reply": "on its way"}, provenance=Provenance(source="crm", reliability_score=0.8)
                )
            ),
        )
        goal = GoalAssertion(
            id="GOAL_TRACKING_001",
            description="the reply gives a tracking number",
            verification_steps=[{"kind": "contains", "value": "tracking"}],
            criticality=criticality,
        )
        out = await agency.submit(
            TaskRequest(text="where is it", goal=goal, constraints={"action": "lookup"})
        )
        assert out.pending["kind"] == "human_handover"
        plan = out.pending["plan"]
        assert (plan is not None) is expect_plan
        if plan:
            assert plan["verify"][0].startswith("Verification failed")
            (evidence,) = plan["evidence"]
            assert (evidence["value"], evidence["source"], evidence["reliability"]) == (
                {"reply": "on its way"},
                "crm",
                0.75,  # computed (default authority, fresh, consistent), not the claimed 0.8
            )
