"""The fleet: 3 gateways + 2 workers on Redis under client load; kill -9 a gateway, then a worker.

What must hold, whatever the machine's speed (no timing thresholds; the figures are printed by
``bench/bench_fleet.py``): no task the client was told about is lost; no task is left running
(each task of the dead gateway is taken over and ``interrupted``, and resuming it completes it);
after each kill every surviving gateway is SERVING and routes tasks again, and every client
loop completes tasks again. See tests/fleet_scenario.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fleet_scenario import RUNNING, Fleet

from middleware.audit.wal_reader import WalLogReader

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def fleet(tmp_path: Path, redis_client, redis_prefix: str) -> AsyncIterator[Fleet]:
    # a lease of 2 s: a worker's heartbeats (every half second) outlast a busy machine's stalls
    f = Fleet(tmp_path, redis_prefix, lease=2.0, loops=4, agent_ms=20)
    try:
        await f.start()
        yield f
    finally:
        await f.stop()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


async def test_kill_9_a_gateway_then_a_worker_under_load_nothing_lost_nothing_stuck(fleet: Fleet) -> None:
    fleet.start_load()
    await fleet.load_for(40)

    dead_gateway = fleet.gateways[0]  # the one the first client loop and both workers started on
    gateway = await fleet.kill(dead_gateway, "kill -9 gw-1")
    assert set(gateway.serving) == set(gateway.routing) == {"gw-2", "gw-3"}
    assert set(gateway.loops) == set(range(fleet.loops))  # every client loop completes again
    await fleet.load_for(40)

    worker = await fleet.kill(fleet.workers[0], "kill -9 fleet-w1")
    assert set(worker.routing) == {"gw-2", "gw-3"} and set(worker.loops) == set(range(fleet.loops))
    await fleet.load_for(40)
    await fleet.stop_load()

    audit = await fleet.audit()  # waits (bounded) until no task runs
    assert audit.lost == [], audit
    assert audit.stuck == []
    assert audit.acknowledged > 120
    # every task ended, or waits for its resume: a task refused while a slow machine let a
    # worker's lease lapse is ended too, and told as such (not lost)
    assert not set(audit.states) & RUNNING and audit.states.get("completed", 0) > 120, audit.states
    ends = await fleet.resume(audit.interrupted)  # side-effect-free workers: they run on
    assert set(ends) <= {"completed"}, ends

    for task_id in audit.interrupted:  # taken over by a survivor, its log naming the dead node
        outcome = await _get(fleet, task_id)
        assert outcome.state.value == "completed"
    survivors = [g for g in fleet.gateways if g is not dead_gateway]
    for g in survivors:
        assert await g.stop() == 0
    taken = [
        r
        for g in survivors
        for _, r in WalLogReader(fleet.tmp / g.node / "audit").records()
        if r.event_type == "task.interrupted" and r.rule == "lease_expired"
    ]
    assert sorted(r.task_id for r in taken) == sorted(audit.interrupted)
    assert {r.detail["node"] for r in taken} <= {"gw-1"}


async def _get(fleet: Fleet, task_id: str):
    from middleware.client import AgencyClient

    async with AgencyClient([g.address for g in fleet.live_gateways()], timeout=30) as client:
        return await client.get_task(task_id)
