"""A Submit cancelled while its task is being stored with its lease (the client's deadline, on a
real Redis): whatever the write left (all of it, the lease alone, nothing) is settled at once.
The task is ``interrupted`` in the store with the reason, its lease released; it is never left
``submitted`` under a lease nobody renews, for this gateway's own sweep to take over 4/3 of a
lease later as a dead gateway's (what issue 32's 30-minute Redis soak logged).

The write is held at a chosen point by wrapping the store's ``create_leased`` (the real one runs);
the Submit is cancelled there. Events order every step: no sleep, no clock decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from middleware import Agency, AgencyConfig, CapabilityContract, TaskRequest, TaskState
from middleware.errors import NotFound
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats
from middleware.task_leases import Holder

LEASE = 30.0  # long: no lease expires during the test


def _gateway(client: Any, prefix: str) -> Agency:
    catalog = MemoryCatalog()
    return Agency(
        catalog=catalog,
        router=Router(catalog, stats=MemoryRoutingStats()),
        tasks=RedisTaskStore(client, prefix=prefix),
        events=RedisTaskEventLog(client, prefix=prefix),
        leases=RedisTaskLeases(client, prefix=prefix, lease_seconds=LEASE),
        config=AgencyConfig(node_id="gw-a"),
    )


Write = Callable[[Any, Any, Holder], Awaitable[bool]]


async def _cut(gateway: Agency, held: Callable[[Write, Any, Any, Holder], Awaitable[bool]]) -> str:
    """Submit a task whose store write is replaced by ``held`` (which gets the real write),
    cancel the Submit once ``held`` has reached its gate; returns the task id."""
    store = gateway.tasks
    real: Write = store.create_leased  # type: ignore[attr-defined]
    reached, gate = asyncio.Event(), asyncio.Event()

    async def wrapped(record: Any, leases: Any, holder: Holder) -> bool:
        result = await held(real, record, leases, holder)
        reached.set()
        await gate.wait()  # the cancellation lands here: the write's reply never comes back
        return result

    store.create_leased = wrapped  # type: ignore[attr-defined]
    await gateway.register(CapabilityContract(name="writer", can_do=["write"], slo_latency_ms=60_000), _agent)
    request = TaskRequest(text="write it down", constraints={"action": "write"})
    submit = asyncio.ensure_future(gateway.submit(request))
    await reached.wait()
    submit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await submit
    return request.task_id


async def _agent(request: Any) -> dict[str, str]:
    return {"done": "yes"}


async def _lease_is_free(client: Any, prefix: str, task_id: str) -> bool:
    """Another gateway can take the task's lease: nobody holds it."""
    other = RedisTaskLeases(client, prefix=prefix, lease_seconds=LEASE)
    return await other.hold(task_id, Holder(node="gw-b", token="probe"))


async def test_a_task_stored_with_its_lease_then_cut_is_interrupted_now(
    redis_client: Any, redis_prefix: str
) -> None:
    gateway = _gateway(redis_client, redis_prefix)

    async def applied(real: Write, record: Any, leases: Any, holder: Holder) -> bool:
        return await real(record, leases, holder)  # Redis applied all of it

    task_id = await _cut(gateway, applied)
    stored = await RedisTaskStore(redis_client, prefix=redis_prefix).get(task_id)
    assert stored.state is TaskState.INTERRUPTED, stored.state
    assert "cancelled before the task began" in str(stored.model_dump(mode="json"))
    assert gateway.takeover is not None and task_id not in gateway.takeover.held
    await gateway.takeover.renew()  # the release goes out with the next round
    assert await _lease_is_free(redis_client, redis_prefix, task_id)
    assert await gateway.takeover.sweep() == []  # nothing left for a sweep to take over
    await gateway.close()


async def test_a_lease_taken_without_its_task_is_released(redis_client: Any, redis_prefix: str) -> None:
    gateway = _gateway(redis_client, redis_prefix)

    async def lease_only(real: Write, record: Any, leases: Any, holder: Holder) -> bool:
        return bool(await leases.hold(record.task_id, holder))  # the task's write never arrived

    task_id = await _cut(gateway, lease_only)
    with pytest.raises(NotFound):
        await RedisTaskStore(redis_client, prefix=redis_prefix).get(task_id)
    assert await _lease_is_free(redis_client, redis_prefix, task_id)
    await gateway.close()


async def test_nothing_written_leaves_nothing(redis_client: Any, redis_prefix: str) -> None:
    gateway = _gateway(redis_client, redis_prefix)

    async def nothing(real: Write, record: Any, leases: Any, holder: Holder) -> bool:
        return True  # cancelled before anything was sent

    task_id = await _cut(gateway, nothing)
    with pytest.raises(NotFound):
        await RedisTaskStore(redis_client, prefix=redis_prefix).get(task_id)
    assert await _lease_is_free(redis_client, redis_prefix, task_id)
    await gateway.close()


async def test_another_gateways_task_of_the_same_id_is_left_alone(
    redis_client: Any, redis_prefix: str
) -> None:
    gateway = _gateway(redis_client, redis_prefix)
    theirs = Holder(node="gw-b", token="theirs")

    async def taken_meanwhile(real: Write, record: Any, leases: Any, holder: Holder) -> bool:
        assert await leases.hold(record.task_id, theirs)  # gw-b holds the id before our write
        return True

    task_id = await _cut(gateway, taken_meanwhile)
    leases = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=LEASE)
    assert await leases.hold(task_id, theirs)  # still gw-b's (holding is idempotent for its holder)
    assert not await _lease_is_free(redis_client, redis_prefix, task_id)
    await gateway.close()
