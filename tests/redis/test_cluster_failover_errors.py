"""Every Redis store while a Redis Cluster master dies and its replica takes over: each call
either works or raises ``BackendUnavailable`` (UNAVAILABLE on the wire), never a raw redis-py
error (INTERNAL at the gRPC edge) nor a false ``ConcurrentUpdate`` (issue 24: Submit told
``INTERNAL`` and ``CONCURRENT_UPDATE`` during a cluster failover).

A real cluster (tests/redis_servers.py: 3 masters, a replica each, node timeout 1 s); the master
of slot 0 is killed with kill -9 and the stores' calls (tests/redis/store_calls.py) are driven in
rounds until its replica serves the slot and the cluster is ok again, then once more.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

import pytest
from redis_servers import Cluster
from store_calls import outcome, store_calls

from middleware.errors import BackendUnavailable, NotFound
from middleware.redis import keys
from middleware.redis.connection import redis_client
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.task_leases import Holder
from middleware.tasks import TaskRecord, TaskRequest

pytestmark = pytest.mark.timeout(180)


async def test_every_store_answers_unavailable_or_works_through_a_master_kill(redis_cluster: Cluster) -> None:
    async with AsyncExitStack() as stack:
        stores = await store_calls(redis_cluster.url, f"cf-{uuid.uuid4().hex[:8]}:", stack)
        flat = [(f"{store}.{name}", call) for store, calls in stores.items() for name, call in calls]
        before = {name: await outcome(call) for name, call in flat}
        assert not {n: e for n, e in before.items() if e is not None}, before

        victim = redis_cluster.master_of(0)
        victim.kill()
        promoted = asyncio.create_task(asyncio.to_thread(_promoted, redis_cluster, victim))
        wrong: dict[str, str] = {}
        refused = rounds = 0
        while True:
            done = promoted.done()
            results = await asyncio.gather(*(outcome(call) for _, call in flat))
            rounds += 1
            for (name, _), error in zip(flat, results, strict=True):
                if isinstance(error, BackendUnavailable):
                    refused += 1
                elif error is not None:
                    wrong.setdefault(name, repr(error))
            if done:
                break
        await promoted
        assert not wrong, f"not BackendUnavailable during the failover: {wrong}"
        print(f"{rounds} rounds of {len(flat)} calls; {refused} refused with BackendUnavailable")


async def test_a_transaction_that_learns_the_slot_map_leaves_no_connection_on_a_dead_loop(
    redis_cluster: Cluster,
) -> None:
    """redis-py queues a cluster transaction's commands by ``asyncio.run`` in a thread; when that
    is where the client first (or again, after a failover) learns the slot map, the connections
    it opened there used to stay in the pool on a closed loop: the next script call on them
    raised ``RuntimeError: Event loop is closed`` (INTERNAL on the wire)."""
    client = redis_client(redis_cluster.url)
    try:
        stats = RedisRoutingStats(client, prefix=f"loop-{uuid.uuid4().hex[:8]}:")
        await stats.started("a")  # a MULTI/EXEC: the client's first command
        await stats.finished("a", success=True)  # a script: NOSCRIPT, then SCRIPT LOAD on every node
        assert (await stats.snapshots(["a"]))["a"].in_flight == 0
    finally:
        await client.aclose()


async def test_a_task_is_not_stored_when_its_lease_cannot_be(redis_cluster: Cluster) -> None:
    """The lease and the task live on two masters. When the lease's master refuses the write
    (here ``NOREPLICAS``; in the benchmark it had just been killed) the task must not be stored:
    a stored task with no lease is ``submitted`` forever, found by no takeover sweep."""
    prefix = f"lf-{uuid.uuid4().hex[:8]}:"
    leases_master = redis_cluster.master_of(keys.slot(keys.task_leases(prefix)[0]))
    task_id = next(
        f"t{i}"
        for i in range(1000)
        if redis_cluster.master_of(keys.slot(keys.task(prefix, f"t{i}"))) is not leases_master
    )
    client = redis_client(redis_cluster.url)
    with leases_master.client() as admin:
        admin.config_set("min-replicas-to-write", 5)  # more than it has: every write refused
    try:
        store = RedisTaskStore(client, prefix=prefix)
        leases = RedisTaskLeases(client, prefix=prefix, lease_seconds=30)
        run = TaskRecord.start(TaskRequest(task_id=task_id, text="t"), None, "trace")
        with pytest.raises(BackendUnavailable, match=r"(?i)replicas"):
            await store.create_leased(run, leases, Holder(node="a", token="1"))
        with pytest.raises(NotFound):
            await store.get(task_id)
    finally:
        with leases_master.client() as admin:
            admin.config_set("min-replicas-to-write", 0)
        await client.aclose()


def _promoted(cluster: Cluster, victim: object) -> None:
    """Block until a replica serves slot 0 instead of ``victim`` and the cluster is ok."""
    from redis_servers import wait_until

    wait_until("a replica to serve slot 0", lambda: cluster.master_of(0) is not victim)
    cluster.wait_ok()
