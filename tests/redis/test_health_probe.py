"""The health check writes, so it fails wherever the gateway's writes would, even where PING is
still answered: a server out of memory (OOM), a primary demoted to a replica (READONLY), a
cluster that lost a whole shard (CLUSTERDOWN); and it passes again once writes work, on the
same client (no restart)."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import OutOfMemoryError, ReadOnlyError
from redis_servers import Cluster, RedisServer, redis_server, wait_until

from middleware.redis.connection import redis_client
from middleware.redis.health import PROBE_TTL_MS, redis_check

pytestmark = pytest.mark.timeout(120)


async def test_out_of_memory_and_read_only_fail_the_check_while_ping_answers(
    redis_standalone: RedisServer,
) -> None:
    client = redis_client(redis_standalone.url)
    check = redis_check(client, timeout=1, key="probe:health")
    try:
        await check()
        with redis_standalone.client() as direct:
            assert 0 < direct.pttl("probe:health") <= PROBE_TTL_MS  # the probe leaves nothing behind

            direct.config_set("maxmemory", 1)  # noeviction: every write is refused with OOM
            with pytest.raises(OutOfMemoryError):
                await check()
            assert await client.ping()
            direct.config_set("maxmemory", 0)
            await check()

            with redis_server() as other:
                direct.replicaof("127.0.0.1", other.port)
                with pytest.raises(ReadOnlyError):
                    await check()
                assert await client.ping()
                direct.replicaof("NO", "ONE")
                await check()
    finally:
        await client.aclose()


async def test_a_cluster_that_lost_a_shard_fails_the_check_and_passes_once_it_is_back(
    redis_cluster: Cluster,
) -> None:
    client = redis_client(redis_cluster.url)
    check = redis_check(client, timeout=2, key="probe:health")
    try:
        await check()
        slot = await client.cluster_keyslot("probe:health")  # type: ignore[attr-defined]
        master = redis_cluster.master_of(slot)
        with master.client() as direct:
            replica_ports = [
                int(line.split()[1].split(":")[1].split("@")[0])
                for line in direct.execute_command("CLUSTER", "NODES").decode().splitlines()
                if "slave" in line.split()[2]
                and line.split()[3] == direct.execute_command("CLUSTER", "MYID").decode()
            ]
        shard = [master, *(n for n in redis_cluster.nodes if n.port in replica_ports)]
        assert len(shard) == 2
        for node in shard:
            node.kill()
        survivor = redis_cluster.live()[0]

        def down() -> bool:
            with survivor.client() as c:
                return "cluster_state:fail" in c.execute_command("CLUSTER", "INFO").decode()

        await asyncio.to_thread(wait_until, "the cluster to notice the lost shard", down)
        with survivor.client() as c:
            assert c.ping()  # what a PING check asked: still answered
        with pytest.raises(Exception):  # noqa: B017 - CLUSTERDOWN, or the client giving up on it
            await check()

        for node in shard:
            await asyncio.to_thread(node.start)  # back from nodes.conf, the same shard
        await asyncio.to_thread(redis_cluster.wait_ok)
        for _ in range(100):  # the client refreshes its slot map on the next commands
            try:
                await check()
                break
            except Exception:  # not yet
                await asyncio.sleep(0.1)
        await check()
    finally:
        await client.aclose()
