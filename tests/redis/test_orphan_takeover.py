"""The takeover's backstop: a task stored in a running state with no lease entry at all (what
Redis losing data leaves: a failover without ``min-replicas-to-write`` lost the task's final save
while its lease release reached the new primary) is found by the walk over the task list and
``interrupted`` within ``orphan_every`` rounds (middleware/takeover.py, module docstring).

The orphan is made directly in Redis: a real gateway (an ``Agency`` on Redis stores) runs a task
whose agent hangs, and the task's lease entry is deleted under it, as the lost write leaves it.
Time is injected into the takeover (the task looks older than two leases), and its rounds are
called one by one: no clock and no sleep decide the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from middleware import Agency, AgencyConfig, CapabilityContract, TaskRequest, TaskState
from middleware.audit import AuditRecord
from middleware.memory_catalog import MemoryCatalog
from middleware.redis import keys
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats
from middleware.smf import utcnow
from middleware.takeover import Takeover

LEASE = 30.0  # long: no lease expires during the test, only a missing one can be found
EVERY = 3


def _gateway(client: Any, prefix: str, node: str) -> Agency:
    catalog = MemoryCatalog()
    return Agency(
        catalog=catalog,
        router=Router(catalog, stats=MemoryRoutingStats()),
        tasks=RedisTaskStore(client, prefix=prefix),
        events=RedisTaskEventLog(client, prefix=prefix),
        leases=RedisTaskLeases(client, prefix=prefix, lease_seconds=LEASE),
        config=AgencyConfig(node_id=node),
    )


async def test_a_running_task_with_no_lease_is_interrupted_within_orphan_every_rounds(
    redis_client: Any, redis_prefix: str
) -> None:
    called, release = asyncio.Event(), asyncio.Event()
    calls = 0

    async def agent(request: Any) -> dict[str, str]:
        nonlocal calls
        calls += 1
        if calls == 2:
            called.set()
        await release.wait()
        return {"done": "yes"}

    dead = _gateway(redis_client, redis_prefix, "gw-a")  # its takeover loop never runs: it "died"
    other = _gateway(redis_client, redis_prefix, "gw-b")
    await dead.register(CapabilityContract(name="writer", can_do=["write"], slo_latency_ms=60_000), agent)
    orphan = TaskRequest(text="write it down", constraints={"action": "write"})
    leased = TaskRequest(text="write it down too", constraints={"action": "write"})
    running = [asyncio.ensure_future(dead.submit(r)) for r in (orphan, leased)]
    records: list[AuditRecord] = []

    async def append(record: AuditRecord) -> int:
        records.append(record)
        return len(records)

    store = RedisTaskStore(redis_client, prefix=redis_prefix)
    leases = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=LEASE)
    takeover = Takeover(
        leases=leases,
        tasks=store,
        stats=MemoryRoutingStats(),
        catalog=MemoryCatalog(),
        node="gw-b",
        append=append,
        orphan_every=EVERY,
        now=lambda: utcnow() + timedelta(hours=1),  # both tasks look older than two leases
    )
    try:
        await asyncio.wait_for(called.wait(), 30)
        for request in (orphan, leased):
            assert (await store.get(request.task_id)).state is TaskState.DISPATCHED
        expiries, owners = keys.task_leases(redis_prefix)  # the lost write: no lease entry at all
        assert await redis_client.zrem(expiries, orphan.task_id) == 1
        assert await redis_client.hdel(owners, orphan.task_id) == 1

        for _ in range(EVERY - 1):
            await takeover.round()  # the sweep scans only the lease set: it cannot see the orphan
            assert (await store.get(orphan.task_id)).state is TaskState.DISPATCHED
        await takeover.round()  # the backstop's round

        run = await store.get(orphan.task_id)
        assert run.state is TaskState.INTERRUPTED
        assert run.pending["node"] == "gw-a" and run.pending["in_flight"] is True
        assert "no lease" in run.reason
        assert (await store.get(leased.task_id)).state is TaskState.DISPATCHED  # its lease is live
        assert [r.task_id for r in records] == [orphan.task_id]
        assert records[0].event_type == "task.interrupted"
        assert await redis_client.zscore(expiries, orphan.task_id) is None  # its lease released

        for _ in range(EVERY):  # taken over once: later rounds leave both alone
            await takeover.round()
        assert len(records) == 1
        assert (await store.get(leased.task_id)).state is TaskState.DISPATCHED

        outcome = await other.cancel(orphan.task_id, reason="the client gave up")  # resumable or cancelable
        assert outcome.state is TaskState.CANCELED
    finally:
        release.set()
        for future in running:
            with contextlib.suppress(Exception):
                await future
        await dead.close()
        await other.close()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
