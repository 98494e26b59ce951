"""The pipeline hands audit records over in order and waits only at barriers, yet nothing
leaves the gateway (a dispatch, an outcome) before the records preceding it are durable."""

from __future__ import annotations

from middleware import Agency, TaskState, WalAuditLog
from middleware.testing import ScriptedAgent


async def test_records_are_durable_before_dispatch_and_outcome_and_stay_in_order(tmp_path):
    audit = WalAuditLog(tmp_path, "n1")
    agency = Agency(audit=audit)
    seen_at_dispatch: list[list[str]] = []

    def agent(request):
        # What is on disk (re-read and re-checked) when the agent runs:
        on_disk = [r for _, r in audit.records() if r.task_id == request.task_id]
        seen_at_dispatch.append([r.event_type for r in on_disk])
        return {"ok": True}

    await agency.register({"name": "worker", "can_do": ["work"], "slo_latency_ms": 5000}, agent)
    goal = {"id": "GOAL_OK_001", "description": "ok", "verification_steps": ["output contains ok"]}
    outcome = await agency.submit({"text": "work", "goal": goal, "constraints": {"action": "work"}})
    assert outcome.state is TaskState.COMPLETED

    before = seen_at_dispatch[0]
    assert before[0] == "task.submitted"
    assert before[-1] == "agent.dispatch"
    assert {"message.accepted", "goal.anchored", "routing.decision", "task.transition"} <= set(before)

    records = [(i, r) for i, r in audit.records() if r.task_id == outcome.task_id]
    kinds = [r.event_type for _, r in records]
    assert kinds[: len(before)] == before  # the log order is the order the pipeline wrote
    assert kinds[-1] == "task.completed"
    assert outcome.audit_index == records[-1][0]
    assert [i for i, _ in records] == sorted(i for i, _ in records)
    await agency.close()


async def test_concurrent_tasks_keep_their_own_order(tmp_path):
    audit = WalAuditLog(tmp_path, "n1")
    agency = Agency(audit=audit)
    await agency.register({"name": "w", "can_do": ["work"], "slo_latency_ms": 5000}, ScriptedAgent({"ok": 1}))
    import asyncio

    outcomes = await asyncio.gather(
        *(agency.submit({"text": "work", "constraints": {"action": "work"}}) for _ in range(20))
    )
    await agency.close()
    reopened = WalAuditLog(tmp_path, "n1")
    for o in outcomes:
        kinds = [r.event_type for _, r in reopened.records() if r.task_id == o.task_id]
        assert kinds[0] == "task.submitted" and kinds[-1] == "task.completed"
        assert kinds.index("routing.decision") < kinds.index("agent.dispatch") < kinds.index("agent.result")
    await reopened.close()
