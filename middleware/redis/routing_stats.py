"""Routing statistics in Redis, so every gateway replica ranks with the same numbers.

Per agent (``P`` = prefix, default ``agency:stats:``; both keys carry the agent's hash tag, so
the outcome script stays in one Redis Cluster slot: see :mod:`.keys`)::

    P{stats:<name@version>}:outcomes   list   the last ``window`` outcomes, newest first ("1"/"0")
    P{stats:<name@version>}            hash   ok (successes in the list), n (list length), in_flight

A Lua script keeps ``ok``/``n`` in step with the list, so reading an agent's stats is one
HMGET and ranking N candidates is one pipelined round trip. Keys expire after
``ttl_seconds`` without dispatches, so agents that left do not leak stats. ``in_flight``
is a shared counter: a gateway that dies mid-call leaves it raised until the replica that
takes its task over (``middleware.takeover``) lowers it with :meth:`RedisRoutingStats.released`.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from ..routing_stats import AgentStats
from . import keys as key_names
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisRoutingStats"]

_FINISHED_LUA = """
local popped = 0
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then
  popped = tonumber(redis.call('RPOP', KEYS[1]) or 0)
  redis.call('HINCRBY', KEYS[2], 'n', -1)
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HINCRBY', KEYS[2], 'ok', tonumber(ARGV[1]) - popped)
local inflight = tonumber(redis.call('HGET', KEYS[2], 'in_flight') or 0)
if inflight > 0 then redis.call('HINCRBY', KEYS[2], 'in_flight', -1) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

_RELEASED_LUA = """
local inflight = tonumber(redis.call('HGET', KEYS[1], 'in_flight') or 0)
if inflight > 0 then redis.call('HINCRBY', KEYS[1], 'in_flight', -1) end
return 1
"""


class RedisRoutingStats:
    """Success rate over the last ``window`` dispatches and calls in flight, in Redis.

    Args:
        redis: An asyncio Redis client.
        prefix: Namespace of the keys (replicas sharing stats use the same one).
        window: How many recent outcomes the success rate covers.
        ttl_seconds: Stats of an agent with no dispatch for this long are dropped.
        on_redis_error: Called with the operation (``"routing_stats.finished"`` ...)
            whenever a Redis error escapes one (see :mod:`middleware.redis.errors`).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "agency:stats:",
        window: int = 100,
        ttl_seconds: float = 86_400,
        on_redis_error: RedisErrorHook | None = None,
    ) -> None:
        self.redis = redis
        self.on_redis_error = on_redis_error
        self.prefix = prefix
        self.window = window
        self._ttl_ms = int(ttl_seconds * 1000)
        self._finished = redis.register_script(_FINISHED_LUA)
        self._released = redis.register_script(_RELEASED_LUA)

    @redis_operation("routing_stats.started")
    async def started(self, agent: str) -> None:
        stats, _ = key_names.routing_stats(self.prefix, agent)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hincrby(stats, "in_flight", 1)
        pipe.pexpire(stats, self._ttl_ms)
        await pipe.execute()

    @redis_operation("routing_stats.finished")
    async def finished(self, agent: str, *, success: bool) -> None:
        stats, outcomes = key_names.routing_stats(self.prefix, agent)
        await self._finished(
            keys=[outcomes, stats],
            args=[1 if success else 0, self.window, self._ttl_ms],
        )

    @redis_operation("routing_stats.released")
    async def released(self, agent: str) -> None:
        await self._released(keys=[key_names.routing_stats(self.prefix, agent)[0]])

    async def snapshot(self, agent: str) -> AgentStats:
        return (await self.snapshots([agent]))[agent]

    @redis_operation("routing_stats.snapshot")
    async def snapshots(self, agents: Sequence[str]) -> dict[str, AgentStats]:
        pipe = self.redis.pipeline(transaction=False)
        for agent in agents:
            pipe.hmget(key_names.routing_stats(self.prefix, agent)[0], "ok", "n", "in_flight")
        rows = await pipe.execute() if agents else []
        out = {}
        for agent, (ok, n, in_flight) in zip(agents, rows, strict=True):
            samples = int(n or 0)
            out[agent] = AgentStats(
                success_rate=int(ok or 0) / samples if samples else 1.0,
                in_flight=max(0, int(in_flight or 0)),
                samples=samples,
            )
        return out
