"""A Cedar policy asked when a person approves a held step (docs/security.md)."""

from __future__ import annotations

import pytest

from middleware import TaskState
from middleware.guards.cedar_policy import CedarPolicyEngine
from middleware.guards.policy import PolicyDenied, PolicyGate

from .conftest import TOKENS, records, refund_agency, refund_request

POLICY = """
@id("bob-approves-no-refunds")
forbid(principal == Person::"bob", action == Action::"approve", resource)
when { resource.name == "refund_executor" };
"""


async def test_a_policy_forbids_an_approver_and_the_task_keeps_waiting() -> None:
    agency, desk, refunds = await refund_agency(policy=PolicyGate(CedarPolicyEngine(POLICY, default="allow")))
    waiting = await agency.submit(refund_request(30))
    bob = desk.authenticate(TOKENS["bob"])
    assert bob is not None
    (esc,) = await desk.inbox(bob)
    with pytest.raises(PolicyDenied) as denied:
        await desk.decide(esc.id, bob, choice="approve")
    assert denied.value.policy == "bob-approves-no-refunds" and refunds.calls == 0
    (decision,) = [
        r
        for r in records(agency, "policy.decision", waiting.task_id)
        if r.detail["request"]["action"] == "approve"
    ]
    assert decision.outcome == "deny" and decision.rule == "policy:bob-approves-no-refunds"
    assert decision.detail["request"]["principal"] == {
        "type": "Person",
        "id": "bob",
        "attrs": {"roles": ["approver"]},
    }
    assert (await agency.get_task(waiting.task_id)).state is TaskState.INPUT_REQUIRED
