"""Missing input is a question, not an abort: the step asks for the fields, the answer resumes it."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from middleware import Agency, FailureType, InvalidInput, TaskState
from middleware.demo import build_demo_agency, clock_on, demo_config
from middleware.testing import ScriptedAgent


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def agency():
    agency = await build_demo_agency(
        Agency(config=demo_config(), clock=clock_on(date(2026, 6, 15)), sleep=no_sleep)
    )
    yield agency
    await agency.close()


def new_customer() -> dict[str, Any]:
    """A user the shop does not know, with no device fingerprint: nobody knows the phone's model."""
    return {"text": "我上周买的手机屏幕碎了，要换新", "user_id": "u_new", "input": {"user_id": "u_new"}}


async def test_a_step_whose_input_nobody_knows_asks_for_it_and_the_answer_resumes_it(agency):
    outcome = await agency.submit(new_customer())
    assert outcome.state is TaskState.INPUT_REQUIRED
    pending = outcome.pending
    assert pending["kind"] == "missing_input" and pending["step"] == "warranty"
    assert pending["fields"] == ["device_model"]
    assert pending["question"] == "为继续办理（warranty），请提供：device_model"  # in the user's language
    assert pending["schemas"] == {"device_model": {"type": "string"}}  # from the warranty contract
    assert outcome.a2a_state == "TASK_STATE_INPUT_REQUIRED"
    assert [(f.type, f.step) for f in outcome.failures] == [(FailureType.CONTEXT_AMBIGUITY, "warranty")]
    assert agency.agents.get("warranty_agent@2.1.0").calls == 0  # asked before the agent ran
    resumed = await agency.resume(outcome.task_id, input={"device_model": "PhoneX"})
    assert resumed.state is TaskState.COMPLETED, resumed.reason
    assert resumed.goal_verdict is not None and resumed.goal_verdict.passed
    assert agency.agents.get("warranty_agent@2.1.0").requests[-1].input["device_model"] == "PhoneX"
    # the answer joined the task's context: the reply step found the model too
    assert agency.agents.get("reply_agent@1.0.0").requests[-1].input["device_model"] == "PhoneX"
    resumed_records = [r for _, r in agency.audit.records() if r.event_type == "task.resumed"]
    assert resumed_records[-1].detail["input"] == ["device_model"]


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"device_model": 5}, "input.device_model: 5 is not of type 'string'"),
        ({}, "input.device_model: required (asked for)"),
        ({"device_model": "PhoneX", "imei": "1"}, "input.imei: not asked for (asked: device_model)"),
    ],
)
async def test_an_answer_must_give_what_was_asked_in_its_type(agency, given, problem):
    outcome = await agency.submit(new_customer())
    with pytest.raises(InvalidInput) as refused:
        await agency.resume(outcome.task_id, input=given)
    assert problem in [str(p) for p in refused.value.problems]
    with pytest.raises(InvalidInput, match="required: this task waits for device_model"):
        await agency.resume(outcome.task_id)
    assert (await agency.get_task(outcome.task_id)).state is TaskState.INPUT_REQUIRED  # still waiting


async def test_a_person_may_still_decide_instead_of_the_user(agency):
    outcome = await agency.submit(new_customer())
    done = await agency.resume(outcome.task_id, decision={"action": "abort", "by": "ops", "note": "fraud"})
    assert done.state is TaskState.FAILED and "aborted by ops (fraud)" in done.reason


async def test_the_plan_names_the_agent_that_supplies_what_is_missing():
    lookup = ScriptedAgent({"account": "ACC-1"})
    billing = ScriptedAgent(lambda request: {"invoice": f"for {request.input['account']}"})
    agency = Agency(sleep=no_sleep)
    await agency.register({"name": "accounts", "can_do": ["find_account"]}, lookup)
    await agency.register(
        {
            "name": "billing",
            "can_do": ["make_invoice"],
            "input_schema": {"type": "object", "required": ["account"]},
        },
        billing,
    )
    agency.register_goal(
        {
            "id": "GOAL_INVOICE_001",
            "description": "an invoice for the customer's account",
            "verification_steps": ["$.invoice exists"],
            "plan": [
                {
                    "name": "invoice",
                    "action": "make_invoice",
                    "input": {"account": ["request.account", "context.account"]},
                    "supplied_by": "find_account",
                }
            ],
        }
    )
    known = await agency.submit(
        {"text": "invoice me", "goal_id": "GOAL_INVOICE_001", "input": {"account": "A-9"}}
    )
    assert known.output == {"invoice": "for A-9"} and lookup.calls == 0  # nothing was missing
    found = await agency.submit({"text": "invoice me", "goal_id": "GOAL_INVOICE_001"})
    assert found.state is TaskState.COMPLETED, found.reason
    assert found.output == {"invoice": "for ACC-1"}
    assert lookup.requests[0].input["missing"] == ["account"]  # the supplier is told what is wanted
    assert [s.name for s in found.steps] == ["invoice-supply", "invoice"]


async def test_one_asked_field_may_be_answered_in_plain_words(agency):
    outcome = await agency.submit(new_customer())
    resumed = await agency.resume(outcome.task_id, answer="PhoneX")  # what a chat client sends
    assert resumed.state is TaskState.COMPLETED, resumed.reason
    assert agency.agents.get("warranty_agent@2.1.0").requests[-1].input["device_model"] == "PhoneX"


@pytest.mark.redis
async def test_a_planned_task_waiting_for_input_is_resumed_by_another_gateway(redis_client, redis_prefix):
    from middleware.redis.task_store import RedisTaskStore

    clock = clock_on(date(2026, 6, 15))

    async def gateway() -> Agency:
        tasks = RedisTaskStore(redis_client, prefix=redis_prefix)
        return await build_demo_agency(Agency(config=demo_config(), clock=clock, sleep=no_sleep, tasks=tasks))

    first, second = await gateway(), await gateway()
    outcome = await first.submit(new_customer())
    assert outcome.pending["kind"] == "missing_input"
    stored = await second.tasks.get(outcome.task_id)  # the plan travels with the task
    assert stored.plan is not None and stored.plan.names() == [
        "intake",
        "order",
        "warranty",
        "shipping",
        "reply",
    ]
    resumed = await second.resume(outcome.task_id, input={"device_model": "PhoneX"})
    assert resumed.state is TaskState.COMPLETED, resumed.reason
    assert second.agents.get("order_agent@1.0.0").calls == 0  # the finished steps were not run again
    assert first.agents.get("order_agent@1.0.0").calls == 1
