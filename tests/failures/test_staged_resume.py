"""Resume meets staged goal verification: a failed stage is redone, replaced or approved."""

from __future__ import annotations

import pytest

from middleware import TaskState, TaskStep
from middleware.testing import ScriptedAgent

from .conftest import build, contract, task

GOAL = {
    "id": "GOAL_PAYMENT_009",
    "description": "Pay only after KYC",
    "stages": [
        {"name": "kyc", "step": "kyc", "description": "KYC ok", "verification_steps": ['$.kyc equals "ok"']},
    ],
    "verification_steps": ["output contains paid"],
}
STEPS = [TaskStep(name="kyc", action="kyc"), TaskStep(name="pay", action="pay")]


async def payment(kyc_script, pay_script=({"status": "paid"},), goal=GOAL):
    kyc = ScriptedAgent(*kyc_script)
    pay = ScriptedAgent(*pay_script)
    agency, _, _ = await build([(contract("kyc_agent", "kyc"), kyc), (contract("pay_agent", "pay"), pay)])
    agency.register_goal(goal)
    return agency, kyc, pay


async def test_a_failed_stage_stops_before_the_next_step_and_a_retry_redoes_it():
    agency, kyc, pay = await payment([{"kyc": "pending"}, {"kyc": "ok"}])
    waiting = await agency.submit(task(goal_id=GOAL["id"], steps=STEPS))
    assert waiting.state is TaskState.INPUT_REQUIRED and waiting.failed_stage == "kyc"
    assert waiting.failures[-1].type.value == "GOAL_UNMET" and waiting.failures[-1].agent == "kyc_agent@1.0.0"
    assert pay.calls == 0
    assert (await agency.get_task(waiting.task_id)).stage_verdicts[0].passed is False  # persisted

    done = await agency.resume(waiting.task_id, decision={"action": "retry"})
    assert done.state is TaskState.COMPLETED and kyc.calls == 2 and pay.calls == 1
    assert done.failed_stage == "" and [v.passed for v in done.stage_verdicts] == [True]


async def test_an_output_provided_by_a_human_is_verified_like_an_agents():
    agency, _, pay = await payment([{"kyc": "pending"}])
    waiting = await agency.submit(task(goal_id=GOAL["id"], steps=STEPS))
    still = await agency.resume(
        waiting.task_id, decision={"action": "provide_output", "output": {"kyc": "still pending"}}
    )
    assert still.state is TaskState.INPUT_REQUIRED and pay.calls == 0  # the stage failed again
    done = await agency.resume(
        waiting.task_id, decision={"action": "provide_output", "output": {"kyc": "ok"}}
    )
    assert done.state is TaskState.COMPLETED and pay.calls == 1


async def test_manual_checks_are_approved_by_a_human():
    goal = {**GOAL, "verification_steps": ["output contains paid", "manual: the payee was called back"]}
    agency, _, _ = await payment([{"kyc": "ok"}], goal={**goal, "id": "GOAL_PAYMENT_010"})
    waiting = await agency.submit(task(goal_id="GOAL_PAYMENT_010", steps=STEPS))
    assert waiting.state is TaskState.INPUT_REQUIRED
    assert waiting.failures[-1].context.get("manual_pending")
    done = await agency.resume(waiting.task_id, decision={"action": "approve", "by": "carol"})
    assert done.state is TaskState.COMPLETED and done.output == {"status": "paid"}
    assert done.reason == "output of pay approved by carol"


async def test_nothing_to_approve_without_an_output():
    from middleware import InvalidInput
    from middleware.testing import Raise

    agency, _, _ = await payment([Raise(ConnectionRefusedError("down"))])
    waiting = await agency.submit(task(goal_id=GOAL["id"], steps=STEPS))
    assert waiting.pending["kind"] == "human_handover"
    with pytest.raises(InvalidInput) as info:
        await agency.resume(waiting.task_id, decision={"action": "approve"})
    assert info.value.field == "decision.action" and "no output" in str(info.value)
