"""Cancel: a waiting or interrupted task ends canceled, audited with who and why; its owner or an
admin only; a finished task is refused naming its state; a canceled one answers again."""

from __future__ import annotations

import asyncio

import pytest

from middleware import AgentReply, FailedPrecondition, InvalidInput, NotFound, PermissionDenied, TaskState
from middleware.access import Principal, Role
from middleware.people import ApprovalGate, ApprovalGates
from middleware.people.model import PersonRef
from middleware.testing import ScriptedAgent

from .conftest import audit_records, audit_types, build, contract, task

HEDGED = AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5)
ALICE = Principal(name="alice", role=Role.CLIENT)
MALLORY = Principal(name="mallory", role=Role.CLIENT)
ADMIN = Principal(name="ops", role=Role.ADMIN)


async def _waiting() -> tuple[object, str]:
    agency, _, _ = await build([(contract("picker"), ScriptedAgent(HEDGED))])
    waiting = await agency.submit(task(), client="alice")
    assert waiting.state is TaskState.INPUT_REQUIRED
    return agency, waiting.task_id


async def test_the_owner_cancels_a_waiting_task_audited_with_who_and_why() -> None:
    agency, task_id = await _waiting()
    canceled = await agency.cancel(task_id, reason="customer withdrew", caller=ALICE)
    assert canceled.state is TaskState.CANCELED and canceled.a2a_state == "TASK_STATE_CANCELED"
    assert "alice" in canceled.reason and "customer withdrew" in canceled.reason
    assert (await agency.get_task(task_id)).state is TaskState.CANCELED
    [resumed] = audit_records(agency, "task.resumed", task_id)
    assert resumed.outcome == "cancel"
    assert resumed.detail["by"] == "alice" and resumed.detail["role"] == "client"
    assert resumed.detail["why"] == "customer withdrew" and resumed.detail["was"] == "input_required"
    assert audit_records(agency, "task.completed", task_id)[-1].outcome == "canceled"

    records = len(audit_types(agency))  # again: the same outcome, nothing more recorded
    again = await agency.cancel(task_id, caller=ALICE)
    assert again.state is TaskState.CANCELED and again.reason == canceled.reason
    assert len(audit_types(agency)) == records


async def test_another_client_is_refused_and_audited_an_admin_may_cancel() -> None:
    agency, task_id = await _waiting()
    with pytest.raises(PermissionDenied) as info:
        await agency.cancel(task_id, caller=MALLORY)
    assert "mallory" in info.value.message and info.value.details["operation"] == "AgencyService/Cancel"
    [refusal] = [
        r for r in audit_records(agency, "message.rejected", task_id) if r.rule == "PERMISSION_DENIED"
    ]
    assert refusal.outcome == "refused" and refusal.detail["client"] == "mallory"
    assert (await agency.get_task(task_id)).state is TaskState.INPUT_REQUIRED

    canceled = await agency.cancel(task_id, reason="duplicate", caller=ADMIN)
    assert canceled.state is TaskState.CANCELED and "ops" in canceled.reason


async def test_a_finished_task_is_refused_naming_its_state_and_bad_ids_are_named() -> None:
    agency, _, _ = await build([(contract("steady"), ScriptedAgent({"ok": True}))])
    done = await agency.submit(task())
    with pytest.raises(FailedPrecondition) as info:
        await agency.cancel(done.task_id)
    assert info.value.details == {"state": "completed"} and "is completed" in info.value.message
    with pytest.raises(NotFound):
        await agency.cancel("task-nope")
    with pytest.raises(InvalidInput) as bad:
        await agency.cancel("")
    assert bad.value.field == "task_id"
    with pytest.raises(InvalidInput) as long:
        await agency.cancel(done.task_id, reason="x" * 4001)
    assert long.value.field == "reason"


async def test_a_running_task_is_not_canceled() -> None:
    release, called = asyncio.Event(), asyncio.Event()

    async def slow(request):
        called.set()
        await release.wait()
        return {"ok": True}

    agency, _, _ = await build([(contract("slow", slo_ms=60_000), slow)])
    running = asyncio.ensure_future(agency.submit(task()))
    await asyncio.wait_for(called.wait(), 10)
    task_id = next(iter(agency._running))
    with pytest.raises(FailedPrecondition) as info:
        await agency.cancel(task_id)
    assert "only a task waiting for input or interrupted" in info.value.message
    release.set()
    assert (await running).state is TaskState.COMPLETED


async def test_a_task_waiting_for_an_approval_is_canceled_by_its_owner() -> None:
    gates = ApprovalGates([ApprovalGate(agent="refunder")])
    agency, _, _ = await build(
        [(contract("refunder", "refund"), ScriptedAgent({"ok": True}))], approvals=gates
    )
    waiting = await agency.submit(task(action="refund"), client="alice")
    assert waiting.a2a_state == "TASK_STATE_AUTH_REQUIRED"
    canceled = await agency.cancel(waiting.task_id, caller=ALICE)
    assert canceled.state is TaskState.CANCELED


async def test_a_person_of_the_console_cancels_named_with_their_roles() -> None:
    agency, task_id = await _waiting()
    person = PersonRef(name="carla", roles=["operator"])
    canceled = await agency.cancel(task_id, reason="stale request", person=person)
    assert "carla" in canceled.reason
    [resumed] = audit_records(agency, "task.resumed", task_id)
    assert resumed.detail["by"] == "carla" and resumed.detail["role"] == "operator"
