"""A task taken over from a gateway that died is told to its followers: the takeover's
``task.interrupted`` and the ``task.outcome`` of the interruption reach a follower on another
replica (the event log shared, as in Redis), and so does its end when it is canceled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from middleware import Agency, AgencyConfig, TaskState
from middleware.memory_catalog import MemoryCatalog
from middleware.memory_task_events import MemoryTaskEventLog
from middleware.memory_task_leases import MemoryTaskLeases
from middleware.memory_task_store import MemoryTaskStore
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats
from middleware.task_events import OUTCOME, TaskEvent
from middleware.testing import GatedAgent

from .conftest import Clock, FakeSleep, contract, task

pytestmark = pytest.mark.timeout(60)

LEASE = 10.0


async def test_a_follower_on_another_replica_is_told_of_the_takeover_and_of_the_end() -> None:
    clock, store, events = Clock(), MemoryTaskStore(), MemoryTaskEventLog()
    leases, catalog, stats = MemoryTaskLeases(LEASE, clock=clock), MemoryCatalog(), MemoryRoutingStats()
    agent = GatedAgent({"done": True})  # never released: its gateway dies with the call in flight

    async def replica(node: str) -> Agency:
        agency = Agency(
            catalog=catalog,
            router=Router(catalog, stats=stats),
            tasks=store,
            leases=leases,
            events=events,
            config=AgencyConfig(node_id=node),
            sleep=FakeSleep(),
        )
        await agency.register(contract("writer", "write", slo_ms=60_000), agent, replace=True)
        return agency

    a, b = await replica("gw-a"), await replica("gw-b")
    request = task(action="write")
    dying = asyncio.ensure_future(a.submit(request))
    await asyncio.wait_for(agent.entered.wait(), 10)

    seen: list[TaskEvent] = []
    stopped = asyncio.Event()

    async def follow() -> None:  # on b, the replica that will take the task over
        async for event in b.watch(request.task_id, wait_s=1.0):
            seen.append(event)
            if event.type == OUTCOME and event.state == "interrupted":
                stopped.set()

    follower = asyncio.create_task(follow())
    clock.advance(LEASE + 0.1)  # a renews no more: dead
    assert await b.takeover.sweep() == [request.task_id]
    await asyncio.wait_for(stopped.wait(), 10)
    interrupted = next(e for e in seen if e.type == "task.interrupted")
    assert (interrupted.node, interrupted.rule, interrupted.state) == ("gw-b", "lease_expired", "interrupted")
    assert interrupted.audit_index and interrupted.detail["taken_over_by"] == "gw-b"
    assert seen[-1].detail["pending"]["kind"] == "interrupted" and not follower.done()  # a wait, not the end

    canceled = await b.cancel(request.task_id, reason="no longer needed")
    await asyncio.wait_for(follower, 10)
    assert canceled.state is TaskState.CANCELED
    assert [e.type for e in seen][-2:] == ["task.completed", OUTCOME]
    final: Any = seen[-1].final
    assert final is not None and final.state is TaskState.CANCELED
    dying.cancel()
    await asyncio.gather(dying, return_exceptions=True)
    for agency in (a, b):
        await agency.close()
