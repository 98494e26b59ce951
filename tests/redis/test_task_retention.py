"""Retention of task records, task events and sessions in Redis (``storage.retention``), against
the real Redis: short retentions really pass (the test polls until Redis expired the key, bounded)."""

from __future__ import annotations

import asyncio
import time

import pytest

from middleware.errors import ConcurrentUpdate, InvalidInput, NotFound
from middleware.redis import keys
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.server.settings import definition_from
from middleware.task_events import progress_event
from middleware.task_leases import Holder
from middleware.task_listing import TaskQuery
from middleware.task_store import BatchingTaskStore
from middleware.tasks import TaskRecord, TaskRequest, TaskState

pytestmark = pytest.mark.timeout(60)


def record(task_id: str) -> TaskRecord:
    return TaskRecord.start(
        TaskRequest(task_id=task_id, text=f"text of {task_id}"), None, "trace", client="al"
    )


def event(task_id: str, n: int) -> object:
    return progress_event(
        task_id=task_id, trace_id="trace", state="dispatched", step="s", agent="a", kind="progress",
        data={"n": n}, node="n1",
    )  # fmt: skip


async def gone(client: object, *names: str, within_s: float = 10.0) -> bool:
    """Poll until Redis expired every key of ``names`` (bounded): True when they went."""
    deadline = time.monotonic() + within_s
    while await client.exists(*names):  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_finished_task_goes_after_its_retention_a_held_one_stays(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60, finished_ttl_s=0.2)
    done, held = record("done"), record("held")
    for run in (done, held):
        await store.create(run)
    assert 0 < await redis_client.pttl(store.key("done")) <= 60_000  # not finished yet: held
    done.state, held.state = TaskState.COMPLETED, TaskState.INPUT_REQUIRED
    await store.save(done)
    await store.save(held)
    assert 0 < await redis_client.pttl(store.key("done")) <= 200
    assert await redis_client.pttl(store.key("held")) > 50_000
    assert await gone(redis_client, store.key("done"))
    with pytest.raises(NotFound):
        await store.get("done")
    assert (await store.get("held")).state is TaskState.INPUT_REQUIRED
    # the list drops the id it meets without its task; the held one is listed
    assert [row.task_id for row in (await store.list(TaskQuery())).tasks] == ["held"]
    assert await redis_client.zscore(keys.tasks(redis_prefix), "done") is None


async def test_a_finished_tasks_events_go_with_it_when_saved_together(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60, finished_ttl_s=60, events_ttl_s=0.2)
    log = RedisTaskEventLog(redis_client, prefix=redis_prefix, ttl_s=60)
    assert isinstance(store, BatchingTaskStore) and store.batches_with(log, None)
    run = record("t1")
    await store.create(run)
    assert await log.append("t1", [event("t1", 1)]) == 1  # running: the stream lives as long as the task
    assert await redis_client.pttl(log.key("t1")) > 50_000
    run.state = TaskState.INPUT_REQUIRED  # waiting: told and stored at once, kept as long as the task
    assert await store.save_told(run, [event("t1", 2)]) == 2
    assert await redis_client.pttl(log.key("t1")) > 50_000
    run.state = TaskState.COMPLETED
    assert await store.save_told(run, [event("t1", 3), event("t1", 4)]) == 4
    assert [e.seq for e in await log.read("t1")] == [1, 2, 3, 4]
    assert (await store.get("t1")).version == run.version == 3
    assert 0 < await redis_client.pttl(log.key("t1")) <= 200
    assert await gone(redis_client, log.key("t1"))
    assert await redis_client.exists(store.key("t1")) == 1  # the record has its own retention


async def test_a_stale_save_told_still_tells_and_stores_nothing(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix)
    log = RedisTaskEventLog(redis_client, prefix=redis_prefix)
    run = record("t1")
    await store.create(run)
    stale = await store.get("t1")
    await store.save(run)
    with pytest.raises(ConcurrentUpdate):
        await store.save_told(stale, [event("t1", 1)])
    assert [e.seq for e in await log.read("t1")] == [1]  # as an append before a failed save
    missing = record("nope")
    missing.version = 1
    with pytest.raises(NotFound):
        await store.save_told(missing, [event("nope", 1)])


async def test_a_new_task_and_its_lease_in_one_write_and_a_lease_held_elsewhere_refuses(
    redis_client, redis_prefix
):
    store = RedisTaskStore(redis_client, prefix=redis_prefix)
    leases = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=30)
    assert store.batches_with(RedisTaskEventLog(redis_client, prefix=redis_prefix), leases)
    assert not store.batches_with(RedisTaskEventLog(redis_client, prefix="other:"), leases)
    me, other = Holder(node="a", token="1"), Holder(node="b", token="2")
    # a script Redis does not know (as after a restart): NOSCRIPT, loaded, sent once more
    store._cas.sha = leases._hold.sha = "0" * 40
    assert await store.create_leased(record("t1"), leases, me)
    assert (await store.get("t1")).version == 1
    assert not await leases.hold("t1", other)  # held by me
    with pytest.raises(Exception, match="already exists"):
        await store.create_leased(record("t1"), leases, me)
    # a lease left on no task (its gateway died before storing it): nothing is stored here
    assert await leases.hold("t2", other)
    assert not await store.create_leased(record("t2"), leases, me)
    assert await redis_client.exists(store.key("t2")) == 0


async def test_list_rows_older_than_the_held_retention_are_pruned_on_create(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60)
    old, new = record("old"), record("new")
    new.created_at = old.created_at.replace(year=old.created_at.year + 1)  # > 60 s later
    await store.create(old)
    await store.create(new)
    assert await redis_client.zrange(keys.tasks(redis_prefix), 0, -1) == [b"new"]
    assert await redis_client.zrange(keys.client_tasks(redis_prefix, "al"), 0, -1) == [b"new"]


async def test_a_finished_tasks_list_rows_go_about_when_its_record_does(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60, finished_ttl_s=0.2, prune_every=2)
    done = [record("a"), record("b")]
    for run in done:
        await store.create(run)
        run.state = TaskState.COMPLETED
        await store.save(run)
    held = record("held")
    await store.create(held)  # 3rd create: no pruning
    assert await gone(redis_client, store.key("a"), store.key("b"))
    await store.create(record("c"))  # the 4th prunes: a and b expired, held did not
    for key in (keys.tasks(redis_prefix), keys.client_tasks(redis_prefix, "al")):
        assert await redis_client.zrange(key, 0, -1) == [b"held", b"c"]


def test_retention_settings_default_validate_and_reach_the_stores(redis_prefix):
    default = definition_from({}, env={}).storage.retention
    assert (default.finished_task_seconds, default.held_task_seconds, default.task_event_seconds) == (
        3600.0,
        7 * 86_400.0,
        300.0,
    )
    assert default.session_seconds is None and default.routing_stats_seconds == 86_400.0
    with pytest.raises(InvalidInput, match=r"storage\.retention\.finished_task_seconds"):
        definition_from({"storage": {"retention": {"finished_task_seconds": 0}}}, env={})
    with pytest.raises(InvalidInput, match="would outlive the task"):
        definition_from(
            {"storage": {"retention": {"held_task_seconds": 60, "task_event_seconds": 120}}}, env={}
        )
    with pytest.raises(InvalidInput, match=r"storage\.retention\.forever"):
        definition_from({"storage": {"retention": {"forever": True}}}, env={})


async def test_the_definitions_retention_reaches_every_redis_store(redis_prefix):
    from conftest import REDIS_URL

    from middleware.server.backends import choose_backends

    definition = definition_from(
        {
            "storage": {
                "backend": "redis",
                "redis_url": REDIS_URL,
                "key_prefix": redis_prefix,
                "retention": {
                    "finished_task_seconds": 5,
                    "held_task_seconds": 50,
                    "task_event_seconds": 2,
                    "session_seconds": 7,
                    "routing_stats_seconds": 9,
                },
            }
        },
        env={},
    )
    backends = choose_backends(definition, "agency")
    try:
        tasks, sessions, events, stats = backends.tasks, backends.sessions, backends.events, backends.stats
        assert (tasks._ttl_ms, tasks._finished_ttl_ms, tasks._events_ttl_ms) == (50_000, 5_000, 2_000)  # type: ignore[union-attr]
        assert sessions._ttl_ms == 7_000  # type: ignore[union-attr]
        assert events._ttl_ms == 50_000  # type: ignore[union-attr]  # an unfinished task's stream
        assert stats._ttl_ms == 9_000  # type: ignore[attr-defined]
    finally:
        for store in vars(backends).values():
            close = getattr(store, "close", None) or getattr(store, "aclose", None)
            if close is not None:
                await close()


async def test_a_full_redis_under_noeviction_answers_unavailable_and_keeps_every_task(tmp_path):
    """maxmemory with noeviction (docs/operations.md, "Redis memory"): past the limit a write is
    refused (UNAVAILABLE, BACKEND_UNAVAILABLE) and nothing stored is evicted."""
    import redis.asyncio as aioredis
    from gateway_processes import free_port, start_redis

    from middleware.errors import BackendUnavailable

    port = free_port()
    proc = start_redis(port)
    client = aioredis.Redis(port=port)
    try:
        store = RedisTaskStore(client, prefix="oom:")
        await store.create(record("first"))
        used = int((await client.info("memory"))["used_memory"])
        await client.config_set("maxmemory", used + 64 * 1024)
        await client.config_set("maxmemory-policy", "noeviction")
        stored = ["first"]
        with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
            for i in range(10_000):  # ~4 KB each: the limit is reached within ~20
                run = record(f"t{i}")
                run.request.text = "x" * 4096
                await store.create(run)
                stored.append(run.task_id)
        assert len(stored) < 10_000
        for task_id in stored:  # nothing evicted
            assert (await store.get(task_id)).task_id == task_id
    finally:
        await client.aclose()
        proc.terminate()
        proc.wait(10)


async def test_a_duplicate_of_a_task_this_gateway_runs_leaves_its_lease_held(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix)
    leases = RedisTaskLeases(redis_client, prefix=redis_prefix, lease_seconds=30)
    me, other = Holder(node="a", token="1"), Holder(node="b", token="2")
    assert await store.create_leased(record("t1"), leases, me)
    with pytest.raises(Exception, match="already exists"):
        await store.create_leased(record("t1"), leases, me)
    assert not await leases.hold("t1", other)  # still mine: the running task keeps its lease
