"""A task write applied by Redis whose reply was lost is sent again by redis-py (it retries a
command whose connection dropped): the retry answers success, never a false
``ConcurrentUpdate`` (issue 24: a brand-new task's Submit told ``CONCURRENT_UPDATE`` during a
cluster failover). A TCP proxy (tests/tcp_proxy.py) in front of a real redis-server drops the
reply on cue; a real writer with a stale version is still refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis_servers import RedisServer
from tcp_proxy import TcpProxy

from middleware.errors import ConcurrentUpdate
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.task_events import progress_event
from middleware.task_leases import Holder
from middleware.tasks import TaskRecord, TaskRequest, TaskState

pytestmark = pytest.mark.timeout(60)


def record(task_id: str) -> TaskRecord:
    return TaskRecord.start(TaskRequest(task_id=task_id, text=f"text of {task_id}"), None, "trace")


@pytest.fixture
async def through_proxy(redis_standalone: RedisServer) -> AsyncIterator[tuple[TcpProxy, aioredis.Redis]]:
    proxy = await TcpProxy(redis_standalone.address).start()
    client = aioredis.Redis(port=proxy.port, socket_timeout=2, socket_connect_timeout=2)
    yield proxy, client
    await client.aclose()
    await proxy.close()


async def test_a_create_and_its_lease_whose_reply_was_lost_answer_created(through_proxy) -> None:
    proxy, client = through_proxy
    store = RedisTaskStore(client, prefix="r:")
    leases = RedisTaskLeases(client, prefix="r:", lease_seconds=30)
    assert await store.create_leased(record("t0"), leases, Holder(node="a", token="1"))  # scripts loaded
    run = record("t1")
    cut = proxy.cut_after(b"text of t1")
    assert await store.create_leased(run, leases, Holder(node="a", token="1"))
    assert cut.is_set() and run.version == 1
    stored = await store.get("t1")
    assert stored.version == 1 and stored.state is TaskState.SUBMITTED


async def test_a_save_whose_reply_was_lost_is_applied_once_and_answers_success(through_proxy) -> None:
    proxy, client = through_proxy
    store = RedisTaskStore(client, prefix="r:")
    events = RedisTaskEventLog(client, prefix="r:")
    run = record("t2")
    await store.create(run)
    stale = (await store.get("t2")).model_copy(deep=True)

    run.state = TaskState.ROUTING
    told = progress_event(
        task_id="t2", trace_id="trace", state="routing", step="s", agent="a", kind="progress",
        data={"n": 1}, node="n1",
    )  # fmt: skip
    cut = proxy.cut_after(b'"state":"routing"')
    seq = await store.save_told(run, [told])
    assert cut.is_set()
    assert run.version == 2 and seq > 0
    assert (await store.get("t2")).state is TaskState.ROUTING
    assert len(await client.xrange(events.key("t2"))) == 1  # told once, not once per attempt

    stale.state = TaskState.DISPATCHED  # another writer, one version behind: still refused
    with pytest.raises(ConcurrentUpdate):
        await store.save(stale)
