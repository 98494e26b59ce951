"""Task leases, in memory and in Redis: held by one holder, renewed, expired, taken over once.

The Redis leases read the time on the Redis server: their expiry is tested past a short
lease by polling (with a deadline), the memory ones with an injected clock.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from middleware.memory_task_leases import MemoryTaskLeases
from middleware.redis.task_leases import RedisTaskLeases
from middleware.task_leases import Holder, TaskLeases

from .conftest import Clock

A = Holder(node="gw-a", token="aaaa")
A_RESTARTED = Holder(node="gw-a", token="bbbb")  # the same node id, another process
B = Holder(node="gw-b", token="cccc")

REDIS_LEASE = 0.3


async def _expired(leases: TaskLeases, task_id: str, *, within: float = 10.0) -> None:
    """Poll until ``task_id``'s lease shows as expired (Redis: its server's clock)."""
    deadline = time.monotonic() + within
    while task_id not in await leases.expired():
        assert time.monotonic() < deadline, f"the lease of {task_id} never expired"
        await asyncio.sleep(0.02)


def test_holders_round_trip_through_their_stored_form() -> None:
    for holder in (A, Holder(node="node with spaces/and#signs", token="0f1e")):
        assert Holder.decode(holder.encode()) == holder


async def test_memory_leases_expire_on_the_clock_and_go_to_one_taker() -> None:
    clock = Clock()
    leases = MemoryTaskLeases(10, clock=clock)
    assert isinstance(leases, TaskLeases)
    assert await leases.hold("t1", A) and await leases.hold("t1", A)  # its own: renewed
    assert not await leases.hold("t1", A_RESTARTED)  # a restarted process is another holder
    clock.advance(9)
    assert await leases.renew(["t1", "t2"], A) == ["t2"]
    clock.advance(9)
    assert await leases.expired() == [] and await leases.take("t1") is None  # renewed: live
    clock.advance(2)
    assert await leases.expired() == ["t1"]
    assert not await leases.hold("t1", B)  # an expired lease only goes through take
    assert await leases.take("t1") == A and await leases.take("t1") is None
    assert await leases.expired() == []  # extended by a lease: the taker's time to mark the task
    clock.advance(11)
    assert await leases.take("t1") == A  # a taker that failed midway: taken again
    await leases.release("t1", A)  # the taker marked it: the lease goes
    assert await leases.renew(["t1"], A) == ["t1"]  # taken over: lost
    with pytest.raises(ValueError):
        MemoryTaskLeases(0)


async def test_redis_leases_share_one_view_and_the_take_is_a_compare_and_set(
    redis_client, redis_prefix
) -> None:
    import redis.asyncio as aioredis
    from gateway_processes import REDIS_URL

    one = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=REDIS_LEASE)
    other = RedisTaskLeases(
        aioredis.Redis.from_url(REDIS_URL), prefix=redis_prefix, lease_seconds=REDIS_LEASE
    )
    try:
        assert isinstance(one, TaskLeases)
        assert await one.hold("t1", A) and not await other.hold("t1", B)
        assert await one.renew(["t1", "t2"], A) == ["t2"]
        assert await other.take("t1") is None  # live

        await one.release("t1", B)  # not B's: kept
        assert not await other.hold("t1", B)
        await one.release("t1", A)
        assert await other.hold("t1", B)  # free again

        await _expired(one, "t1")  # B never renews: past the lease on Redis's clock
        assert not await one.hold("t1", A)  # still B's until taken over
        taken = await asyncio.gather(*(leases.take("t1") for leases in (one, other, one, other)))
        assert [t for t in taken if t is not None] == [B]  # exactly one taker
        assert await one.expired() == []  # extended for the taker, still B's
        await one.release("t1", B)  # the taker marked the task
        assert await other.renew(["t1"], B) == ["t1"]
        keys = {k.decode() async for k in redis_client.scan_iter(match=redis_prefix + "*")}
        assert keys <= {f"{redis_prefix}{{task-leases}}", f"{redis_prefix}{{task-leases}}:owners"}
        assert all("{task-leases}" in k for k in keys)  # one hash tag: one slot in a cluster
    finally:
        await other._redis.aclose()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


async def _server_ms(client) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_a_redis_renewal_moves_the_expiry_a_lease_past_the_servers_now(
    redis_client, redis_prefix
) -> None:
    leases = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=30)
    key = f"{redis_prefix}{{task-leases}}"
    try:
        before = await _server_ms(redis_client)
        assert await leases.hold("t1", A)
        held = await redis_client.zscore(key, "t1")
        assert before + 30_000 <= held <= await _server_ms(redis_client) + 30_000
        before = await _server_ms(redis_client)
        assert await leases.renew(["t1"], A) == []
        renewed = await redis_client.zscore(key, "t1")
        assert renewed >= before + 30_000 and renewed >= held
        assert "t1" not in await leases.expired()
    finally:
        async for k in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(k)


async def test_a_forced_hold_takes_the_lease_from_another_holder(redis_client, redis_prefix) -> None:
    """A resume that checked under the task's lock that it waits takes a lease its last gateway
    has not dropped yet."""
    clock = Clock()
    for leases in (MemoryTaskLeases(10, clock=clock), RedisTaskLeases(redis_client, prefix=redis_prefix)):
        assert await leases.hold("t1", A)
        assert not await leases.hold("t1", B)
        assert await leases.hold("t1", B, force=True)
        await leases.release("t1", A)  # A's late drop does not touch B's lease
        assert await leases.renew(["t1"], B) == [] and await leases.renew(["t1"], A) == ["t1"]
    async for key in redis_client.scan_iter(match=redis_prefix + "*"):
        await redis_client.delete(key)
