"""The stores behind long tasks, in memory and in Redis: the task event log (numbering, waiting,
TTL) and task lists (owner, filters, pages, expired tasks)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta

import pytest

from middleware.errors import InvalidInput
from middleware.memory_task_events import MemoryTaskEventLog
from middleware.memory_task_store import MemoryTaskStore
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_store import RedisTaskStore
from middleware.task_events import TaskEvent, TaskEventLog, progress_event
from middleware.task_listing import TaskQuery
from middleware.task_store import TaskStore
from middleware.tasks import TaskRecord, TaskRequest, TaskState

pytestmark = pytest.mark.timeout(60)

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def event(task_id: str, text: str) -> TaskEvent:
    return progress_event(
        task_id=task_id,
        trace_id="tr",
        state="dispatched",
        step="s",
        agent="a",
        kind="token",
        data={"text": text},
        node="n",
    )


@pytest.fixture(params=["memory", "redis"])
async def log(request, redis_client, redis_prefix) -> TaskEventLog:
    if request.param == "memory":
        return MemoryTaskEventLog()
    return RedisTaskEventLog(redis_client, prefix=redis_prefix, ttl_s=60)


def test_both_event_logs_implement_the_protocol(redis_client):
    assert isinstance(MemoryTaskEventLog(), TaskEventLog)
    assert isinstance(RedisTaskEventLog(redis_client), TaskEventLog)


async def test_events_are_numbered_one_two_three_per_task_across_batches(log):
    assert await log.append("t1", [event("t1", "a"), event("t1", "b")]) == 2
    assert await log.append("t2", [event("t2", "x")]) == 1
    assert await log.append("t1", [event("t1", "c")]) == 3
    got = await log.read("t1")
    assert [(e.seq, e.detail["data"]["text"]) for e in got] == [(1, "a"), (2, "b"), (3, "c")]
    assert [e.seq for e in await log.read("t1", after=1, limit=1)] == [2]
    assert await log.read("t1", after=3) == []
    last = await log.last("t1")
    assert last is not None and last.seq == 3 and last.detail["data"]["text"] == "c"
    assert await log.last("nobody") is None
    assert await log.read("nobody") == []
    assert got[0].id and got[0].time and got[0].final is None


async def waiting_in(log: TaskEventLog, redis_client) -> bool:
    """Whether a reader of ``log`` is blocked waiting for the next event (observed, not timed)."""
    if isinstance(log, MemoryTaskEventLog):
        return "t1" in log._signals
    return any(
        c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in await redis_client.client_list()
    )


async def test_a_waiting_reader_is_woken_by_the_next_append(log, redis_client, redis_prefix):
    # with Redis the writer is another client: another replica appending
    writer = log
    if isinstance(log, RedisTaskEventLog):
        writer = RedisTaskEventLog.from_url(REDIS_URL, prefix=redis_prefix)
    await writer.append("t1", [event("t1", "first")])
    reader = asyncio.create_task(log.read("t1", after=1, wait_s=20))
    deadline = time.monotonic() + 10
    while not await waiting_in(log, redis_client) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert await waiting_in(log, redis_client) and not reader.done()
    await writer.append("t1", [event("t1", "second")])
    got = await asyncio.wait_for(reader, 10)
    assert [e.detail["data"]["text"] for e in got] == ["second"]
    if writer is not log:
        await writer.close()


async def test_a_redis_task_stream_lives_under_the_tasks_hash_tag_until_its_ttl_after_the_last_event(
    redis_client, redis_prefix
):
    log = RedisTaskEventLog(redis_client, prefix=redis_prefix, ttl_s=0.3)
    await log.append("t1", [event("t1", "a")])
    key = f"{redis_prefix}{{task:t1}}:events"
    assert await redis_client.exists(key) == 1
    assert 0 < await redis_client.pttl(key) <= 300
    deadline = time.monotonic() + 10
    while await redis_client.exists(key) and time.monotonic() < deadline:  # noqa: ASYNC110 (Redis's TTL)
        await asyncio.sleep(0.05)
    assert await redis_client.exists(key) == 0  # gone past its TTL
    assert await log.read("t1") == [] and await log.last("t1") is None


async def test_a_long_redis_wait_is_cut_into_slices_shorter_than_the_socket_timeout(redis_prefix):
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL, socket_timeout=0.2)
    log = RedisTaskEventLog(client, prefix=redis_prefix, owns_client=True)
    assert await log.read("t1", wait_s=0.5) == []  # no read timeout, nothing came
    await log.close()


def rec(
    task_id: str, *, client: str = "alice", goal: str = "", state: TaskState = TaskState.COMPLETED
) -> TaskRecord:
    from middleware.goals import GoalAssertion

    anchored = GoalAssertion.parse({"id": goal, "description": "g"}) if goal else None
    run = TaskRecord.start(
        TaskRequest(task_id=task_id, text=f"text of {task_id}"), anchored, "trace", client=client
    )
    run.state = state
    return run


@pytest.fixture(params=["memory", "redis"])
async def store(request, redis_client, redis_prefix) -> TaskStore:
    if request.param == "memory":
        return MemoryTaskStore()
    return RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=60)


async def created(store: TaskStore, runs: list[TaskRecord]) -> list[TaskRecord]:
    base = runs[0].created_at
    for i, run in enumerate(runs):  # one microsecond apart at least: a known order
        run.created_at = run.updated_at = base + timedelta(seconds=i)
        await store.create(run)
    return runs


async def test_a_list_is_newest_first_for_the_owner_filtered_and_paged(store):
    runs = await created(
        store,
        [
            rec("t1", goal="GOAL_1"),
            rec("t2", client="bob"),
            rec("t3", state=TaskState.INPUT_REQUIRED),
            rec("t4", client="Alice", goal="GOAL_1"),
            rec("t5"),
        ],
    )
    mine = await store.list(TaskQuery(client="alice"))
    assert [t.task_id for t in mine.tasks] == ["t5", "t4", "t3", "t1"] and mine.next_page_token == ""
    everyone = await store.list(TaskQuery())
    assert [t.task_id for t in everyone.tasks] == ["t5", "t4", "t3", "t2", "t1"]
    assert [t.task_id for t in (await store.list(TaskQuery(client="bob"))).tasks] == ["t2"]
    assert [t.task_id for t in (await store.list(TaskQuery(goal_id="GOAL_1"))).tasks] == ["t4", "t1"]
    waiting = await store.list(TaskQuery(states=[TaskState.INPUT_REQUIRED]))
    assert [t.task_id for t in waiting.tasks] == ["t3"]
    window = TaskQuery(created_after=runs[1].created_at, created_before=runs[4].created_at)
    assert [t.task_id for t in (await store.list(window)).tasks] == ["t4", "t3", "t2"]
    pages, token = [], ""
    while True:
        page = await store.list(TaskQuery(page_size=2, page_token=token))
        pages.append([t.task_id for t in page.tasks])
        token = page.next_page_token
        if not token:
            break
    assert [i for p in pages for i in p] == ["t5", "t4", "t3", "t2", "t1"]
    assert pages[0] == ["t5", "t4"]
    row = mine.tasks[-1]
    assert (row.client, row.goal_id, row.text, row.state) == (
        "alice",
        "GOAL_1",
        "text of t1",
        TaskState.COMPLETED,
    )
    with pytest.raises(InvalidInput):
        await store.list(TaskQuery(page_token="%%%"))


async def test_a_list_shows_the_state_of_the_last_save(store):
    (run,) = await created(store, [rec("t1", state=TaskState.SUBMITTED)])
    run.state, run.reason = TaskState.FAILED, "it broke"
    await store.save(run)
    row = (await store.list(TaskQuery())).tasks[0]
    assert (row.state, row.reason) == (TaskState.FAILED, "it broke")


async def test_an_expired_task_leaves_the_redis_lists(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=0.3, finished_ttl_s=0.3)
    await store.create(rec("t1"))
    listed = f"{redis_prefix}{{client:alice}}:tasks"
    assert await redis_client.zscore(listed, "t1") is not None
    assert await redis_client.zscore(f"{redis_prefix}{{tasks}}:all", "t1") is not None
    deadline = time.monotonic() + 10
    gone = f"{redis_prefix}{{task:t1}}"
    while await redis_client.exists(gone) and time.monotonic() < deadline:  # noqa: ASYNC110 (Redis's TTL)
        await asyncio.sleep(0.05)
    assert (await store.list(TaskQuery(client="alice"))).tasks == []
    assert await redis_client.zscore(listed, "t1") is None  # dropped on the way


async def test_a_redis_list_reads_a_bounded_number_of_rows_per_page_and_goes_on(redis_client, redis_prefix):
    store = RedisTaskStore(redis_client, prefix=redis_prefix, ttl_s=3600)  # ids older than ttl_s are pruned
    await created(store, [rec(f"t{i:04d}", client="bob") for i in range(1100)] + [rec("mine")])
    page = await store.list(TaskQuery(client=None, states=[TaskState.FAILED], page_size=1))
    assert page.tasks == [] and page.next_page_token  # scanned 1000 rows, none matched: go on
    rest = await store.list(
        TaskQuery(states=[TaskState.FAILED], page_size=1, page_token=page.next_page_token)
    )
    assert rest.tasks == [] and rest.next_page_token == ""


async def test_two_tenants_clients_of_one_name_are_listed_apart(store):
    t1, t2 = rec("t1"), rec("t2")
    t1.tenant, t2.tenant = "acme", "globex"
    await created(store, [t1, t2])
    assert [t.task_id for t in (await store.list(TaskQuery(client="alice", tenant="acme"))).tasks] == ["t1"]
    assert [t.task_id for t in (await store.list(TaskQuery(client="alice", tenant="globex"))).tasks] == ["t2"]
    assert [t.tenant for t in (await store.list(TaskQuery())).tasks] == ["globex", "acme"]
