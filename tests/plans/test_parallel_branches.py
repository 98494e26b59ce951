"""A plan's branches run at the same time, each with its own failure policy; a join waits for all."""

from __future__ import annotations

import asyncio
from typing import Any

from middleware import Agency, AgentFailure, FailureType, TaskState
from middleware.audit.record import AuditEventType
from middleware.testing import Hang, Raise, ScriptedAgent
from middleware.timeline import build_timelines, render_text

#: Long enough never to fire on a loaded machine; the branch that waits is released by an event.
PATIENCE = 60


async def no_sleep(_: float) -> None:
    return None


def goal(steps: list[dict[str, Any]], goal_id: str = "GOAL_BOTH_001") -> dict[str, Any]:
    return {
        "id": goal_id,
        "description": "look in two places at once, then answer",
        "verification_steps": ["$.merged is true"],
        "plan": {"steps": steps},
    }


FORK_JOIN = [
    {"name": "left", "action": "look_left", "after": []},
    {"name": "right", "action": "look_right", "after": []},
    {
        "name": "join",
        "action": "merge",
        "after": ["left", "right"],
        "input": {"l": "steps.left", "r": "steps.right"},
    },
]


async def agency_with(agents: dict[str, Any], steps: list[dict[str, Any]], *, slo_ms: int = 60_000) -> Agency:
    agency = Agency(sleep=no_sleep)
    for action, agent in agents.items():
        await agency.register(
            {"name": f"{action}_agent", "can_do": [action], "slo_latency_ms": slo_ms},
            agent,
        )
    agency.register_goal(goal(steps))
    return agency


def merge(request) -> dict[str, Any]:
    return {"merged": True, "seen": sorted(request.input)}


class Recorder:
    """The agents' own start and end, in the order they happened."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.started: dict[str, asyncio.Event] = {}

    def blocked(self, name: str, other: str, *, work_s: float = 0.2) -> Any:
        """An agent that works ~200 ms and cannot finish unless ``other`` has started meanwhile
        (run one after the other, it would wait for ``other`` for ever: PATIENCE, then fail)."""
        self.started.setdefault(name, asyncio.Event())
        self.started.setdefault(other, asyncio.Event())

        async def agent(request) -> dict[str, Any]:
            self.events.append((name, "start"))
            self.started[name].set()
            await asyncio.wait_for(self.started[other].wait(), PATIENCE)
            await asyncio.sleep(work_s)  # the agent's own work, not a synchronisation
            self.events.append((name, "end"))
            return {name: "found"}

        return agent


async def test_two_branches_run_together_and_the_join_waits_for_both():
    rec = Recorder()

    async def join(request) -> dict[str, Any]:
        rec.events.append(("join", "start"))
        return merge(request)

    agency = await agency_with(
        {
            "look_left": rec.blocked("left", "right"),
            "look_right": rec.blocked("right", "left"),
            "merge": join,
        },
        FORK_JOIN,
    )
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"merged": True, "seen": ["l", "r"]}  # the join got both outputs, mapped
    ev = rec.events
    # each branch started before the other ended: they overlapped
    assert ev.index(("left", "start")) < ev.index(("right", "end"))
    assert ev.index(("right", "start")) < ev.index(("left", "end"))
    # the join started after both ended
    assert ev.index(("join", "start")) > max(ev.index(("left", "end")), ev.index(("right", "end")))
    # the audit log says the same: both dispatched before either answered, the join after both
    records = [r for _, r in agency.audit.records() if r.task_id == outcome.task_id]
    order = [(r.event_type, r.detail.get("step")) for r in records]
    dispatched = [order.index((AuditEventType.DISPATCH.value, s)) for s in ("left", "right")]
    answered = [order.index((AuditEventType.AGENT_RESULT.value, s)) for s in ("left", "right")]
    assert max(dispatched) < min(answered)
    assert order.index((AuditEventType.DISPATCH.value, "join")) > max(answered)
    accepted = next(r for r in records if r.event_type == AuditEventType.PLAN_ACCEPTED)
    assert accepted.detail["branches"] == [["left", "right"]]
    # while the branches ran the task stayed dispatched (each branch's own states are not the task's)
    record = await agency.tasks.get(outcome.task_id)
    S = TaskState
    assert [t.to_state for t in record.transitions] == [
        S.ROUTING,
        S.DISPATCHED,
        S.ROUTING,
        S.DISPATCHED,
        S.VERIFYING,
        S.COMPLETED,
    ]


async def test_trace_show_draws_the_branches_side_by_side():
    rec = Recorder()
    agency = await agency_with(
        {
            "look_left": rec.blocked("left", "right"),
            "look_right": rec.blocked("right", "left"),
            "merge": merge,
        },
        FORK_JOIN,
    )
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    records = [r for _, r in agency.audit.records() if r.task_id == outcome.task_id]
    [timeline] = build_timelines(records)
    text = render_text(timeline)
    assert "Plan (goal:GOAL_BOTH_001, accepted)" in text
    assert "left" in text and "right" in text
    assert "║ parallel with right" in text or "║ parallel with left" in text
    assert "join ◄ left, right" in text
    lanes = {name: s for name, s in timeline.steps.items()}
    # the drawn bars of the two branches overlap in time
    assert lanes["left"]["start_ms"] < lanes["right"]["end_ms"]
    assert lanes["right"]["start_ms"] < lanes["left"]["end_ms"]
    assert lanes["join"]["start_ms"] >= max(lanes["left"]["end_ms"], lanes["right"]["end_ms"])


async def test_each_branch_handles_its_failures_by_its_own_policy():
    rec = Recorder()
    slow_right = rec.blocked("right", "left", work_s=0)
    flaky_left = ScriptedAgent(Hang(), {"left": "found on the second try"})
    rec.started.setdefault("left", asyncio.Event())

    async def left(request):
        rec.started["left"].set()
        return await flaky_left(request)

    agency = Agency(sleep=no_sleep)
    await agency.register({"name": "left_agent", "can_do": ["look_left"], "slo_latency_ms": 50}, left)
    await agency.register(
        {"name": "right_agent", "can_do": ["look_right"], "slo_latency_ms": 60_000}, slow_right
    )
    await agency.register({"name": "merge_agent", "can_do": ["merge"], "slo_latency_ms": 60_000}, merge)
    agency.register_goal(goal(FORK_JOIN))
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    # the left branch timed out and was retried; the right one never noticed
    assert [(f.type, f.step) for f in outcome.failures] == [(FailureType.TOOL_TIMEOUT, "left")]
    assert [r.kind.value for r in outcome.resolutions] == ["retry"]
    steps = {s.name: s for s in outcome.steps}
    assert steps["left"].attempts == 2 and steps["right"].attempts == 1


def failing_left(done: asyncio.Event) -> ScriptedAgent:
    """Fails three times (a retry, another, then a person must decide); then succeeds."""

    def fail(request):
        if len(agent.requests) == 3:
            done.set()
        raise AgentFailure("TOOL_ERROR", "the left archive is locked")

    agent = ScriptedAgent(fail, fail, fail, {"left": "found after the person said retry"})
    return agent


async def test_a_branch_that_stops_waits_for_the_other_then_stops_the_task_and_resumes_alone():
    left_failed = asyncio.Event()
    right_events: list[str] = []

    async def right(request):
        right_events.append("start")
        await asyncio.wait_for(left_failed.wait(), PATIENCE)  # still running when the left one stops
        right_events.append("end")
        return {"right": "found"}

    left = failing_left(left_failed)
    right_agent = ScriptedAgent(right)
    agency = await agency_with({"look_left": left, "look_right": right_agent, "merge": merge}, FORK_JOIN)
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.pending["kind"] == "human_handover" and outcome.pending["blocking_point"]["step"] == "left"
    steps = {s.name: s.status for s in outcome.steps}
    assert steps == {"left": "failed", "right": "completed"}  # the join never ran; right was waited for
    assert right_events == ["start", "end"]
    records = [r for _, r in agency.audit.records() if r.task_id == outcome.task_id]
    types = [(r.event_type, r.detail.get("step")) for r in records]
    assert types.index((AuditEventType.AGENT_RESULT.value, "right")) < types.index(
        (AuditEventType.TASK_COMPLETED.value, None)
    )
    # a person says retry: only the stopped branch runs again, then the join
    resumed = await agency.resume(outcome.task_id, decision={"action": "retry", "by": "ops"})
    assert resumed.state is TaskState.COMPLETED, resumed.reason
    assert right_agent.calls == 1 and left.calls == 4
    assert resumed.output["merged"] is True


async def test_a_branch_the_plan_may_skip_lets_the_join_go_on_without_it():
    steps = [
        {"name": "left", "action": "look_left", "after": []},
        {"name": "right", "action": "look_right", "after": [], "on_failure": "continue"},
        {
            "name": "join",
            "action": "merge",
            "after": ["left", "right"],
            "input": {"l": "steps.left", "r": {"from": "steps.right", "optional": True}},
        },
    ]
    broken = ScriptedAgent(Raise(AgentFailure("TOOL_ERROR", "the right archive burnt down")))
    joiner = ScriptedAgent(merge)
    agency = await agency_with(
        {"look_left": ScriptedAgent({"left": "found"}), "look_right": broken, "merge": joiner}, steps
    )
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"merged": True, "seen": ["l"]}  # the optional input was left out
    assert {s.name: s.status for s in outcome.steps}["right"] == "skipped"
    skipped = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.PLAN_SKIPPED]
    assert skipped[0].detail["step"] == "right" and "burnt down" in skipped[0].detail["failure"]


async def test_the_console_task_page_shows_the_plan_and_both_branches_bars():
    import re

    import httpx
    from humans.cases import TOKENS, people

    from middleware.people import Person
    from middleware.people.desk import HumanDesk
    from middleware.server.console import build_app

    rec = Recorder()
    agency = await agency_with(
        {
            "look_left": rec.blocked("left", "right"),
            "look_right": rec.blocked("right", "left"),
            "merge": merge,
        },
        FORK_JOIN,
    )
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    app = build_app(HumanDesk(agency, [Person.model_validate(p) for p in people()]), secret="s" * 40)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as c:
        page = await c.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        await c.post("/signin", data={"csrf": csrf, "token": TOKENS["alice"]})
        html = (await c.get(f"/tasks/{outcome.task_id}")).text
    plan = html.split('id="task-plan"', 1)[1].split("</section>", 1)[0]
    assert "goal:GOAL_BOTH_001 · accepted" in plan
    assert "left  ║ parallel with right" in plan and "join ◄ left, right  (waits for all)" in plan
    assert "left · look_left_agent@1.0.0 · attempt 1" in html and "right · look_right_agent@1.0.0" in html


async def test_stages_of_two_branches_verified_at_the_same_time_are_both_kept():
    both_checking = asyncio.Barrier(2)

    async def looked(output: Any) -> bool:
        await asyncio.wait_for(both_checking.wait(), PATIENCE)  # each stage is verified while the other is
        return True

    agency = Agency(sleep=no_sleep)
    agency.verifier.checks.register("looked", looked)
    for action in ("look_left", "look_right", "merge"):
        await agency.register(
            {"name": f"{action}_agent", "can_do": [action], "slo_latency_ms": 60_000}, merge
        )
    agency.register_goal(
        goal(FORK_JOIN)
        | {
            "stages": [
                {
                    "name": "left_seen",
                    "step": "left",
                    "verification_steps": [{"kind": "custom", "name": "looked"}],
                },
                {
                    "name": "right_seen",
                    "step": "right",
                    "verification_steps": [{"kind": "custom", "name": "looked"}],
                },
            ]
        }
    )
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert sorted(v.stage for v in outcome.stage_verdicts) == ["left_seen", "right_seen"]


async def test_the_goals_timeout_ends_branches_still_running():
    left, right = ScriptedAgent(Hang()), ScriptedAgent(Hang())
    agency = await agency_with({"look_left": left, "look_right": right, "merge": merge}, FORK_JOIN)
    agency.register_goal(goal(FORK_JOIN) | {"timeout_seconds": 1}, replace=True)
    outcome = await agency.submit({"text": "where is it?", "goal_id": "GOAL_BOTH_001"})
    assert [f.type for f in outcome.failures] == [FailureType.GOAL_TIMEOUT]
    assert outcome.state is TaskState.INPUT_REQUIRED  # a person takes over
    assert left.calls == right.calls == 1  # both were running together when the time ran out
    record = await agency.tasks.get(outcome.task_id)
    assert record.state is TaskState.INPUT_REQUIRED
