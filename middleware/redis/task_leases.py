"""Task leases in Redis, shared by every gateway replica (see :mod:`middleware.task_leases`).

Layout (``P`` = prefix, default ``agency:``), two keys with one hash tag so that every
script touches one hash slot (Redis Cluster)::

    P{task-leases}          sorted set   task id -> expiry (ms, the Redis server's clock)
    P{task-leases}:owners   hash         task id -> holder ("TOKEN NODE")

Each operation is one Lua script that reads the time with ``TIME`` on the server, so the
gateways' own clocks play no part in who expires when. :meth:`RedisTaskLeases.take` is the
compare-and-set of the takeover: it extends a lease by one lease only while it is expired, so of
the replicas that saw it expired exactly one gets its holder back (and the lease stays until the
taker releases it, so a taker that fails midway leaves it to expire and be taken again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..task_leases import Holder
from . import keys
from .batch import Batch
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisTaskLeases"]

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: expiries, owners; ARGV: task id, holder, lease ms, force (1/0). 1 = held (taken now),
# 2 = held (the holder's already: renewed), 0 = another's.
_HOLD = (
    _NOW
    + """
local current = redis.call('HGET', KEYS[2], ARGV[1])
if current and current ~= ARGV[2] and ARGV[4] ~= '1' then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if current == ARGV[2] then return 2 end
return 1
"""
)

# KEYS: expiries, owners; ARGV: holder, lease ms, n released, released ids (n), task ids...
# Drops the holder's leases on the released ids; renews the rest; returns the ids not held.
_RENEW = (
    _NOW
    + """
local released = tonumber(ARGV[3])
for i = 4, 3 + released do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[1] then
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
local lost = {}
for i = 4 + released, #ARGV do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[1] then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[i])
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
"""
)

# KEYS: expiries, owners; ARGV: task id, holder.
_RELEASE = """
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
return 0
"""

# KEYS: expiries; ARGV: limit.
_EXPIRED = (
    _NOW
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
"""
)

# KEYS: expiries, owners; ARGV: task id, lease ms. The holder of an expired lease (now extended
# by a lease: the taker's time to mark the task), or false.
_TAKE = (
    _NOW
    + """
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) > now then return false end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('HGET', KEYS[2], ARGV[1]) or ''
"""
)


class RedisTaskLeases:
    """A :class:`~middleware.task_leases.TaskLeases` in Redis.

    Args:
        client: A ``redis.asyncio.Redis`` client (the caller owns it unless ``owns_client``).
        prefix: Namespace of the keys (replicas that take over each other's tasks share it).
        lease_seconds: How long a lease lasts unless renewed.
        on_redis_error: Told the operation of every Redis error (see :mod:`.errors`).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "agency:",
        lease_seconds: float = 30.0,
        owns_client: bool = False,
        on_redis_error: RedisErrorHook | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        self._redis = client
        self._owns_client = owns_client
        self.on_redis_error = on_redis_error
        self.lease_seconds = lease_seconds
        self.prefix = prefix
        self._lease_ms = max(1, int(lease_seconds * 1000))
        self._keys = list(keys.task_leases(prefix))
        self._hold = client.register_script(_HOLD)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._expired = client.register_script(_EXPIRED)
        self._take = client.register_script(_TAKE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTaskLeases:
        """Leases on their own connection to ``url`` (closed by :meth:`close`)."""
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    @redis_operation("task_leases.hold")
    async def hold(self, task_id: str, holder: Holder, *, force: bool = False) -> bool:
        args = [task_id, holder.encode(), self._lease_ms, 1 if force else 0]
        return int(await self._hold(keys=self._keys, args=args)) != 0

    @property
    def client(self) -> Any:
        """The Redis client (a task store batching with these leases runs on the same Redis)."""
        return self._redis

    def hold_into(self, batch: Batch, task_id: str, holder: Holder) -> int:
        """Queue :meth:`hold` (not forced) in ``batch`` (run on a client of the same Redis; the
        reply: 1 taken now, 2 the holder's already, 0 another's), so that a new task and its lease go
        in one round trip.
        Returns the reply's index."""
        return batch.script(self._hold, self._keys, [task_id, holder.encode(), self._lease_ms, 0])

    @redis_operation("task_leases.renew")
    async def renew(
        self, task_ids: Sequence[str], holder: Holder, *, release: Sequence[str] = ()
    ) -> list[str]:
        if not task_ids and not release:
            return []
        args = [holder.encode(), self._lease_ms, len(release), *release, *task_ids]
        return [_text(t) for t in await self._renew(keys=self._keys, args=args)]

    @redis_operation("task_leases.release")
    async def release(self, task_id: str, holder: Holder) -> None:
        await self._release(keys=self._keys, args=[task_id, holder.encode()])

    @redis_operation("task_leases.expired")
    async def expired(self, *, limit: int = 100) -> list[str]:
        return [_text(t) for t in await self._expired(keys=self._keys[:1], args=[limit])]

    @redis_operation("task_leases.take")
    async def take(self, task_id: str) -> Holder | None:
        holder = await self._take(keys=self._keys, args=[task_id, self._lease_ms])
        return None if holder is None else Holder.decode(_text(holder))

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
