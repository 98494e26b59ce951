"""Takeover: the running tasks of a gateway that died are interrupted by exactly one replica,
their in-flight load released, and resumed only where the contract allows a repeat.

Replicas here are ``Agency`` objects sharing one task store, one set of leases (on an
injected clock), one catalog and one set of routing statistics, as gateways share Redis;
a gateway "dies" by no longer renewing its leases (its call hangs), as with kill -9. The
same over Redis with real processes: tests/service/test_fleet.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from middleware import (
    Agency,
    AgencyConfig,
    AgentRequest,
    FailedPrecondition,
    InvalidInput,
    TaskState,
    TaskStep,
)
from middleware.errors import ConcurrentUpdate
from middleware.memory_catalog import MemoryCatalog
from middleware.memory_task_leases import MemoryTaskLeases
from middleware.memory_task_store import MemoryTaskStore
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats
from middleware.task_leases import Holder

from .conftest import Clock, FakeSleep, audit_records, contract, task

LEASE = 10.0


class Gate:
    """An agent that hangs on its first ``hang`` calls (until released), then answers."""

    def __init__(self, *, hang: int = 1) -> None:
        self.hang = hang
        self.requests: list[AgentRequest] = []
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: AgentRequest) -> Any:
        self.requests.append(request)
        self.called.set()
        if len(self.requests) <= self.hang:
            await self.release.wait()
        return {"done": len(self.requests)}


class Fleet:
    """Replicas sharing one store, leases, catalog and statistics."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = MemoryTaskStore()
        self.leases = MemoryTaskLeases(LEASE, clock=self.clock)
        self.catalog = MemoryCatalog()
        self.stats = MemoryRoutingStats()
        self.running: list[asyncio.Task[Any]] = []

    async def replica(self, node: str, agents: list[tuple[Any, Any]]) -> Agency:
        agency = Agency(
            catalog=self.catalog,
            router=Router(self.catalog, stats=self.stats),
            tasks=self.store,
            leases=self.leases,
            config=AgencyConfig(node_id=node),
            sleep=FakeSleep(),
        )
        for c, agent in agents:
            await agency.register(c, agent, replace=True)
        return agency

    def start(self, work: Any) -> asyncio.Task[Any]:
        job = asyncio.ensure_future(work)
        self.running.append(job)
        return job

    async def in_flight(self, agent: str) -> int:
        return (await self.stats.snapshot(agent)).in_flight


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    f = Fleet()
    yield f
    for job in f.running:  # the "dead" gateway's calls, still hanging
        job.cancel()
    await asyncio.gather(*f.running, return_exceptions=True)


async def _dies_while_running(
    fleet: Fleet, agent: Gate, request: Any = None, **contract_fields: Any
) -> tuple[Agency, Agency, Agency, str]:
    """Gateway a runs a task whose call hangs; b and c are its replicas. Returns their ids."""
    agents = [(contract("writer", "write", slo_ms=60_000, **contract_fields), agent)]
    a, b, c = [await fleet.replica(n, agents) for n in ("gw-a", "gw-b", "gw-c")]
    request = request or task(action="write")
    fleet.start(a.submit(request))
    await asyncio.wait_for(agent.called.wait(), 10)
    return a, b, c, request.task_id


async def test_a_dead_gateways_task_is_taken_over_once_and_marked_interrupted(fleet: Fleet) -> None:
    agent = Gate()
    _a, b, c, task_id = await _dies_while_running(fleet, agent)
    # the other replicas see where it is (saved before the dispatch), not "submitted"
    on_b = await b.get_task(task_id)
    assert on_b.state is TaskState.DISPATCHED
    assert await fleet.in_flight("writer@1.0.0") == 1

    assert await b.takeover.sweep() == [] and await c.takeover.sweep() == []  # the lease is live
    fleet.clock.advance(LEASE + 0.1)  # a never renews again: dead
    taken = await asyncio.gather(b.takeover.sweep(), c.takeover.sweep())
    assert sorted(map(len, taken)) == [0, 1], taken  # exactly one replica took it over
    winner, loser = (b, c) if taken[0] else (c, b)

    outcome = await loser.get_task(task_id)
    assert outcome.state is TaskState.INTERRUPTED
    assert outcome.a2a_state == "TASK_STATE_INPUT_REQUIRED"
    assert outcome.pending["kind"] == "interrupted" and outcome.pending["node"] == "gw-a"
    assert outcome.pending["in_flight"] is True and outcome.pending["agent"] == "writer@1.0.0"
    assert outcome.pending["redispatch"] == ""
    assert "gw-a" in outcome.reason and winner.config.node_id in outcome.reason
    assert await fleet.in_flight("writer@1.0.0") == 0  # the dead call no longer weighs on ranking

    [record] = audit_records(winner, "task.interrupted", task_id)
    assert record.node == winner.config.node_id and record.detail["node"] == "gw-a"
    assert record.rule == "lease_expired" and record.detail["state"] == "dispatched"
    assert audit_records(loser, "task.interrupted", task_id) == []
    assert await fleet.leases.expired() == []  # nothing left for the next sweep


async def test_a_step_that_may_have_acted_is_not_run_again_a_person_decides(fleet: Fleet) -> None:
    agent = Gate()
    _, b, _, task_id = await _dies_while_running(fleet, agent)
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == [task_id]

    with pytest.raises(FailedPrecondition) as info:
        await b.resume(task_id)
    assert "writer@1.0.0" in info.value.message and "provide_output" in info.value.message
    assert info.value.details["step"] == "main"
    with pytest.raises(FailedPrecondition):  # nor on a person's retry
        await b.resume(task_id, decision={"action": "retry", "by": "ops"})
    assert len(agent.requests) == 1  # never called again
    assert (await b.get_task(task_id)).state is TaskState.INTERRUPTED

    done = await b.resume(task_id, decision={"action": "provide_output", "output": {"done": 1}, "by": "ops"})
    assert done.state is TaskState.COMPLETED and done.output == {"done": 1}
    assert len(agent.requests) == 1
    [resumed] = audit_records(b, "task.resumed", task_id)
    assert resumed.outcome == "accept" and resumed.detail["interrupted_at"] == "gw-a"


async def test_a_side_effect_free_step_is_dispatched_again_on_resume(fleet: Fleet) -> None:
    agent = Gate()
    _, b, _, task_id = await _dies_while_running(fleet, agent, side_effect_free=True)
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == [task_id]
    assert (await b.get_task(task_id)).pending["redispatch"] == "side_effect_free"

    done = await b.resume(task_id)
    assert done.state is TaskState.COMPLETED and done.output == {"done": 2}
    assert len(agent.requests) == 2
    [resumed] = audit_records(b, "task.resumed", task_id)
    assert resumed.outcome == "continue" and "side_effect_free" in resumed.detail["reason"]
    with pytest.raises(FailedPrecondition):  # resumed once
        await b.resume(task_id)


async def test_an_idempotent_step_runs_again_with_the_same_key_on_the_same_agent_only(fleet: Fleet) -> None:
    agent = Gate()
    _, b, _, task_id = await _dies_while_running(fleet, agent, idempotency="key")
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == [task_id]
    assert (await b.get_task(task_id)).pending["redispatch"] == "idempotency"

    await b.deregister("writer@1.0.0")  # its agent is gone: another agent would not know the key
    with pytest.raises(FailedPrecondition) as info:
        await b.resume(task_id)
    assert "only writer@1.0.0 may run it again" in info.value.message
    assert (await b.get_task(task_id)).state is TaskState.INTERRUPTED

    await b.register(contract("writer", "write", slo_ms=60_000, idempotency="key"), agent)
    done = await b.resume(task_id)
    assert done.state is TaskState.COMPLETED
    first, again = agent.requests
    assert first.idempotency_key and again.idempotency_key == first.idempotency_key
    assert again.input == first.input


async def test_a_live_gateway_renews_its_leases_and_keeps_its_tasks(fleet: Fleet) -> None:
    agent = Gate()
    a, b, _, _task_id = await _dies_while_running(fleet, agent)
    for _ in range(6):  # three leases, renewed every half lease
        fleet.clock.advance(LEASE / 2)
        assert await a.takeover.renew() == []
        assert await b.takeover.sweep() == []
    agent.release.set()
    assert (await fleet.running[0]).state is TaskState.COMPLETED
    assert a.takeover.held == frozenset()
    assert await a.takeover.renew() == []  # the next round drops the lease of the task that stopped
    fleet.clock.advance(LEASE * 2)
    assert await fleet.leases.expired() == []
    assert await b.takeover.sweep() == []  # nothing to take over


async def test_a_gateway_that_lost_its_lease_cannot_write_over_the_replica(fleet: Fleet) -> None:
    agent = Gate()
    steps = [TaskStep(name="one", action="write"), TaskStep(name="two", action="write")]
    a, b, _, task_id = await _dies_while_running(fleet, agent, task(action="write", steps=steps))
    fleet.clock.advance(LEASE + 0.1)  # a stalls past its lease (cut off from the store)
    assert await b.takeover.sweep() == [task_id]
    assert await a.takeover.renew() == [task_id]  # a learns it lost it

    agent.release.set()  # a's call comes back: its next save (before step two) is refused
    with pytest.raises(ConcurrentUpdate):
        await fleet.running[0]
    outcome = await b.get_task(task_id)
    assert outcome.state is TaskState.INTERRUPTED and outcome.pending["node"] == "gw-a"
    assert len(agent.requests) == 1  # step two never ran on a
    assert [r.detail["state"] for r in audit_records(a, "task.interrupted", task_id)] == ["dispatched"]


async def test_a_call_cut_short_is_marked_interrupted_at_once_and_resumable_anywhere(fleet: Fleet) -> None:
    agent = Gate()
    a, b, _, task_id = await _dies_while_running(fleet, agent, side_effect_free=True)
    fleet.running[0].cancel()  # the client went away: the call is cancelled
    with pytest.raises(asyncio.CancelledError):
        await fleet.running[0]
    outcome = await b.get_task(task_id)
    assert outcome.state is TaskState.INTERRUPTED and outcome.pending["node"] == "gw-a"
    assert "cancelled" in outcome.reason
    await a.takeover.renew()  # its lease is dropped with a's next round
    fleet.clock.advance(LEASE * 2)
    assert await fleet.leases.expired() == [] and await b.takeover.sweep() == []
    done = await b.resume(task_id)
    assert done.state is TaskState.COMPLETED and len(agent.requests) == 2


async def test_tasks_that_stopped_or_are_gone_are_not_taken_over(fleet: Fleet) -> None:
    agents = [(contract("writer", "write"), lambda request: {"done": True})]
    b = await fleet.replica("gw-b", agents)
    done = await b.submit(task(action="write"))
    assert done.state is TaskState.COMPLETED
    await b.takeover.renew()  # b's round drops its own lease on it
    dead = Holder(node="gw-x", token="t0")
    for task_id in (done.task_id, "task-never-created"):  # died after its outcome / before create
        assert await fleet.leases.hold(task_id, dead)
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == []
    assert (await b.get_task(done.task_id)).state is TaskState.COMPLETED
    assert await fleet.leases.expired() == []
    assert audit_records(b, "task.interrupted") == []


async def test_a_task_id_held_by_another_gateway_is_refused_without_touching_its_lease(fleet: Fleet) -> None:
    agent = Gate()
    _a, b, _, task_id = await _dies_while_running(fleet, agent)
    with pytest.raises(Exception) as info:
        await b.submit(task(action="write", task_id=task_id))
    assert type(info.value).__name__ == "AlreadyExists"
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == [task_id]  # still taken over


async def test_on_memory_storage_nothing_changes_no_lease_and_no_extra_saves() -> None:
    store = MemoryTaskStore()
    agency = Agency(tasks=store, sleep=FakeSleep())
    assert agency.takeover is None
    for name in ("one", "two"):
        await agency.register(contract(name, name), lambda request: {"ok": True})
    done = await agency.submit(
        task(steps=[TaskStep(name="one", action="one"), TaskStep(name="two", action="two")])
    )
    assert done.state is TaskState.COMPLETED
    assert (await store.get(done.task_id)).version == 2  # created, then its outcome: as before


async def test_resuming_an_interrupted_task_refuses_an_answer_and_an_approval(fleet: Fleet) -> None:
    agent = Gate()
    _, b, _, task_id = await _dies_while_running(fleet, agent, side_effect_free=True)
    fleet.clock.advance(LEASE + 0.1)
    await b.takeover.sweep()
    with pytest.raises(InvalidInput) as info:
        await b.resume(task_id, answer="accept")
    assert info.value.field == "answer"
    with pytest.raises(InvalidInput) as info:
        await b.resume(task_id, decision={"action": "approve"})
    assert info.value.field == "decision.action"


async def test_an_interrupted_task_is_canceled_by_its_owner_on_any_replica(fleet: Fleet) -> None:
    agent = Gate()
    _, b, _, task_id = await _dies_while_running(fleet, agent)
    fleet.clock.advance(LEASE + 0.1)
    assert await b.takeover.sweep() == [task_id]
    canceled = await b.cancel(task_id, reason="the customer called back")
    assert canceled.state is TaskState.CANCELED and "the customer called back" in canceled.reason
    [resumed] = audit_records(b, "task.resumed", task_id)
    assert resumed.outcome == "cancel" and resumed.detail["was"] == "interrupted"
    with pytest.raises(FailedPrecondition):
        await b.resume(task_id)


async def test_a_replica_failing_midway_leaves_the_task_to_be_taken_over_again(fleet: Fleet) -> None:
    from middleware.errors import BackendUnavailable

    agent = Gate()
    _, b, c, task_id = await _dies_while_running(fleet, agent)
    fleet.clock.advance(LEASE + 0.1)
    save = fleet.store.save

    async def failing(record: Any) -> None:  # the store fails once, during b's takeover
        fleet.store.save = save  # type: ignore[method-assign]
        raise BackendUnavailable("redis failed during task_store.save")

    fleet.store.save = failing  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        await b.takeover.sweep()
    assert (await c.get_task(task_id)).state is TaskState.DISPATCHED  # not marked: not lost either
    assert await c.takeover.sweep() == []  # b holds the takeover for one lease
    fleet.clock.advance(LEASE + 0.1)
    assert await c.takeover.sweep() == [task_id]
    outcome = await c.get_task(task_id)
    assert outcome.state is TaskState.INTERRUPTED and outcome.pending["node"] == "gw-a"


async def test_a_lease_left_behind_by_a_stopped_task_is_dropped_by_the_sweep(fleet: Fleet) -> None:
    """The gateway stopped the task, then died before the round that drops its lease."""
    agents = [(contract("writer", "write"), lambda request: {"done": True})]
    a, b = [await fleet.replica(n, agents) for n in ("gw-a", "gw-b")]
    done = await a.submit(task(action="write"))
    assert done.state is TaskState.COMPLETED
    fleet.clock.advance(LEASE + 0.1)  # a never ran its round
    assert await fleet.leases.expired() == [done.task_id]
    assert await b.takeover.sweep() == []  # not running: nothing taken over, the lease dropped
    assert await fleet.leases.expired() == []
    assert (await b.get_task(done.task_id)).state is TaskState.COMPLETED
    assert audit_records(b, "task.interrupted") == []


async def test_a_task_waiting_on_one_replica_is_resumed_at_once_on_another(fleet: Fleet) -> None:
    """The stopped task's lease, not dropped until a's next round, does not stand in the way."""
    from middleware import AgentReply
    from middleware.testing import ScriptedAgent

    unsure = ScriptedAgent(AgentReply(output={"plan": "probably A"}, confidence_score=0.4))
    agents = [(contract("picker"), unsure)]
    a, b = [await fleet.replica(n, agents) for n in ("gw-a", "gw-b")]
    waiting = await a.submit(task())
    assert waiting.state is TaskState.INPUT_REQUIRED
    done = await b.resume(waiting.task_id, answer="accept")
    assert done.state is TaskState.COMPLETED
    assert await a.takeover.renew() == [] and await b.takeover.renew() == []
    fleet.clock.advance(LEASE * 2)
    assert await fleet.leases.expired() == []
