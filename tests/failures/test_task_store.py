"""Task stores: versioned compare-and-set writes and a per-task lock, in memory and in Redis."""

from __future__ import annotations

import asyncio

import pytest

from middleware import NotFound
from middleware.errors import AlreadyExists, ConcurrentUpdate
from middleware.memory_task_store import MemoryTaskStore
from middleware.redis.task_store import RedisTaskStore
from middleware.task_store import TaskStore
from middleware.tasks import StepRecord, TaskRecord, TaskRequest, TaskState


def record(task_id: str = "task_1") -> TaskRecord:
    return TaskRecord.start(TaskRequest(task_id=task_id, text="hello"), None, "trace")


@pytest.fixture(params=["memory", "redis"])
async def store(request, redis_client, redis_prefix) -> TaskStore:
    if request.param == "memory":
        return MemoryTaskStore()
    return RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60, lock_ttl_s=5)


def test_both_stores_implement_the_protocol(redis_client):
    assert isinstance(MemoryTaskStore(), TaskStore)
    assert isinstance(RedisTaskStore(redis_client), TaskStore)


async def test_create_get_save_bumps_the_version(store):
    r = record()
    await store.create(r)
    assert r.version == 1
    with pytest.raises(AlreadyExists):
        await store.create(record())
    r.state = TaskState.ROUTING
    await store.save(r)
    assert r.version == 2
    loaded = await store.get("task_1")
    assert loaded.state is TaskState.ROUTING and loaded.version == 2
    with pytest.raises(NotFound):
        await store.get("nope")


async def test_a_stale_writer_loses(store):
    r = record()
    await store.create(r)
    a, b = await store.get("task_1"), await store.get("task_1")
    a.state = TaskState.ROUTING
    await store.save(a)
    b.state = TaskState.CANCELED
    with pytest.raises(ConcurrentUpdate):
        await store.save(b)
    assert (await store.get("task_1")).state is TaskState.ROUTING


async def test_the_lock_admits_one_holder_at_a_time(store):
    await store.create(record())
    entered = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with store.lock("task_1"):
            entered.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await entered.wait()
    with pytest.raises(ConcurrentUpdate):
        async with store.lock("task_1", wait_s=0.05):
            pass
    release.set()
    await task
    async with store.lock("task_1", wait_s=0.5):  # free again
        pass


async def test_redis_keys_are_namespaced_and_expire(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60)
    await store.create(record())
    key = f"{redis_prefix}{{task:task_1}}"  # the task's hash tag: its keys share one cluster slot
    assert 0 < await redis_client.pttl(key) <= 60_000
    async with store.lock("task_1"):
        assert 0 < await redis_client.pttl(f"{redis_prefix}{{task:task_1}}:lock") <= 30_000
    assert await redis_client.exists(f"{redis_prefix}{{task:task_1}}:lock") == 0
    await redis_client.delete(key)


async def test_memory_store_evicts_the_oldest_finished_tasks_only():
    store = MemoryTaskStore(max_finished=2)
    waiting = record("waiting")
    await store.create(waiting)
    waiting.state = TaskState.ROUTING
    await store.save(waiting)
    for i in range(3):
        r = record(f"done_{i}")
        await store.create(r)
        r.state = TaskState.CANCELED
        await store.save(r)
    with pytest.raises(NotFound):
        await store.get("done_0")
    assert (await store.get("done_2")).state is TaskState.CANCELED
    assert (await store.get("waiting")).state is TaskState.ROUTING


async def test_a_definition_with_redis_storage_gets_the_redis_task_store(tmp_path):
    from middleware.server.bootstrap import build_agency
    from middleware.server.definition import AgencyDefinition
    from tests.conftest import REDIS_URL

    definition = AgencyDefinition.from_data(
        {"storage": {"backend": "redis", "redis_url": REDIS_URL}, "audit": {"directory": str(tmp_path)}}
    )
    agency = await build_agency(definition)
    try:
        assert isinstance(agency.tasks, RedisTaskStore)
        with pytest.raises(NotFound):
            await agency.get_task("task_that_does_not_exist")
    finally:
        await agency.close()


async def test_memory_store_a_new_task_reads_as_it_was_created_whatever_the_task_did_since():
    store = MemoryTaskStore()
    r = record()
    r.context = {"order": {"id": 7}}
    await store.create(r)
    r.state = TaskState.ROUTING
    r.steps.append(StepRecord.begin("main"))
    r.outputs["main"] = {"ok": 1}
    r.context["more"] = 1
    r.routing.append({"step": "main"})
    loaded = await store.get("task_1")
    assert loaded.state is TaskState.SUBMITTED and loaded.version == 1
    assert (loaded.steps, loaded.outputs, loaded.routing) == ([], {}, [])
    assert loaded.context == {"order": {"id": 7}}
    assert (await store.get("task_1")).model_dump_json() == loaded.model_dump_json()

    started = record("task_2")  # a record that already holds items is copied as JSON at once
    started.steps.append(StepRecord.begin("a"))
    await store.create(started)
    started.steps[0].status = "running"
    assert (await store.get("task_2")).steps[0].status == "pending"
