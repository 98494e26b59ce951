"""Task records in Redis, shared by every gateway replica.

Layout (``prefix`` defaults to ``agency:``): ``{prefix}task:{id}`` is a hash with
the version ``v``, the JSON ``data`` and the task's list row ``s`` (a summary as JSON);
``{prefix}task-lock:{id}`` holds the lock token. Writes go through one Lua script that
compares the version and sets the new one atomically; the lock is ``SET NX PX`` released by
a compare-and-delete script, so a replica can only release its own lock. Every task key
carries a TTL.

Task lists (ListTasks) read two sorted sets of task ids scored by creation time (in
microseconds): ``{prefix}{tasks}:all`` (every task) and ``{prefix}{client:NAME}:tasks``
(the tasks of one client, its name case-folded; ``{client:TENANT/NAME}`` within a tenant). A
page walks the set newest first and reads the rows ``s`` of the ids it meets (one pipelined
round trip per batch); an id whose task expired is removed from the set on the way. Each set
keeps the newest ``max_listed`` ids.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import RedisError

from ..errors import AlreadyExists, ConcurrentUpdate, NotFound
from ..task_listing import (
    TaskPage,
    TaskQuery,
    TaskSummary,
    after_cursor,
    micros,
    page_token,
    parse_page_token,
    summary_of,
)
from ..tasks import TaskRecord
from .errors import RedisErrorHook, backend_unavailable, count_redis_error, redis_operation

__all__ = ["RedisTaskStore"]

# KEYS[1] task key; ARGV: expected version ("0" = must not exist), new version, data, ttl ms,
# and (optional) the task's list row.
# Returns 1 on success, 0 on a version mismatch, -1 when the key is missing.
_CAS = """
local cur = redis.call('HGET', KEYS[1], 'v')
if cur == false then
  if ARGV[1] ~= '0' then return -1 end
elseif cur ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'data', ARGV[3])
if ARGV[5] then redis.call('HSET', KEYS[1], 's', ARGV[5]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisTaskStore:
    """A :class:`~middleware.task_store.TaskStore` on Redis.

    Args:
        client: A ``redis.asyncio.Redis`` client (the caller owns it).
        prefix: Namespace for every key.
        ttl_s: How long a task record lives after its last write.
        lock_ttl_s: A lock's lifetime, so a crashed replica cannot hold a task forever.
        on_redis_error: Called with the operation (``"task_store.save"`` ...) whenever a
            Redis error escapes one (see :mod:`middleware.redis.errors`).
        max_listed: Task ids each list set keeps (the newest).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "agency:",
        ttl_s: float = 7 * 24 * 3600,
        lock_ttl_s: float = 30.0,
        poll_s: float = 0.01,
        owns_client: bool = False,
        on_redis_error: RedisErrorHook | None = None,
        max_listed: int = 1_000_000,
    ) -> None:
        self._redis = client
        self.on_redis_error = on_redis_error
        self._owns_client = owns_client
        self._prefix = prefix
        self._ttl_ms = int(ttl_s * 1000)
        self._lock_ttl_ms = int(lock_ttl_s * 1000)
        self._poll_s = poll_s
        self._max_listed = max_listed
        self._cas = client.register_script(_CAS)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTaskStore:
        """A store on its own connection to ``url`` (closed by :meth:`close`)."""
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    def _key(self, task_id: str) -> str:
        return f"{self._prefix}task:{task_id}"

    def _listed(self, client: str | None, tenant: str | None = None) -> str:
        """The sorted set listing every task (``None``) or one client's (of ``tenant``: two
        tenants' clients of one name are two clients)."""
        if client is None:
            return f"{self._prefix}{{tasks}}:all"
        who = client.strip().casefold()
        return (
            f"{self._prefix}{{client:{tenant}/{who}}}:tasks"
            if tenant
            else f"{self._prefix}{{client:{who}}}:tasks"
        )

    @redis_operation("task_store.create")
    async def create(self, record: TaskRecord) -> None:
        record.version = 1
        summary = summary_of(record)
        ok = await self._cas(
            keys=[self._key(record.task_id)],
            args=["0", 1, record.model_dump_json(), self._ttl_ms, summary.model_dump_json()],
        )
        if int(ok) != 1:
            record.version = 0
            raise AlreadyExists(f"task {record.task_id!r} already exists")
        # listed once it exists: a list that meets an id without its task drops the id
        score = {record.task_id: micros(record.created_at)}
        pipe = self._redis.pipeline(transaction=False)
        for key in dict.fromkeys(
            [self._listed(None), *([self._listed(record.client, record.tenant)] if record.client else [])]
        ):
            pipe.zadd(key, score)
            pipe.zremrangebyrank(key, 0, -self._max_listed - 1)
        await pipe.execute()

    @redis_operation("task_store.get")
    async def get(self, task_id: str) -> TaskRecord:
        data = await self._redis.hget(self._key(task_id), "data")
        if data is None:
            raise NotFound(f"no task {task_id!r}")
        return TaskRecord.model_validate_json(data)

    @redis_operation("task_store.save")
    async def save(self, record: TaskRecord) -> None:
        old = record.version
        record.version = old + 1  # written as the new version (no copy of the record for it)
        data = record.model_dump_json()
        record.version = old  # until the write is known to have won
        row = summary_of(record).model_dump_json()
        result = int(
            await self._cas(
                keys=[self._key(record.task_id)], args=[str(old), old + 1, data, self._ttl_ms, row]
            )
        )
        if result == -1:
            raise NotFound(f"no task {record.task_id!r}")
        if result == 0:
            raise ConcurrentUpdate(f"task {record.task_id} changed concurrently (writing over v{old})")
        record.version = old + 1

    @asynccontextmanager
    async def lock(self, task_id: str, *, wait_s: float = 2.0) -> AsyncIterator[None]:
        key = f"{self._prefix}task-lock:{task_id}"
        token = uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        try:
            while not await self._redis.set(key, token, nx=True, px=self._lock_ttl_ms):
                if time.monotonic() >= deadline:
                    raise ConcurrentUpdate(f"task {task_id} is locked by another request")
                await asyncio.sleep(self._poll_s)  # cross-process wait: no event to wait on
        except RedisError as exc:
            count_redis_error(self.on_redis_error, "task_store.lock", exc)
            raise backend_unavailable("task_store.lock", exc) from exc
        try:
            yield
        finally:
            try:
                await self._release(keys=[key], args=[token])
            except RedisError as exc:
                count_redis_error(self.on_redis_error, "task_store.unlock", exc)
                raise backend_unavailable("task_store.unlock", exc) from exc

    @redis_operation("task_store.list")
    async def list(self, query: TaskQuery) -> TaskPage:
        cursor = parse_page_token(query.page_token)
        key = self._listed(query.client, query.tenant)
        high: float | str = "+inf"
        if cursor is not None:
            high = cursor[0]
        if query.created_before is not None:
            before = micros(query.created_before) - 1
            high = before if high == "+inf" else min(float(high), before)
        low: float | str = micros(query.created_after) if query.created_after is not None else "-inf"
        budget = max(1000, 10 * query.page_size)  # ids one page reads at most
        rows: list[tuple[int, str, TaskSummary]] = []
        last: tuple[int, str] | None = None
        offset = 0
        exhausted = False
        while len(rows) < query.page_size and offset < budget:
            batch = await self._redis.zrevrangebyscore(
                key, high, low, start=offset, num=min(200, budget - offset), withscores=True
            )
            if not batch:
                exhausted = True
                break
            offset += len(batch)
            ids = [(int(score), _text(member)) for member, score in batch]
            ids = [(us, task_id) for us, task_id in ids if after_cursor(us, task_id, cursor)]
            pipe = self._redis.pipeline(transaction=False)
            for _, task_id in ids:
                pipe.hget(self._key(task_id), "s")
            found = await pipe.execute()
            gone = []
            for (us, task_id), data in zip(ids, found, strict=True):
                if len(rows) >= query.page_size:
                    break
                last = (us, task_id)
                if data is None:  # the task expired
                    gone.append(task_id)
                    continue
                summary = TaskSummary.model_validate_json(data)
                if query.matches(summary):
                    rows.append((us, task_id, summary))
            if gone:
                await self._redis.zrem(key, *gone)
        if exhausted and len(rows) < query.page_size:
            token = ""
        else:
            token = page_token(*last) if last is not None else ""
        return TaskPage(tasks=[row[2] for row in rows], next_page_token=token)

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
