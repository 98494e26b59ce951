"""send_message, handoff, notify vs wake, and the completion watcher, over both transports."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from middleware._model import Model
from middleware.audit.record import AuditEventType
from middleware.errors import DeadlineExceeded, FailedPrecondition, InvalidInput, PermissionDenied
from middleware.messaging import (
    Flows,
    Handoff,
    ManualClock,
    MemoryMailbox,
    Runtime,
    SendMessage,
    SendOptions,
    Turn,
)

from .helpers import Env, register


class PrioritySendMessage(SendMessage):
    """Ask another agent, with a priority."""

    name = "send_message_with_priority"

    class Params(Model):
        priority: Literal["low", "normal", "high"] = "normal"


def turns_of(env: Env, agent: str) -> list[dict[str, Any]]:
    return [r.detail for r in env.events(AuditEventType.AGENT_TURN) if r.actors.agent == agent]


async def test_send_message_runs_the_recipient_and_returns_its_final_output(env: Env) -> None:
    flows = Flows()
    mgr, analyst = flows.agent("manager"), flows.agent("analyst", "Assesses risk")
    _ = mgr > analyst
    async with Runtime(flows, env.office()) as rt:

        async def manager(turn: Turn) -> str:
            answer = await turn.ctx.call_tool(
                "send_message", {"recipient_agent": "analyst", "message": "risk of plan B?"}
            )
            return f"analyst says: {answer}"

        await rt.add_agent(mgr, manager)
        await rt.add_agent(analyst, lambda turn: f"low ({turn.input}, asked by {turn.sender})")
        out = await rt.conversation("manager").user_turn("assess plan B")
    assert out == "analyst says: low (risk of plan B?, asked by manager)"
    (parent,), (child,) = turns_of(env, "manager"), turns_of(env, "analyst")
    assert child["parent_run_id"] == parent["run_id"] and parent["parent_run_id"] is None
    assert child["thread_id"] == parent["thread_id"]
    kinds = [r.detail["kind"] for r in env.events(AuditEventType.MESSAGE_ACCEPTED) if "kind" in r.detail]
    assert kinds.count("send_message") == 1 and kinds.count("send_message.reply") == 1


async def test_send_message_outside_the_flows_is_refused_and_audited(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b
    async with Runtime(flows, env.office()) as rt:

        async def b_fn(turn: Turn) -> str:
            return await turn.ctx.send_message("a", "can I message you back?")

        await rt.add_agent(a, lambda t: "hi")
        await rt.add_agent(b, b_fn)
        with pytest.raises(PermissionDenied):
            await rt.conversation("b").user_turn("go")
    refused = [r for r in env.events(AuditEventType.MESSAGE_REJECTED) if r.rule == "communication_flows"]
    assert [(r.actors.agent, r.detail["receiver"]) for r in refused] == [("b", "a")]
    assert turns_of(env, "a") == []


async def test_custom_send_message_params_are_validated_and_reach_the_recipient(env: Env) -> None:
    flows = Flows()
    front, billing = flows.agent("front"), flows.agent("billing")
    (front > billing).via(PrioritySendMessage)
    seen: list[Any] = []
    async with Runtime(flows, env.office()) as rt:

        async def front_fn(turn: Turn) -> Any:
            return await turn.ctx.call_tool(
                "send_message_with_priority",
                {"recipient_agent": "billing", "message": "refund", "priority": turn.input},
            )

        await rt.add_agent(front, front_fn)
        await rt.add_agent(billing, lambda t: seen.append(dict(t.params)) or "done")
        assert await rt.conversation("front").user_turn("high") == "done"
        with pytest.raises(InvalidInput) as err:
            await rt.conversation("front").user_turn("urgent")
    assert seen == [{"priority": "high"}] and err.value.field == "priority"


async def test_one_message_in_flight_per_thread_and_recipient_and_the_guard_does_not_leak(env: Env) -> None:
    flows = Flows()
    boss, other_boss, worker = flows.agent("boss"), flows.agent("other-boss"), flows.agent("worker")
    _ = boss > worker
    _ = other_boss > worker
    release, t1_started = asyncio.Event(), asyncio.Event()
    active: dict[str, int] = {}
    peak: dict[str, int] = {}
    order: list[str] = []

    async def worker_fn(turn: Turn) -> str:
        active[turn.thread_id] = active.get(turn.thread_id, 0) + 1
        peak[turn.thread_id] = max(peak.get(turn.thread_id, 0), active[turn.thread_id])
        order.append(f"start {turn.input}")
        if turn.input.startswith("t1"):
            t1_started.set()
            await release.wait()
        order.append(f"end {turn.input}")
        active[turn.thread_id] -= 1
        return f"did {turn.input}"

    async with Runtime(flows, env.office()) as rt:

        async def boss_fn(turn: Turn) -> list[str]:
            prefix = turn.input
            return list(
                await asyncio.gather(
                    turn.ctx.send_message("worker", f"{prefix}-first"),
                    turn.ctx.send_message("worker", f"{prefix}-second"),
                )
            )

        await rt.add_agent(boss, boss_fn)
        await rt.add_agent(other_boss, boss_fn)
        await rt.add_agent(worker, worker_fn)
        t1 = asyncio.ensure_future(rt.conversation("boss", thread_id="thread-1").user_turn("t1"))
        await asyncio.wait_for(t1_started.wait(), 5)
        # Another thread is not blocked by thread-1's in-flight message.
        assert await rt.conversation("other-boss", thread_id="thread-2").user_turn("t2") == [
            "did t2-first",
            "did t2-second",
        ]
        assert "start t1-second" not in order  # queued behind the first, not run in parallel
        assert rt.in_flight() == [("thread-1", "worker")]
        release.set()
        assert await t1 == ["did t1-first", "did t1-second"]
    assert order.index("end t1-first") < order.index("start t1-second")
    assert peak == {"thread-1": 1, "thread-2": 1}
    assert rt.in_flight() == []  # nothing left behind


async def test_a_call_cycle_is_refused_instead_of_deadlocking(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b
    _ = b > a
    async with Runtime(flows, env.office()) as rt:

        async def ping(turn: Turn) -> Any:
            other = "b" if turn.agent == "a" else "a"
            return await turn.ctx.send_message(other, "ping")

        await rt.add_agent(a, ping)
        await rt.add_agent(b, ping)
        with pytest.raises(FailedPrecondition, match="a > b"):
            await rt.conversation("a").user_turn("go")


async def test_handoff_transfers_the_conversation_with_a_reminder(env: Env) -> None:
    flows = Flows()
    triage = flows.agent("triage")
    billing = flows.agent("billing", "Refunds", handoff_reminder="You are {agent} now; finish the refund.")
    flows.connect(triage, billing, tool=Handoff)
    seen: list[tuple[str, Any]] = []
    async with Runtime(flows, env.office()) as rt:

        async def triage_fn(turn: Turn) -> str:
            await turn.ctx.call_tool("transfer_to_billing", {"recipient_agent": "billing"})
            return "transferring"

        async def billing_fn(turn: Turn) -> str:
            seen.append((turn.input, turn.history[-1]))
            return f"refund started for: {turn.input}"

        await rt.add_agent(triage, triage_fn)
        await rt.add_agent(billing, billing_fn)
        conv = rt.conversation("triage")
        assert await conv.user_turn("I want my money back") == "refund started for: I want my money back"
        assert conv.active == "billing"
        assert seen[0][1] == {
            "role": "system",
            "agent": "billing",
            "content": "You are billing now; finish the refund.",
        }
        assert await conv.user_turn("how long?") == "refund started for: how long?"
    assert len(turns_of(env, "triage")) == 1 and len(turns_of(env, "billing")) == 2
    (handoff,) = env.events(AuditEventType.AGENT_HANDOFF)
    assert handoff.actors.agent == "triage" and handoff.detail["to"] == "billing"


async def test_handoff_needs_a_handoff_edge(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b  # send_message only
    async with Runtime(flows, env.office()) as rt:

        async def a_fn(turn: Turn) -> str:
            await turn.ctx.handoff("b")
            return "?"

        await rt.add_agent(a, a_fn)
        await rt.add_agent(b, lambda t: "b")
        with pytest.raises(PermissionDenied):
            await rt.conversation("a").user_turn("go")


async def test_notify_queues_until_the_next_turn_and_wake_starts_one_at_the_turn_boundary(env: Env) -> None:
    flows = Flows()
    lead, worker = flows.agent("lead"), flows.agent("worker")
    _ = lead > worker
    gate = asyncio.Event()
    running = 0
    peak = 0
    turns: list[tuple[Any, list[Any]]] = []
    long_job_started = asyncio.Event()

    async def worker_fn(turn: Turn) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        turns.append((turn.input, [r.message.content for r in turn.inbox]))
        if turn.input == "long job":
            long_job_started.set()
            await gate.wait()
        running -= 1
        return "ok"

    async with Runtime(flows, env.office()) as rt:
        await rt.add_agent(lead, lambda t: "lead")
        await rt.add_agent(worker, worker_fn)

        # Notify only: the idle worker is not woken; the message waits for its next turn.
        await rt.post("lead", "worker", "fyi: new docs", trigger_turn=False)
        await rt.wait_idle("worker")
        assert turns == [] and rt.turns("worker") == 0

        # Busy worker: a wake-up must not start a second, concurrent turn.
        busy = asyncio.ensure_future(rt.conversation("worker").user_turn("long job"))
        await asyncio.wait_for(long_job_started.wait(), 5)
        assert turns == [("long job", ["fyi: new docs"])]  # the notify was read at the boundary
        await rt.post("lead", "worker", "urgent: fix prod", trigger_turn=True)
        with pytest.raises(DeadlineExceeded):  # busy: the wake waits for the turn boundary
            await rt.wait_idle("worker", timeout=0.2)
        assert len(turns) == 1 and running == 1
        gate.set()
        await busy
        await rt.wait_idle("worker")
        assert turns[1] == (None, ["urgent: fix prod"])  # delivered at the turn boundary

        # Idle worker: a wake-up starts a turn right away.
        await rt.post("lead", "worker", "wake up", trigger_turn=True)
        await rt.wait_idle("worker")
        assert turns[2] == (None, ["wake up"])
    assert peak == 1 and rt.turns("worker") == 3
    assert await rt.post_office.mailbox_size("worker") == 0  # everything acknowledged


async def test_a_message_redelivered_while_the_inbox_is_read_is_handed_over_once() -> None:
    # At-least-once: when reading the inbox outlasts the visibility timeout (a loaded machine),
    # the next pull of the same read brings the message back; the turn must see it once.
    # The memory transport's manual clock makes the redelivery certain (Redis runs the same code).
    clock = ManualClock()
    env = Env("memory", MemoryMailbox(clock=clock), clock)
    flows = Flows()
    lead, worker = flows.agent("lead"), flows.agent("worker")
    _ = lead > worker
    seen: list[list[Any]] = []
    office = env.office()
    pull = office.pull

    async def slow_pull(*args: Any, **kwargs: Any) -> Any:
        got = await pull(*args, **kwargs)
        env.clock.advance(0.06)  # each pull outlasts the 0.05 s visibility timeout
        return got

    office.pull = slow_pull  # type: ignore[method-assign]
    async with Runtime(flows, office) as rt:
        await rt.add_agent(lead, lambda t: "lead")
        await rt.add_agent(worker, lambda t: seen.append([r.message.content for r in t.inbox]))
        await rt.post("lead", "worker", "wake up", trigger_turn=True)
        await rt.wait_idle("worker")
    assert seen == [["wake up"]]
    assert await office.mailbox_size("worker") == 0


async def test_the_completion_watcher_tells_the_parent_without_waking_it(env: Env) -> None:
    flows = Flows()
    parent, child = flows.agent("parent"), flows.agent("child")
    _ = parent > child
    parent_inbox: list[list[Any]] = []
    hold, stuck_started = asyncio.Event(), asyncio.Event()

    async def child_fn(turn: Turn) -> Any:
        if turn.input == "fail":
            raise RuntimeError("disk full")
        if turn.input == "forever":
            stuck_started.set()
            await hold.wait()
        return {"summary": f"done {turn.input}"}

    async def parent_fn(turn: Turn) -> str:
        parent_inbox.append([r.message.content for r in turn.inbox])
        return "parent"

    async with Runtime(flows, env.office()) as rt:
        await rt.add_agent(parent, parent_fn)
        await rt.add_agent(child, child_fn)

        ok = await rt.spawn("parent", "child", "report")
        result = await rt.wait_child(ok, timeout=5)
        assert result.state == "completed" and result.output == {"summary": "done report"}
        bad = await rt.spawn("parent", "child", "fail")
        assert (await rt.wait_child(bad, timeout=5)).state == "errored"
        stuck = await rt.spawn("parent", "child", "forever")
        await asyncio.wait_for(stuck_started.wait(), 5)
        shut = await rt.shutdown_child(stuck)
        assert shut.state == "shut_down"

        await rt.wait_idle("parent")
        assert rt.turns("parent") == 0  # never woken by the notices
        await rt.conversation("parent").user_turn("what happened?")
    (notices,) = parent_inbox
    assert [(n["child"], n["state"]) for n in notices] == [
        ("child", "completed"),
        ("child", "errored"),
        ("child", "shut_down"),
    ]
    assert notices[0]["output"] == {"summary": "done report"} and "disk full" in notices[1]["error"]
    assert notices[0]["run_id"] == ok.run_id


async def test_two_runtimes_can_share_one_post_office(env: Env) -> None:
    po = env.office()
    flows_a, flows_b = Flows(), Flows()
    p1, c1 = flows_a.agent("p1"), flows_a.agent("c1")
    p2, c2 = flows_b.agent("p2"), flows_b.agent("c2")
    _ = p1 > c1
    _ = p2 > c2
    async with Runtime(flows_a, po) as rt_a, Runtime(flows_b, po) as rt_b:
        for rt, agents in ((rt_a, (p1, c1)), (rt_b, (p2, c2))):
            for agent in agents:
                await rt.add_agent(agent, lambda t: "done")
        runs = [await rt_a.spawn("p1", "c1", "x"), await rt_b.spawn("p2", "c2", "y")]
        assert [
            (await rt.wait_child(r, timeout=5)).state for rt, r in zip((rt_a, rt_b), runs, strict=True)
        ] == [
            "completed",
            "completed",
        ]
        assert rt_a.watcher_name != rt_b.watcher_name


async def test_spawn_and_post_follow_the_flows(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b
    async with Runtime(flows, env.office()) as rt:
        await rt.add_agent(a, lambda t: "a")
        await rt.add_agent(b, lambda t: "b")
        with pytest.raises(PermissionDenied):
            await rt.spawn("b", "a", "task")
        with pytest.raises(PermissionDenied):
            await rt.post("b", "a", "hello", trigger_turn=True)
    refused = [r.detail["kind"] for r in env.events(AuditEventType.MESSAGE_REJECTED)]
    assert refused == ["spawn", "post"]


async def test_a_wake_from_outside_the_runtime_starts_a_turn_and_a_notify_does_not(env: Env) -> None:
    flows = Flows()
    worker = flows.agent("worker")
    seen: list[list[Any]] = []
    po = env.office()
    async with Runtime(flows, po) as rt:
        await rt.add_agent(worker, lambda t: seen.append([r.message.content for r in t.inbox]))
        outsider = await register(po, "remote-client")  # e.g. a MessageService client
        note = outsider.message("worker", "just so you know")
        await po.send(outsider.token, note, signature=outsider.sign(note), trigger_turn=False)
        await rt.wait_idle("worker")
        assert seen == []
        job = outsider.message("worker", "please start")
        await po.send(
            outsider.token,
            job,
            signature=outsider.sign(job, SendOptions(trigger_turn=True)),
            trigger_turn=True,
        )
        await rt.wait_idle("worker")
    assert seen == [["just so you know", "please start"]]
