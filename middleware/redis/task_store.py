"""Task records in Redis, shared by every gateway replica.

Layout (``P`` = ``prefix``, default ``agency:``); every key of one task carries the hash tag
``{task:ID}``, so each script and pipeline of one task touches one Redis Cluster slot::

    P{task:ID}          hash     v (version), data (the record as JSON), s (its list row as JSON),
                                 w (the last write's id), e (its last event's id)
    P{task:ID}:lock     string   the lock token (SET NX PX; released by compare-and-delete)
    P{task:ID}:events   stream   the task's events (:mod:`middleware.redis.task_events`)

Writes go through one Lua script that compares the version and sets the new one atomically;
a write sent again by the client (redis-py retries a command whose connection dropped, so a
write applied whose reply was lost arrives twice) is recognised by its id and answered success
again, never a false ``ConcurrentUpdate`` (a brand-new task's Submit told ``CONCURRENT_UPDATE``);
the lock is ``SET NX PX`` released by a compare-and-delete script, so a replica can only
release its own lock.

**Retention** (``storage.retention``): every write sets the record's TTL by its state: a
finished task's record lives ``finished_ttl_s`` (1 h by default) after it ended, any other
``ttl_s`` (7 days) after its last change; then the key is gone (the audit log is the durable
record). Saved with its final events (:meth:`RedisTaskStore.save_told`), the task's event
stream gets ``events_ttl_s`` in the same script.

Task lists (ListTasks) read two sorted sets of task ids scored by creation time (in
microseconds): ``P{tasks}:all`` (every task) and ``P{client:NAME}:tasks`` (the tasks of one
client, its name case-folded; ``{client:TENANT/NAME}`` within a tenant). A page walks the set
newest first and reads the rows ``s`` of the ids it meets (one pipelined round trip per batch);
an id whose task expired is removed from the set on the way. Each create drops the ids created
more than ``ttl_s`` ago (no record outlives that unless written since) and keeps the newest
``max_listed``; every ``prune_every`` creates, the sets it wrote also drop the ids of expired
tasks among their oldest (:meth:`RedisTaskStore.prune_listed`), so a finished task's two list
rows (~200 B) go about when its record does.

**Round trips**: :meth:`RedisTaskStore.create` is one pipeline (the record, its list rows and,
with :meth:`create_leased`, the task's lease); :meth:`save_told` saves a record and appends its
events in one script.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from redis.exceptions import RedisError

from ..errors import AlreadyExists, ConcurrentUpdate, NotFound
from ..task_events import TaskEvent
from ..task_leases import Holder
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
from . import keys
from .batch import Batch
from .errors import RedisErrorHook, backend_unavailable, count_redis_error, redis_operation

__all__ = ["RedisTaskStore"]

# KEYS[1] task key, KEYS[2] (optional) its event stream; ARGV: expected version ("0" = must
# not exist), new version, data, ttl ms, the list row, this write's id, the events' ttl ms, then
# the events' JSON (appended first, whatever the version check says: they are told before the
# task is stored). Returns {1, last event id} on success, {0, ...} on a version mismatch, {-1, ...}
# on a missing key. The same write sent again (a client's retry after its reply was lost: the
# write id and the new version are stored) answers success again and changes nothing.
_CAS = """
local cur = redis.call('HGET', KEYS[1], 'v')
if cur == ARGV[2] and redis.call('HGET', KEYS[1], 'w') == ARGV[6] then
  return {1, redis.call('HGET', KEYS[1], 'e') or ''}
end
local last = ''
if KEYS[2] then
  for i = 8, #ARGV do
    last = redis.call('XADD', KEYS[2], '0-*', 'e', ARGV[i])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
if cur == false then
  if ARGV[1] ~= '0' then return {-1, last} end
elseif cur ~= ARGV[1] then
  return {0, last}
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'data', ARGV[3], 's', ARGV[5], 'w', ARGV[6], 'e', last)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, last}
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
        ttl_s: How long a task that has not finished lives after its last write
            (``storage.retention.held_task_seconds``).
        finished_ttl_s: How long a finished task's record lives after it ended
            (``storage.retention.finished_task_seconds``).
        events_ttl_s: How long a finished task's events live when saved with it
            (``storage.retention.task_event_seconds``; see :meth:`save_told`).
        lock_ttl_s: A lock's lifetime, so a crashed replica cannot hold a task forever.
        on_redis_error: Called with the operation (``"task_store.save"`` ...) whenever a
            Redis error escapes one (see :mod:`middleware.redis.errors`).
        max_listed: Task ids each list set keeps (the newest).
        prune_every: Every this many creates, the list sets that create wrote drop the ids
            of expired tasks among their oldest (:meth:`prune_listed`).
        replica_acks: A task write is acknowledged only once this many replicas have it
            (``WAIT``, in the write's own round trip; ``storage.replica_acks``): a failover then
            never loses a task a client was told about. 0 (the default) does not wait.
        replica_ack_timeout_ms: How long a write waits for them; fewer in time and the write
            raises (UNAVAILABLE to the client: it may or may not be kept, as any write whose
            answer was lost, and the takeover sweep ends the task if it is).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "agency:",
        ttl_s: float = 7 * 24 * 3600,
        finished_ttl_s: float = 3600.0,
        events_ttl_s: float = 300.0,
        lock_ttl_s: float = 30.0,
        poll_s: float = 0.01,
        owns_client: bool = False,
        on_redis_error: RedisErrorHook | None = None,
        max_listed: int = 1_000_000,
        prune_every: int = 64,
        replica_acks: int = 0,
        replica_ack_timeout_ms: int = 1000,
    ) -> None:
        for name, value in (
            ("ttl_s", ttl_s),
            ("finished_ttl_s", finished_ttl_s),
            ("events_ttl_s", events_ttl_s),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0")
        self._redis = client
        self.on_redis_error = on_redis_error
        self._owns_client = owns_client
        self._prefix = prefix
        self.prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._finished_ttl_ms = max(1, int(finished_ttl_s * 1000))
        self._events_ttl_ms = max(1, int(events_ttl_s * 1000))
        self._lock_ttl_ms = int(lock_ttl_s * 1000)
        self._poll_s = poll_s
        self._max_listed = max_listed
        self._prune_every = max(1, prune_every)
        self._creates = 0
        self._cas = client.register_script(_CAS)
        self._cluster = _is_cluster(client)
        self._release = client.register_script(_RELEASE)
        if replica_acks < 0 or replica_ack_timeout_ms <= 0:
            raise ValueError("replica_acks must be >= 0 and replica_ack_timeout_ms > 0")
        if replica_acks and self._cluster:  # WAIT names no key: a cluster client cannot route it
            raise ValueError("replica_acks is not supported on a Redis Cluster")
        self.replica_acks = replica_acks
        self._ack_timeout_ms = replica_ack_timeout_ms

    def _wait_into(self, batch: Batch) -> int:
        """Queue the replicas' acknowledgement of what ``batch`` wrote (-1: none asked)."""
        return batch.command("wait", self.replica_acks, self._ack_timeout_ms) if self.replica_acks else -1

    def _acked(self, results: list[Any], at: int) -> None:
        if at >= 0 and int(results[at]) < self.replica_acks:
            raise RedisError(
                f"the write reached {int(results[at])} of the {self.replica_acks} replicas asked "
                f"(storage.replica_acks) within {self._ack_timeout_ms} ms: not acknowledged"
            )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTaskStore:
        """A store on its own connection to ``url`` (closed by :meth:`close`)."""
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    @property
    def client(self) -> Any:
        """The Redis client (the task leases and event log of a gateway may share it)."""
        return self._redis

    def key(self, task_id: str) -> str:
        """The hash of ``task_id``'s record."""
        return keys.task(self._prefix, task_id)

    _key = key

    def lock_key(self, task_id: str) -> str:
        """The key of ``task_id``'s lock (in the task's hash slot)."""
        return keys.task_lock(self._prefix, task_id)

    def events_key(self, task_id: str) -> str:
        """The stream of ``task_id``'s events (as :meth:`RedisTaskEventLog.key` names it)."""
        return keys.task_events(self._prefix, task_id)

    def _record_ttl_ms(self, record: TaskRecord) -> int:
        return self._finished_ttl_ms if record.state.terminal else self._ttl_ms

    def _listed(self, client: str | None, tenant: str | None = None) -> str:
        """The sorted set listing every task (``None``) or one client's (of ``tenant``: two
        tenants' clients of one name are two clients)."""
        if client is None:
            return keys.tasks(self._prefix)
        return keys.client_tasks(self._prefix, client.strip().casefold(), tenant or None)

    def _create_into(self, batch: Batch, record: TaskRecord) -> int:
        """Queue the new record (its version check is in the script) and its list rows; returns
        the index of the record's reply."""
        record.version = 1
        summary = summary_of(record)
        created_at = batch.script(
            self._cas,
            [self.key(record.task_id)],
            [
                "0",
                1,
                record.model_dump_json(),
                self._record_ttl_ms(record),
                summary.model_dump_json(),
                _write_id(),
            ],
        )
        created = micros(record.created_at)
        oldest = created - self._ttl_ms * 1000  # ids older than any unwritten record
        for key in self._listed_keys(record):
            # NX: a duplicate id (refused below) does not move the listed task
            batch.command("zadd", key, {record.task_id: created}, nx=True)
            batch.command("zremrangebyscore", key, "-inf", f"({oldest}")
            batch.command("zremrangebyrank", key, 0, -self._max_listed - 1)
        return created_at

    @staticmethod
    def _created(record: TaskRecord, result: Any) -> None:
        if int(result[0]) != 1:
            record.version = 0
            raise AlreadyExists(f"task {record.task_id!r} already exists")

    @redis_operation("task_store.create")
    async def create(self, record: TaskRecord) -> None:
        batch = Batch()
        at = self._create_into(batch, record)
        acked = self._wait_into(batch)
        results = await batch.run(self._redis)
        self._created(record, results[at])
        self._acked(results, acked)
        await self._maybe_prune(record)

    def batches_with(self, events: Any, leases: Any) -> bool:
        """True when ``events`` is a Redis event log under this store's prefix and ``leases`` is
        None or Redis leases under it (see :class:`~middleware.task_store.BatchingTaskStore`)."""
        from .task_events import RedisTaskEventLog
        from .task_leases import RedisTaskLeases

        if not isinstance(events, RedisTaskEventLog) or events.key("t") != self.events_key("t"):
            return False
        return leases is None or (isinstance(leases, RedisTaskLeases) and leases.prefix == self._prefix)

    @redis_operation("task_store.create")
    async def create_leased(self, record: TaskRecord, leases: Any, holder: Holder) -> bool:
        """Hold ``holder``'s lease on the new task and store it, in one round trip (two on a
        Redis Cluster, the lease first: the lease and the task live on different masters, and a
        task stored while its lease's master is down would be running with no lease, found by
        no takeover sweep).

        Returns:
            False when another holder has a lease on this task id (nothing was stored: a record
            this call made meanwhile is taken back).

        ``leases`` must be a :class:`~middleware.redis.task_leases.RedisTaskLeases` on the same
        Redis (see :meth:`batches_with`).

        Raises:
            AlreadyExists: a task with this id exists.
        """
        batch = Batch()
        hold = leases.hold_into(batch, record.task_id, holder)
        if self._cluster:  # the lease's slot and the task's are on two masters: the lease first,
            lease = int((await batch.run(self._redis))[hold])  # so no task is stored without one
            batch, hold = Batch(), -1  # (one master down: the task's write is not even sent)
            if not lease:
                record.version = 0
                return False
        at = self._create_into(batch, record)
        acked = self._wait_into(batch)
        results = await batch.run(self._redis)
        if hold >= 0:
            lease = int(results[hold])  # 1 taken now, 2 this holder's already, 0 another's
        created = int(results[at][0]) == 1
        if not lease:
            if created:  # a lease left on no task by a gateway that died before storing it
                await self._redis.delete(self.key(record.task_id))
            record.version = 0
            return False
        if not created and lease == 1:  # a lease this call took, on a task that exists
            await leases.release(record.task_id, holder)
        self._created(record, results[at])
        self._acked(results, acked)
        await self._maybe_prune(record)
        return True

    async def _maybe_prune(self, record: TaskRecord) -> None:
        self._creates += 1
        if self._creates % self._prune_every == 0:
            for key in self._listed_keys(record):
                await self.prune_listed(key, now=record.created_at)

    def _listed_keys(self, record: TaskRecord) -> list[str]:
        return list(
            dict.fromkeys(
                [self._listed(None), *([self._listed(record.client, record.tenant)] if record.client else [])]
            )
        )

    @redis_operation("task_store.prune")
    async def prune_listed(self, key: str, *, now: datetime, limit: int = 256) -> int:
        """Drop from the list set ``key`` the ids of expired tasks among the oldest ``limit`` created
        more than ``finished_ttl_s`` before ``now`` (a younger task cannot have expired yet): a
        finished task's list row goes about when its record does, not ``ttl_s`` after it was
        created. Three round trips, every ``prune_every`` creates. Returns how many went."""
        cutoff = micros(now) - self._finished_ttl_ms * 1000
        ids = [_text(m) for m in await self._redis.zrangebyscore(key, "-inf", cutoff, start=0, num=limit)]
        if not ids:
            return 0
        batch = Batch()
        for task_id in ids:
            batch.command("exists", self.key(task_id))
        gone = [t for t, there in zip(ids, await batch.run(self._redis), strict=True) if not int(there)]
        if gone:
            await self._redis.zrem(key, *gone)
        return len(gone)

    @redis_operation("task_store.get")
    async def get(self, task_id: str) -> TaskRecord:
        data = await self._redis.hget(self._key(task_id), "data")
        if data is None:
            raise NotFound(f"no task {task_id!r}")
        return TaskRecord.model_validate_json(data)

    @redis_operation("task_store.save")
    async def save(self, record: TaskRecord) -> None:
        await self._save(record, ())

    @redis_operation("task_store.save")
    async def save_told(self, record: TaskRecord, events: Sequence[TaskEvent]) -> int:
        """Append ``events`` to the task's event stream, then save ``record`` (as :meth:`save`),
        in one script: followers are told before the task is stored, as with an append followed
        by a save, in one round trip. A finished task's stream then lives ``events_ttl_s``.

        Returns:
            The seq of the last event appended (0 when none were).

        Raises:
            ConcurrentUpdate: someone else saved a newer version first (the events are appended).
            NotFound: the task is gone.
        """
        return await self._save(record, events)

    async def _save(self, record: TaskRecord, events: Sequence[TaskEvent]) -> int:
        old = record.version
        record.version = old + 1  # written as the new version (no copy of the record for it)
        data = record.model_dump_json()
        record.version = old  # until the write is known to have won
        row = summary_of(record).model_dump_json()
        ttl = self._record_ttl_ms(record)
        names = [self.key(record.task_id)]
        args: list[Any] = [str(old), old + 1, data, ttl, row, _write_id()]
        if events:
            names.append(self.events_key(record.task_id))
            events_ttl = self._events_ttl_ms if record.state.terminal else ttl
            args += [events_ttl, *(event.to_json() for event in events)]
        if self.replica_acks:
            batch = Batch()
            at = batch.script(self._cas, names, args)
            acked = self._wait_into(batch)
            results = await batch.run(self._redis)
            result, last = results[at]
            if int(result) == 1:
                self._acked(results, acked)
        else:
            result, last = await self._cas(keys=names, args=args)
        if int(result) == -1:
            raise NotFound(f"no task {record.task_id!r}")
        if int(result) == 0:
            raise ConcurrentUpdate(f"task {record.task_id} changed concurrently (writing over v{old})")
        record.version = old + 1
        text = last.decode() if isinstance(last, bytes) else str(last or "")
        return int(text.partition("-")[2] or 0)

    @asynccontextmanager
    async def lock(self, task_id: str, *, wait_s: float = 2.0) -> AsyncIterator[None]:
        key = self.lock_key(task_id)
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


def _write_id() -> str:
    """A write's id: a retry of the same write (redis-py's, on a new connection after the reply
    was lost) is told apart from another writer's by it (see ``_CAS``)."""
    return secrets.token_hex(8)


def _is_cluster(client: Any) -> bool:
    """Whether ``client`` is redis-py's cluster client (keys of two slots: two masters)."""
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, RedisCluster)
