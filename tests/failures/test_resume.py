"""Resume: after a clarification, after a human handover, from another gateway over Redis, once."""

from __future__ import annotations

import asyncio

import pytest

from middleware import Agency, AgentReply, FailedPrecondition, InvalidInput, NotFound, TaskState, TaskStep
from middleware.errors import ConcurrentUpdate
from middleware.redis.task_store import RedisTaskStore
from middleware.testing import Raise, ScriptedAgent

from .conftest import audit_records, build, contract, task

HEDGED = AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5)


async def test_accepting_the_clarification_continues_with_the_held_answer():
    unsure = ScriptedAgent(HEDGED)
    replier = ScriptedAgent(lambda req: {"reply": f"going with {req.input['pick']['plan']}"})
    agency, _, _ = await build(
        [(contract("picker", "pick"), unsure), (contract("replier", "reply"), replier)]
    )
    request = task(steps=[TaskStep(name="pick", action="pick"), TaskStep(name="reply", action="reply")])
    waiting = await agency.submit(request)
    assert waiting.state is TaskState.INPUT_REQUIRED and replier.calls == 0

    done = await agency.resume(waiting.task_id, answer="accept")
    assert done.state is TaskState.COMPLETED
    assert done.output == {"reply": "going with probably plan A"}
    assert unsure.calls == 1  # not asked again: continued where it stopped
    resumed = audit_records(agency, "task.resumed", waiting.task_id)
    assert [(r.outcome, r.detail["answer"]) for r in resumed] == [("accept", "accept")]


async def test_answering_retry_reruns_the_step_with_the_clarification_in_its_input():
    unsure = ScriptedAgent(HEDGED, lambda req: {"plan": f"plan B ({req.input['clarification']['answer']})"})
    agency, _, _ = await build([(contract("picker"), unsure)])
    waiting = await agency.submit(task())
    done = await agency.resume(waiting.task_id, answer="retry")
    assert done.state is TaskState.COMPLETED
    assert done.output == {"plan": "plan B (No, ask again with my clarification)"}
    assert unsure.requests[1].input["clarification"]["question"].startswith("The answer is uncertain")


async def test_an_answer_outside_the_options_is_refused_and_the_task_keeps_waiting():
    agency, _, _ = await build([(contract("picker"), ScriptedAgent(HEDGED))])
    waiting = await agency.submit(task())
    with pytest.raises(InvalidInput) as info:
        await agency.resume(waiting.task_id, answer="whatever I like")
    assert info.value.field == "answer" and "accept, retry" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        await agency.resume(waiting.task_id)
    assert info.value.field == "answer"
    assert (await agency.get_task(waiting.task_id)).state is TaskState.INPUT_REQUIRED


async def test_human_decisions_after_a_handover():
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    agency, _, _ = await build([(contract("only"), down)])

    waiting = await agency.submit(task())
    assert waiting.pending["kind"] == "human_handover"
    with pytest.raises(InvalidInput) as info:
        await agency.resume(waiting.task_id, answer="accept")  # a human must decide
    assert info.value.field == "decision"
    with pytest.raises(InvalidInput) as info:
        await agency.resume(waiting.task_id, decision={"action": "use_agent"})
    assert "agent" in str(info.value)

    done = await agency.resume(
        waiting.task_id, decision={"action": "provide_output", "output": {"answer": 42}, "by": "alice"}
    )
    assert done.state is TaskState.COMPLETED and done.output == {"answer": 42}
    assert done.steps[0].agent == "human:alice"
    decision = audit_records(agency, "task.resumed", waiting.task_id)[0].detail["decision"]
    assert decision["by"] == "alice"

    aborted = await agency.resume(
        (await agency.submit(task())).task_id, decision={"action": "abort", "note": "x"}
    )
    assert aborted.state is TaskState.FAILED and "aborted by human (x)" in aborted.reason
    canceled = await agency.resume((await agency.submit(task())).task_id, decision={"action": "cancel"})
    assert canceled.state is TaskState.CANCELED and canceled.a2a_state == "TASK_STATE_CANCELED"


async def test_human_retry_on_another_agent_after_goal_unmet():
    from middleware import GoalAssertion

    goal = GoalAssertion(
        id="GOAL_TRACKING_002",
        description="tracking number given",
        verification_steps=[{"kind": "contains", "value": "tracking"}],
    )
    vague = ScriptedAgent({"reply": "on its way"})
    precise = ScriptedAgent({"reply": "tracking number EXP123456"})
    agency, _, _ = await build(
        [(contract("vague", "reply", slo_ms=50), vague), (contract("precise", "reply", slo_ms=900), precise)]
    )
    waiting = await agency.submit(task(action="reply", goal=goal))
    assert waiting.state is TaskState.INPUT_REQUIRED and waiting.failures[0].type.value == "GOAL_UNMET"
    await agency.register(contract("outsider", "something_else"), ScriptedAgent({"reply": "tracking"}))
    with pytest.raises(InvalidInput) as info:  # a human cannot route around the contracts
        await agency.resume(waiting.task_id, decision={"action": "use_agent", "agent": "outsider@1.0.0"})
    assert info.value.field == "decision.agent" and "reply is not in can_do" in str(info.value)
    done = await agency.resume(waiting.task_id, decision={"action": "use_agent", "agent": "precise@1.0.0"})
    assert done.state is TaskState.COMPLETED and done.goal_verdict.passed
    assert precise.calls == 1


async def test_resuming_a_task_that_is_not_waiting_is_refused():
    agency, _, _ = await build([(contract("ok"), ScriptedAgent({"a": 1}))])
    done = await agency.submit(task())
    with pytest.raises(FailedPrecondition) as info:
        await agency.resume(done.task_id, answer="accept")
    assert "completed, not waiting for input" in str(info.value)
    with pytest.raises(NotFound):
        await agency.resume("task_unknown", answer="accept")
    with pytest.raises(InvalidInput):
        await agency.resume("", answer="accept")


async def _gateway(redis_client, redis_prefix, agents) -> Agency:
    agency, _, _ = await build(agents, tasks=RedisTaskStore(redis_client, prefix=redis_prefix))
    return agency


async def test_resume_from_a_second_gateway_over_redis(redis_client, redis_prefix):
    first = await _gateway(redis_client, redis_prefix, [(contract("picker"), ScriptedAgent(HEDGED))])
    waiting = await first.submit(task())
    assert waiting.state is TaskState.INPUT_REQUIRED

    second_agent = ScriptedAgent({"plan": "plan B, confirmed"})
    second = await _gateway(redis_client, redis_prefix, [(contract("picker"), second_agent)])
    seen = await second.get_task(waiting.task_id)
    assert seen.state is TaskState.INPUT_REQUIRED and seen.pending == waiting.pending

    done = await second.resume(waiting.task_id, answer="retry")
    assert done.state is TaskState.COMPLETED and done.output == {"plan": "plan B, confirmed"}
    assert second_agent.calls == 1
    assert (await first.get_task(waiting.task_id)).state is TaskState.COMPLETED  # shared state


@pytest.mark.parametrize("same_gateway", [True, False])
async def test_two_concurrent_resumes_only_one_applies(redis_client, redis_prefix, same_gateway):
    gate = asyncio.Event()
    calls = 0

    async def slow_ok(request):
        nonlocal calls
        calls += 1
        await gate.wait()
        return {"plan": "rerun"}

    agents = [(contract("picker", slo_ms=5000), ScriptedAgent(HEDGED, slow_ok))]
    a = await _gateway(redis_client, redis_prefix, agents)
    b = a if same_gateway else await _gateway(redis_client, redis_prefix, agents)
    waiting = await a.submit(task())

    first = asyncio.create_task(a.resume(waiting.task_id, answer="retry"))
    second = asyncio.create_task(b.resume(waiting.task_id, answer="accept"))
    done, _ = await asyncio.wait({first, second}, return_when=asyncio.FIRST_COMPLETED)
    loser = done.pop()
    with pytest.raises((FailedPrecondition, ConcurrentUpdate)):
        loser.result()
    gate.set()
    winner = second if loser is first else first
    outcome = await winner
    assert outcome.state is TaskState.COMPLETED
    resumed = audit_records(a, "task.resumed", waiting.task_id)
    if not same_gateway:
        resumed += audit_records(b, "task.resumed", waiting.task_id)
    assert len(resumed) == 1  # only one resume was applied


async def test_an_earlier_output_gone_stale_while_waiting_is_fetched_again():
    from datetime import UTC, datetime, timedelta

    now = [datetime(2026, 11, 29, 12, 0, tzinfo=UTC)]

    def quote(request):
        return AgentReply(output={"price": 100 + len(quotes.requests)}, freshness_ttl=60, created_at=now[0])

    quotes = ScriptedAgent(quote)
    writer = ScriptedAgent(
        AgentReply(output={"text": "maybe buy"}, confidence_score=0.3, created_at=now[0]),
        lambda req: AgentReply(
            output={"text": f"buy at {req.input['quote']['price']} ({req.input['clarification']['answer']})"},
            created_at=now[0],
        ),
    )
    agency, _, _ = await build(
        [(contract("quotes", "quote"), quotes), (contract("writer", "write"), writer)], clock=lambda: now[0]
    )
    request = task(steps=[TaskStep(name="quote", action="quote"), TaskStep(name="advice", action="write")])
    waiting = await agency.submit(request)
    assert waiting.state is TaskState.INPUT_REQUIRED and quotes.calls == 1

    now[0] += timedelta(hours=2)  # the user answers two hours later: the quote is stale
    done = await agency.resume(waiting.task_id, answer="retry")
    assert done.state is TaskState.COMPLETED
    stale = [f for f in done.failures if f.type.value == "STALE_DATA"]
    assert len(stale) == 1 and stale[0].context == {"stale_step": "quote"} and stale[0].step == "advice"
    assert quotes.calls == 2  # the quote step ran again for fresh data
    assert done.output == {"text": "buy at 102 (No, ask again with my clarification)"}  # answer kept
