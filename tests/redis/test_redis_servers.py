"""The Redis deployments the fleet tests stand on do what they claim: a Sentinel failover moves
the primary and redis-py's Sentinel client follows it; killing a cluster master promotes its
replica and RedisCluster keeps serving the slot."""

from __future__ import annotations

import asyncio
import time

from redis.exceptions import RedisError
from redis_servers import Cluster, SentinelSet, failover, kill_master, wait_until

from middleware.redis.connection import redis_client


async def _write_until_it_works(client: object, key: str, value: str) -> None:
    """The first write after a failover may fail (a connection to the old primary): retry."""
    for _ in range(200):
        try:
            await client.set(key, value)  # type: ignore[attr-defined]
            return
        except RedisError:
            await asyncio.sleep(0.05)  # poll: the client reconnects on the next command
    raise AssertionError(f"no write to {key} worked")


async def test_a_sentinel_failover_moves_the_primary_and_the_sentinel_client_follows(
    redis_sentinel_set: SentinelSet,
) -> None:
    client = redis_client(redis_sentinel_set.url, socket_timeout=2)
    try:
        await client.set("agency-test:before", "1")
        old = redis_sentinel_set.primary_address()
        new = await asyncio.to_thread(failover, redis_sentinel_set)
        assert new != old and redis_sentinel_set.primary().info("replication")["role"] == "master"
        await _write_until_it_works(client, "agency-test:after", "2")
        with redis_sentinel_set.primary().client() as direct:
            assert direct.get("agency-test:before") == b"1"  # replicated before the swap
            assert direct.get("agency-test:after") == b"2"  # written to the new primary
    finally:
        await client.aclose()


async def test_killing_a_cluster_master_promotes_its_replica_and_the_cluster_client_keeps_the_slot(
    redis_cluster: Cluster,
) -> None:
    client = redis_client(redis_cluster.url, socket_timeout=2)
    try:
        key = "agency-test:{slot-key}"
        slot = await client.cluster_keyslot(key)  # type: ignore[attr-defined]
        await client.set(key, "1")
        victim = await asyncio.to_thread(kill_master, redis_cluster, slot)
        assert redis_cluster.master_of(slot) is not victim
        await _write_until_it_works(client, key, "2")
        assert await client.get(key) == b"2"
        await asyncio.to_thread(victim.start)  # back, as a replica of the promoted node
        await asyncio.to_thread(redis_cluster.wait_ok)
        assert victim.info("replication")["role"] == "slave"
    finally:
        await client.aclose()


async def test_a_sentinel_client_in_use_moves_to_the_new_primary_before_sentinel_demotes_the_old(
    redis_sentinel_set: SentinelSet,
) -> None:
    """redis-py alone asks the Sentinels only on connecting: its pooled connection would go on
    writing to the old primary (writes lost) until Sentinel demotes it ~10 s later. Ours asks
    every second, so the writes reach the new primary while the old one is still a primary."""
    client = redis_client(redis_sentinel_set.url, socket_timeout=2)
    try:
        await client.set("agency-test:moving", "0")  # a pooled connection to the primary now
        old = redis_sentinel_set.wait_settled()
        old_server = next(s for s in redis_sentinel_set.servers if s.address == old)
        with redis_sentinel_set.sentinels[0].client() as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", redis_sentinel_set.service)
        await asyncio.to_thread(
            wait_until,
            "the Sentinels to name the new primary",
            lambda: all(redis_sentinel_set.primary_address(s) != old for s in redis_sentinel_set.sentinels),
        )
        moved = time.monotonic()
        new_server = next(s for s in redis_sentinel_set.servers if s.address != old)
        for i in range(1, 200):
            await _write_until_it_works(client, "agency-test:moving", str(i))
            with new_server.client() as direct:
                if direct.get("agency-test:moving") == str(i).encode():
                    break
            await asyncio.sleep(0.05)  # poll: the pool asks the Sentinels once a second
        took = time.monotonic() - moved
        assert old_server.info("replication")["role"] == "master", "Sentinel demoted it first"
        assert took < 5, took
        print(f"writes on the new primary {took:.2f} s after the Sentinels named it")
    finally:
        await client.aclose()
        await asyncio.to_thread(redis_sentinel_set.wait_settled)
