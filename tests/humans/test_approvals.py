"""Approval gates: a step waits for a person's approval; separation of duties; once; timeout."""

from __future__ import annotations

from datetime import timedelta

import pytest

from middleware import FailedPrecondition, InvalidInput, PermissionDenied, TaskState
from middleware.access import Principal, Role
from middleware.people import ApprovalGate, RedisEscalationStore
from middleware.redis.task_store import RedisTaskStore
from middleware.smf import utcnow

from .conftest import TOKENS, people, records, refund_agency, refund_request


async def test_a_gated_step_waits_in_auth_required_and_runs_once_approved():
    agency, desk, refunds = await refund_agency()
    waiting = await agency.submit(refund_request(30))
    assert waiting.state is TaskState.INPUT_REQUIRED
    assert waiting.a2a_state == "TASK_STATE_AUTH_REQUIRED"
    assert waiting.pending["kind"] == "approval" and refunds.calls == 0
    bob = desk.authenticate(TOKENS["bob"])
    assert bob is not None
    (esc,) = await desk.inbox(bob)
    assert esc.kind == "approval" and esc.task_id == waiting.task_id
    assert await desk.inbox(desk.people["alice"]) == []  # an operator is not an approver

    done = await desk.decide(esc.id, bob, choice="approve", note="customer is a regular")
    assert done is not None and done.state is TaskState.COMPLETED
    assert done.output == {"refunded": 30, "order_id": "42"} and refunds.calls == 1
    (resumed,) = records(agency, "task.resumed", waiting.task_id)
    assert resumed.detail["person"] == "bob" and resumed.detail["role"] == "approver"
    (decision,) = [r for r in records(agency, "human.decision") if r.outcome == "approve"]
    assert decision.actors.user == "bob" and decision.detail["reason"] == "customer is a regular"


async def test_a_conditional_gate_holds_only_amounts_above_the_threshold():
    gate = ApprovalGate(agent="refund_executor", path="$.amount", above=100)
    agency, _, refunds = await refund_agency([gate])
    small = await agency.submit(refund_request(50))
    assert small.state is TaskState.COMPLETED and refunds.calls == 1
    large = await agency.submit(refund_request(500))
    assert large.state is TaskState.INPUT_REQUIRED and refunds.calls == 1
    assert "$.amount = 500 is above 100" in large.pending["why"]


async def test_rejection_ends_the_task_and_needs_a_reason():
    agency, desk, refunds = await refund_agency()
    await agency.submit(refund_request(30))
    bob = desk.people["bob"]
    (esc,) = await desk.inbox(bob)
    with pytest.raises(InvalidInput) as info:
        await desk.decide(esc.id, bob, choice="reject")
    assert info.value.field == "reason"
    done = await desk.decide(esc.id, bob, choice="reject", note="duplicate refund")
    assert done is not None and done.state is TaskState.FAILED and refunds.calls == 0
    assert "rejected by bob (duplicate refund)" in done.reason


async def test_the_submitter_cannot_approve_its_own_task_and_the_refusal_is_audited():
    agency, desk, refunds = await refund_agency()
    bob = desk.people["bob"]
    waiting = await agency.submit(refund_request(30, user="bob"))
    assert await desk.inbox(bob) == []  # his own approval never reaches him (issue 27)
    esc = await desk.store.open_for_task(waiting.task_id)
    assert esc is not None and "bob" not in esc.assignees
    with pytest.raises(PermissionDenied, match="separation of duties"):  # nor by its address
        await desk.decide(esc.id, bob, choice="approve")
    assert refunds.calls == 0
    assert (await agency.get_task(waiting.task_id)).state is TaskState.INPUT_REQUIRED
    refused = [r for r in records(agency, "human.decision") if r.outcome == "refused"]
    assert refused and refused[-1].detail["person"] == "bob"
    # and over gRPC-style resume: the owning client is refused, an admin may approve
    agency2, _, refunds2 = await refund_agency()
    w2 = await agency2.submit(refund_request(30), client="shop")
    with pytest.raises(PermissionDenied):
        await agency2.resume(w2.task_id, decision={"action": "approve"}, caller=Principal(name="shop"))
    ok = await agency2.resume(
        w2.task_id, decision={"action": "approve"}, caller=Principal(name="ops", role=Role.ADMIN)
    )
    assert ok.state is TaskState.COMPLETED and refunds2.calls == 1


@pytest.mark.parametrize("submitter", ["Bob", "BOB", "b0b", "bob "])
async def test_separation_of_duties_follows_the_one_name_rule(submitter: str) -> None:
    """Issue 26: console person 'Alice' approved the task client 'alice' submitted (the
    comparison was case-sensitive). Names are one case-folded, and look-alikes are refused too."""
    agency, desk, refunds = await refund_agency()
    waiting = await agency.submit(refund_request(30), client=submitter)
    bob = desk.people["bob"]
    (esc,) = await desk.inbox(bob)
    with pytest.raises(PermissionDenied, match="separation of duties"):
        await desk.decide(esc.id, bob, choice="approve")
    assert refunds.calls == 0
    assert (await agency.get_task(waiting.task_id)).state is TaskState.INPUT_REQUIRED
    # over gRPC: an admin whose name is the submitter's in another case is the submitter
    with pytest.raises(PermissionDenied, match="separation of duties"):
        await agency.resume(
            waiting.task_id, decision={"action": "approve"}, caller=Principal(name="bob", role=Role.ADMIN)
        )


async def test_a_person_without_the_role_is_refused():
    agency, desk, refunds = await refund_agency()
    await agency.submit(refund_request(30))
    (esc,) = await desk.inbox(desk.people["bob"])
    with pytest.raises(PermissionDenied, match="approver"):
        await desk.decide(esc.id, desk.people["alice"], choice="approve")
    assert refunds.calls == 0


async def test_a_second_decision_is_refused_and_nothing_runs_twice():
    agency, desk, refunds = await refund_agency()
    await agency.submit(refund_request(30))
    bob = desk.people["bob"]
    (esc,) = await desk.inbox(bob)
    await desk.decide(esc.id, bob, choice="approve")
    with pytest.raises(FailedPrecondition, match="already answered by bob"):
        await desk.decide(esc.id, bob, choice="approve")
    assert refunds.calls == 1


async def test_an_unanswered_approval_times_out_as_a_typed_failure():
    agency, desk, refunds = await refund_agency([ApprovalGate(agent="refund_executor", timeout_seconds=60)])
    waiting = await agency.submit(refund_request(30))
    assert await desk.expire_due(utcnow()) == 0
    assert await desk.expire_due(utcnow() + timedelta(seconds=61)) == 0  # the task's own clock decides
    task = await agency.tasks.get(waiting.task_id)
    task.pending["expires_at"] = (utcnow() - timedelta(seconds=1)).isoformat()
    await agency.tasks.save(task)
    outcome = await agency.expire_approval(waiting.task_id)
    assert outcome is not None and outcome.state is TaskState.FAILED and refunds.calls == 0
    (failure,) = outcome.failures
    assert failure.type.value == "TOOL_TIMEOUT" and failure.context["approval_timeout"] is True
    assert outcome.resolutions[-1].kind.value == "abort"


@pytest.mark.redis
async def test_approval_on_another_replica_through_redis(redis_client, redis_prefix):
    def stores():
        return {
            "tasks": RedisTaskStore(redis_client, prefix=redis_prefix),
            "desk_store": RedisEscalationStore(redis_client, prefix=redis_prefix),
        }

    a, _, refunds_a = await refund_agency(**stores())
    _b, desk_b, refunds_b = await refund_agency(**stores())
    waiting = await a.submit(refund_request(30))
    bob = desk_b.people["bob"]
    (esc,) = await desk_b.inbox(bob)  # the escalation made on replica a
    assert esc.task_id == waiting.task_id
    done = await desk_b.decide(esc.id, bob, choice="approve")
    assert done is not None and done.state is TaskState.COMPLETED
    assert (refunds_a.calls, refunds_b.calls) == (0, 1)
    with pytest.raises(FailedPrecondition):
        await desk_b.decide(esc.id, bob, choice="approve")
    assert people()  # fixture sanity


async def test_the_sweeper_ends_a_timed_out_approval_and_its_escalation():
    import asyncio

    agency, desk, refunds = await refund_agency([ApprovalGate(agent="refund_executor", timeout_seconds=60)])
    waiting = await agency.submit(refund_request(30))
    (esc,) = await desk.inbox(desk.people["bob"])
    task = await agency.tasks.get(waiting.task_id)
    task.pending["expires_at"] = (utcnow() - timedelta(seconds=1)).isoformat()
    await agency.tasks.save(task)
    esc.expires_at = utcnow() - timedelta(seconds=1)
    await desk.store.put(esc)
    desk.start_sweeper(0.01)
    try:
        for _ in range(500):  # bounded poll on the task's observable state
            if (await agency.get_task(waiting.task_id)).state is TaskState.FAILED:
                break
            await asyncio.sleep(0.01)
    finally:
        await desk.stop_sweeper()
    outcome = await agency.get_task(waiting.task_id)
    assert outcome.state is TaskState.FAILED and "not given within 60" in outcome.reason
    assert (await desk.store.get(esc.id)).status == "expired"  # type: ignore[union-attr]
    assert await desk.inbox(desk.people["bob"]) == [] and refunds.calls == 0


async def test_a_task_resumed_over_grpc_leaves_the_inboxes():
    agency, desk, refunds = await refund_agency()
    waiting = await agency.submit(refund_request(30), client="shop")
    bob = desk.people["bob"]
    (esc,) = await desk.inbox(bob)
    admin = Principal(name="ops", role=Role.ADMIN)
    done = await agency.resume(waiting.task_id, decision={"action": "approve", "by": "ops"}, caller=admin)
    assert done.state is TaskState.COMPLETED and refunds.calls == 1
    assert await desk.inbox(bob) == []
    closed = await desk.store.get(esc.id)
    assert closed is not None and closed.status == "closed"
    with pytest.raises(FailedPrecondition, match="already closed"):
        await desk.decide(esc.id, bob, choice="approve")
    assert refunds.calls == 1
    (resumed,) = records(agency, "task.resumed", waiting.task_id)
    assert (resumed.detail["person"], resumed.detail["role"]) == ("ops", "admin")


async def test_a_gated_backup_is_held_too_when_an_ungated_agent_fails_over_to_it():
    from middleware import CapabilityContract
    from middleware.testing import ScriptedAgent

    def down(_: object) -> None:
        raise ConnectionError("payment API down")

    agency, desk, refunds = await refund_agency()
    fast = ScriptedAgent(down)
    await agency.register(CapabilityContract(name="refund_fast", can_do=["refund"], slo_latency_ms=50), fast)
    waiting = await agency.submit(refund_request(30))
    assert fast.calls == 1 and refunds.calls == 0  # the fast one failed; the gated backup waits
    assert waiting.pending["kind"] == "approval" and waiting.pending["agent"] == "refund_executor@1.0.0"
    (esc,) = await desk.inbox(desk.people["bob"])
    done = await desk.decide(esc.id, desk.people["bob"], choice="approve")
    assert done is not None and done.state is TaskState.COMPLETED and refunds.calls == 1


async def test_two_approvers_at_once_one_decision_wins_and_the_step_runs_once():
    import asyncio

    from middleware.people import Person

    agency, desk, refunds = await refund_agency()
    desk.people["dave"] = Person(name="dave", roles=["approver"], token_sha256="d" * 64)
    await agency.submit(refund_request(30))
    (esc,) = await desk.inbox(desk.people["bob"])
    results = await asyncio.gather(
        desk.decide(esc.id, desk.people["bob"], choice="approve"),
        desk.decide(esc.id, desk.people["dave"], choice="approve"),
        return_exceptions=True,
    )
    assert sum(isinstance(r, FailedPrecondition) for r in results) == 1
    assert sum(getattr(r, "state", None) is TaskState.COMPLETED for r in results) == 1
    assert refunds.calls == 1
