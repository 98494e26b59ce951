"""The core's own records built without validation are the records validation would build.

The hot path builds the task record, its transitions and step records, the outcome, the
gateway's own SMF messages and agent requests with ``_model.trusted`` (no validation of
values the core made or already validated). Each must dump exactly as its validated twin,
and load back through validation unchanged; a message validation would refuse is still
refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from middleware import Agency, tasks
from middleware._model import trusted
from middleware.dispatcher import decision_detail, envelope
from middleware.errors import InvalidInput
from middleware.executor import StepCursor
from middleware.goals import GoalAssertion
from middleware.server.grpc_api.convert import outcome_to_pb
from middleware.smf import Provenance, SMFMessage
from middleware.tasks import (
    Outcome,
    StepRecord,
    TaskRecord,
    TaskRequest,
    TaskState,
    TaskStep,
    Transition,
    keep_outcome_json,
    outcome_json,
)
from middleware.testing import ScriptedAgent

GOAL = {"id": "GOAL_OK_001", "description": "ok", "verification_steps": ["output contains ok"]}


def _request(**extra: Any) -> TaskRequest:
    return TaskRequest.parse({"text": "work", "input": {"a": [1, 2.5, "x"]}, "user_id": "u", **extra})


def test_a_trusted_build_names_every_field() -> None:
    with pytest.raises(TypeError, match="missing"):
        trusted(Transition, {"from_state": TaskState.ROUTING, "to_state": TaskState.DISPATCHED})
    with pytest.raises(TypeError, match="unknown"):
        trusted(Provenance, {"source": "a", "reliability_score": 1.0, "extra": 1})


def test_task_record_start_is_the_validated_record() -> None:
    request = _request(session_id="s", trace_id="t" * 64)
    goal = GoalAssertion.parse(GOAL)
    run = TaskRecord.start(request, goal, request.trace_id, client="c")
    validated = TaskRecord(
        request=request,
        goal=goal,
        trace_id=request.trace_id,
        client="c",
        last_source=Provenance(source="user", reliability_score=1.0),
        created_at=run.created_at,
        updated_at=run.updated_at,
    )
    assert run.model_dump_json() == validated.model_dump_json()
    assert TaskRecord.model_validate_json(run.model_dump_json()) == validated
    run.steps.append(StepRecord.begin("main"))  # containers are the record's own
    assert TaskRecord.start(request, goal, "x").steps == []


def test_transition_and_step_record_are_the_validated_ones() -> None:
    t = Transition.now(TaskState.ROUTING, TaskState.DISPATCHED, "g1")
    assert (
        t.model_dump_json()
        == Transition(
            from_state=TaskState.ROUTING, to_state=TaskState.DISPATCHED, at=t.at, node="g1"
        ).model_dump_json()
    )
    s = StepRecord.begin("main")
    assert s.model_dump_json() == StepRecord(name="main", started_at=s.started_at).model_dump_json()


async def _finished_run() -> tuple[TaskRecord, Outcome]:
    runs: list[TaskRecord] = []
    agency = Agency()
    original = agency.tasks.save

    async def save(record: TaskRecord) -> None:
        runs.append(record)
        await original(record)

    agency.tasks.save = save  # type: ignore[method-assign]
    await agency.register({"name": "w", "can_do": ["work"], "slo_latency_ms": 5000}, ScriptedAgent({"ok": 1}))
    outcome = await agency.submit({"text": "work", "goal": GOAL, "constraints": {"action": "work"}})
    await agency.close()
    return runs[-1], outcome


async def test_the_outcome_is_the_validated_outcome() -> None:
    run, outcome = await _finished_run()
    validated = Outcome(
        task_id=run.task_id,
        trace_id=run.trace_id,
        state=run.state,
        output=run.output,
        goal_id=run.goal.id if run.goal else "",
        goal_verdict=run.verdict,
        stage_verdicts=run.stage_verdicts,
        steps=run.steps,
        failures=run.failures,
        resolutions=run.resolutions,
        routing=run.routing,
        reason=run.reason,
        pending=run.pending,
        audit_index=run.last_index,
    )
    assert outcome.model_dump_json() == validated.model_dump_json()
    assert Outcome.model_validate_json(outcome.model_dump_json()) == validated
    assert outcome.routing is not run.routing and outcome.steps is not run.steps


@pytest.mark.parametrize(
    ("pending", "a2a"),
    [({}, "TASK_STATE_INPUT_REQUIRED"), ({"kind": "approval"}, "TASK_STATE_AUTH_REQUIRED")],
)
def test_the_outcome_a2a_state_is_the_validators(pending: dict[str, Any], a2a: str) -> None:
    run = TaskRecord.start(_request(), None, "t")
    run.state, run.pending = TaskState.INPUT_REQUIRED, pending
    assert run.outcome().a2a_state == a2a
    assert Outcome.model_validate_json(run.outcome().model_dump_json()).a2a_state == a2a


def _validated_envelope(run: TaskRecord, receiver: str, content: Any, sender: str) -> SMFMessage:
    trace = [run.goal.id] if run.goal else [run.request.task_id]
    return SMFMessage.parse(
        {
            "sender": sender,
            "receiver": receiver,
            "content": content,
            "trace_id": run.trace_id,
            "metadata": {
                "provenance": run.last_source,
                "freshness_ttl": run.request.freshness_ttl,
                "confidence_score": run.request.confidence_score,
                "intention_trace": trace,
                "domain": "",
            },
        }
    )


@pytest.mark.parametrize("goal", [None, GOAL])
def test_the_gateways_own_message_is_the_validated_message(goal: dict[str, Any] | None) -> None:
    request = _request(confidence_score=0.5, freshness_ttl=12.5)
    run = TaskRecord.start(request, GoalAssertion.parse(goal) if goal else None, "t" * 32)
    built = envelope(run, "agent@1", {"a": 1}, sender="user:u")
    twin = _validated_envelope(run, "agent@1", {"a": 1}, "user:u")
    fixed = {"message_id": built.message_id, "created_at": built.created_at}
    assert built.model_dump_json() == twin.model_copy(update=fixed).model_dump_json()
    assert SMFMessage.model_validate_json(built.model_dump_json()) == built


@pytest.mark.parametrize(
    ("sender", "task_id"),
    [("user:" + "u" * 256, "t1"), ("user:u", " ")],  # a sender over 256 characters; a blank trace
)
def test_a_gateway_message_validation_refuses_is_still_refused(sender: str, task_id: str) -> None:
    run = TaskRecord.start(_request(task_id=task_id), None, "t")
    with pytest.raises(InvalidInput):
        envelope(run, "gateway", "work", sender=sender)


def test_a_gateway_message_in_a_domain_name_too_long_is_still_refused() -> None:
    run = TaskRecord.start(_request(), None, "t")
    with pytest.raises(InvalidInput):
        envelope(run, "gateway", "work", domain="d" * 65)
    assert envelope(run, "gateway", "work", domain="d" * 64).metadata.domain == "d" * 64


async def test_the_agent_request_and_the_routing_detail_are_the_validated_ones() -> None:
    seen: list[Any] = []

    async def agent(request: Any) -> Any:
        seen.append(request)
        return {"ok": 1}

    agency = Agency()
    await agency.register({"name": "w", "can_do": ["work"], "slo_latency_ms": 5000}, agent)
    await agency.submit({"text": "work", "constraints": {"action": "work"}})
    (request,) = seen
    assert type(request).model_validate(request.model_dump()).model_dump_json() == request.model_dump_json()
    assert request.deadline_ms > 0 and request.attempt == StepCursor(agent="w", fallbacks=[]).attempt
    decision = await agency.route("work", {"action": "work"})
    assert decision_detail(decision) == {
        "chosen": decision.chosen,
        "fallbacks": decision.fallbacks,
        "explanation": decision.explanation,
        "constraints": decision.constraints.model_dump(mode="json"),
        "candidates": [c.model_dump() for c in decision.candidates[:10]],
        "rejected": [r.model_dump() for r in decision.rejected[:20]],
    }
    await agency.close()
    assert TaskStep(name="main").model_dump() == {
        "name": "main",
        "action": "",
        "tags": [],
        "text": "",
        "input": {},
    }


AGENT_SAYS = {"ok": "é ✓ \u2028", "n": [1, 2.5, None]}  # non-ASCII: the bound measures UTF-8 bytes


@pytest.mark.parametrize(
    ("submit", "state"),
    [
        ({"text": "work", "goal": GOAL, "constraints": {"action": "work"}}, TaskState.COMPLETED),
        ({"text": "work", "constraints": {"action": "work"}}, TaskState.COMPLETED),
        (
            {
                "text": "work",
                "constraints": {"action": "work"},
                "goal": {**GOAL, "verification_steps": ["output contains nope"]},
            },
            TaskState.INPUT_REQUIRED,
        ),
        ({"text": "nobody does this", "constraints": {"action": "fly"}}, TaskState.REJECTED),
    ],
)
async def test_the_outcome_json_on_the_wire_is_the_outcomes_json(
    submit: dict[str, Any], state: TaskState
) -> None:
    """The pipeline serialises the outcome once (for its size bound); the edge sends those bytes
    (a failed goal ends waiting for a person: its handover packet is in ``pending``)."""
    agency = Agency()
    await agency.register(
        {"name": "w", "can_do": ["work"], "slo_latency_ms": 5000}, ScriptedAgent(AGENT_SAYS)
    )
    outcome = await agency.submit(submit)
    await agency.close()
    assert outcome.state is state and outcome.audit_index > 0
    assert id(outcome) in tasks._KEPT_JSON  # the kept bytes, not a new serialisation
    assert outcome_json(outcome) == outcome.model_dump_json().encode()
    assert outcome_to_pb(outcome).outcome_json == outcome.model_dump_json()


def test_outcome_json_is_kept_only_when_it_differs_in_the_last_records_index_alone() -> None:
    run = TaskRecord.start(_request(), None, "t")
    run.state, run.last_index = TaskState.COMPLETED, 7
    measured = run.outcome()
    data = outcome_json(measured)
    run.last_index = 12
    final = run.outcome()
    keep_outcome_json(final, measured, data)
    assert outcome_json(final) == final.model_dump_json().encode() != data
    copy = final.model_copy(update={"reason": "changed"})  # a new object: serialised anew
    assert outcome_json(copy) == copy.model_dump_json().encode()
    run.reason = "changed after it was measured"
    changed = run.outcome()
    keep_outcome_json(changed, measured, data)
    assert id(changed) not in tasks._KEPT_JSON
    assert outcome_json(changed) == changed.model_dump_json().encode()
    key = id(final)
    del final
    assert key not in tasks._KEPT_JSON  # kept only while the outcome lives
