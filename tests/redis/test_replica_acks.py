"""``storage.replica_acks``: a task write is acknowledged only once a replica has it, so a
failover never loses a task a client was told about (a real primary and replica, the replica
frozen with SIGSTOP as a replica that fell behind or a link that broke would be)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis_servers import RedisServer, redis_server, wait_until

from middleware.errors import BackendUnavailable, InvalidInput
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.server.settings import definition_from
from middleware.task_events import progress_event
from middleware.task_leases import Holder
from middleware.tasks import TaskRecord, TaskRequest, TaskState

pytestmark = pytest.mark.timeout(120)


def record(task_id: str) -> TaskRecord:
    return TaskRecord.start(
        TaskRequest(task_id=task_id, text=f"text of {task_id}"), None, "trace", client="al"
    )


@pytest.fixture
def redis_primary_with_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    with redis_server() as primary, redis_server() as replica:
        with replica.client() as c:
            c.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))
        wait_until("the replica acknowledges writes", lambda: acknowledged(primary))
        yield primary, replica


def acknowledged(primary: RedisServer) -> bool:
    """A write on ``primary`` reaches its replica within 100 ms (the link is up and synced)."""
    with primary.client() as c:
        c.set("acks:probe", "1")
        return bool(c.wait(1, 100) == 1)


async def test_a_write_no_replica_acknowledges_is_not_acknowledged(redis_primary_with_replica) -> None:
    primary, replica = redis_primary_with_replica
    client = aioredis.Redis.from_url(primary.url)
    store = RedisTaskStore(client, prefix="acks:", replica_acks=1, replica_ack_timeout_ms=300)
    leases, events = RedisTaskLeases(client, prefix="acks:"), RedisTaskEventLog(client, prefix="acks:")
    assert store.batches_with(events, leases)
    try:
        kept = record("kept")
        await store.create(kept)  # the replica answers: acknowledged
        kept.state = TaskState.ROUTING
        told = progress_event(
            task_id="kept", trace_id="trace", state="routing", step="s", agent="a", kind="token",
            data={"text": "a"}, node="n1",
        )  # fmt: skip
        await store.save_told(kept, [told])
        assert (await store.get("kept")).state is TaskState.ROUTING
        assert await store.create_leased(record("leased"), leases, Holder("gw-1", "t1"))

        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)  # the replica stops acknowledging
        try:
            for write in (
                store.create(record("unacked")),
                store.create_leased(record("unacked-leased"), leases, Holder("gw-1", "t2")),
                store.save(kept),
            ):
                with pytest.raises(BackendUnavailable) as refused:
                    await write
                assert "reached 0 of the 1 replicas" in str(refused.value.__cause__)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)

        # the replica is back: writes are acknowledged again (a write told UNAVAILABLE may have
        # been kept, as any write whose answer was lost: the takeover sweep ends such a task)
        wait_until("the replica caught up", lambda: acknowledged(primary))
        await store.create(record("after"))
        assert (await store.get("after")).state is TaskState.SUBMITTED
    finally:
        await client.aclose()


async def test_without_replica_acks_nothing_waits(redis_primary_with_replica) -> None:
    primary, replica = redis_primary_with_replica
    client = aioredis.Redis.from_url(primary.url)
    store = RedisTaskStore(client, prefix="noacks:")
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        await store.create(record("t"))  # the default: the primary's answer is the acknowledgement
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
        await client.aclose()


def test_the_definition_takes_replica_acks_and_refuses_them_on_a_cluster() -> None:
    storage = {"backend": "redis", "redis_url": "redis+sentinel://127.0.0.1:26379/mymaster"}
    taken = definition_from({"storage": {**storage, "replica_acks": 1}}, env={})
    assert taken.storage.replica_acks == 1 and taken.storage.replica_ack_timeout_ms == 1000
    with pytest.raises(InvalidInput) as bad:
        definition_from(
            {
                "storage": {
                    "backend": "redis",
                    "redis_url": "redis+cluster://127.0.0.1:7000",
                    "replica_acks": 1,
                }
            },
            env={},
        )
    assert "replica_acks" in str(bad.value) and "Cluster" in str(bad.value)
    with pytest.raises(InvalidInput) as negative:
        definition_from({"storage": {**storage, "replica_acks": -1}}, env={})
    assert "replica_acks" in str(negative.value)
