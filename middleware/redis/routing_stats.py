"""Routing statistics in Redis, so every gateway replica ranks with the same numbers.

Per agent (``P`` = prefix, default ``agency:stats:``; both keys carry the agent's hash tag, so
the outcome script stays in one Redis Cluster slot: see :mod:`.keys`)::

    P{stats:<name@version>}:outcomes   list   the last ``window`` outcomes, newest first ("1"/"0")
    P{stats:<name@version>}            hash   ok (successes in the list), n (list length), in_flight

A Lua script keeps ``ok``/``n`` in step with the list. Keys expire after ``ttl_seconds``
without dispatches, so agents that left do not leak stats. ``in_flight`` is a shared counter:
a gateway that dies mid-call leaves it raised until the replica that takes its task over
(``middleware.takeover``) lowers it with :meth:`RedisRoutingStats.released`.

**Round trips.** One per dispatch in the steady state (the outcome script), and none to rank:

- ``started`` only counts the dispatch in this process. The count reaches Redis with the
  dispatch's own outcome script (a short call: start and end are one script), with the next
  re-read of stats, or at the latest ``flush_seconds`` after the start (a timer).
- ``snapshots`` answers from the numbers this gateway last read or wrote, re-read (one
  pipeline, which also carries the unsent starts) once they are older than ``max_age_seconds``.
  This gateway's own starts and outcomes are in its answers at once.

**Staleness bound.** Another gateway's dispatches are in this gateway's ranking at most
``flush_seconds + max_age_seconds`` after they start (default 1 s + 1 s) and ``max_age_seconds``
after they end. A gateway that dies within ``flush_seconds`` of a start never sent it, so the
takeover's ``released`` lowers the agent's count by one too many; the count never goes below
zero, so the error is gone once the agent is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from redis.asyncio import Redis

from ..routing_stats import AgentStats
from . import keys as key_names
from .batch import Batch
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisRoutingStats"]

# ARGV: outcome (1/0), window, TTL ms, starts not yet counted; answers {ok, n, in_flight}
_FINISHED_LUA = """
local popped = 0
if tonumber(ARGV[4]) > 0 then redis.call('HINCRBY', KEYS[2], 'in_flight', ARGV[4]) end
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
return redis.call('HMGET', KEYS[2], 'ok', 'n', 'in_flight')
"""

# ARGV: starts not yet counted (this gateway's)
_RELEASED_LUA = """
if tonumber(ARGV[1] or 0) > 0 then redis.call('HINCRBY', KEYS[1], 'in_flight', ARGV[1]) end
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
        max_age_seconds: Ranking uses numbers read at most this long ago (0: read every time).
        flush_seconds: A started dispatch reaches Redis at most this long after it started.
        monotonic: Monotonic seconds, for ``max_age_seconds`` (injected in tests).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "agency:stats:",
        window: int = 100,
        ttl_seconds: float = 86_400,
        on_redis_error: RedisErrorHook | None = None,
        max_age_seconds: float = 1.0,
        flush_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.on_redis_error = on_redis_error
        self.prefix = prefix
        self.window = window
        self.max_age_seconds = max_age_seconds
        self.flush_seconds = flush_seconds
        self._monotonic = monotonic
        self._ttl_ms = int(ttl_seconds * 1000)
        self._finished = redis.register_script(_FINISHED_LUA)
        self._released = redis.register_script(_RELEASED_LUA)
        # starts counted here but not yet in Redis, by agent (never negative)
        self._unsent: dict[str, int] = {}
        # starts on their way to Redis (a flush or a re-read under way): still counted here
        self._sending: dict[str, int] = {}
        # the numbers last read or written, by agent: (stats with Redis's in_flight, when)
        self._known: dict[str, tuple[AgentStats, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        #: Re-reads of stats older than ``max_age_seconds`` (one round trip each; tests count them).
        self.reads = 0
        #: Flushes that sent starts (tests wait for the next one instead of sleeping).
        self.flushes = 0
        self._flushed_now = asyncio.Event()

    @redis_operation("routing_stats.started")
    async def started(self, agent: str) -> None:
        self._unsent[agent] = self._unsent.get(agent, 0) + 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_seconds, self._flush_due)

    @redis_operation("routing_stats.finished")
    async def finished(self, agent: str, *, success: bool) -> None:
        stats, outcomes = key_names.routing_stats(self.prefix, agent)
        unsent = self._unsent.pop(agent, 0)
        batch = Batch()
        batch.script(
            self._finished, [outcomes, stats], [1 if success else 0, self.window, self._ttl_ms, unsent]
        )
        try:
            (row,) = await batch.run(self.redis)
        except BaseException:
            if unsent > 1:  # the other starts are still in flight; this one is over
                self._unsent[agent] = self._unsent.get(agent, 0) + unsent - 1
            raise
        self._remember({agent: row})

    @redis_operation("routing_stats.released")
    async def released(self, agent: str) -> None:
        unsent = self._unsent.pop(agent, 0)
        batch = Batch()
        batch.script(self._released, [key_names.routing_stats(self.prefix, agent)[0]], [unsent])
        try:
            await batch.run(self.redis)
        except BaseException:
            if unsent:
                self._unsent[agent] = self._unsent.get(agent, 0) + unsent
            raise
        self._known.pop(agent, None)  # read again next time

    async def snapshot(self, agent: str) -> AgentStats:
        return (await self.snapshots([agent]))[agent]

    @redis_operation("routing_stats.snapshot")
    async def snapshots(self, agents: Sequence[str]) -> dict[str, AgentStats]:
        now = self._monotonic()
        old = [
            a
            for a in dict.fromkeys(agents)
            if (k := self._known.get(a)) is None or now - k[1] >= self.max_age_seconds
        ]
        if old:
            batch = Batch()
            unsent = self._queue_unsent(batch)
            rows = [
                batch.command("hmget", key_names.routing_stats(self.prefix, a)[0], "ok", "n", "in_flight")
                for a in old
            ]
            try:
                replies = await batch.run(self.redis)
            except BaseException:
                self._restore(unsent)
                raise
            # read after the starts were added (one pipeline, in order): Redis's counts hold them
            self._remember({a: replies[i] for a, i in zip(old, rows, strict=True)}, now)
            self._done_sending({a: n for a, n in unsent.items() if a in old})
            self._sent({a: n for a, n in unsent.items() if a not in old}, now)
            self.reads += 1
        return {agent: self._view(agent) for agent in agents}

    @redis_operation("routing_stats.flush")
    async def flush(self) -> None:
        """Send the starts counted here but not yet in Redis (one round trip; none if none)."""
        batch = Batch()
        unsent = self._queue_unsent(batch)
        if not unsent:
            return
        began = self._monotonic()
        try:
            await batch.run(self.redis)
        except BaseException:
            self._restore(unsent)
            raise
        self._sent(unsent, began)
        self.flushes += 1
        self._flushed_now.set()

    async def wait_flushed(self, after: int) -> None:
        """Wait until more than ``after`` flushes have sent starts (for tests)."""
        while self.flushes <= after:
            self._flushed_now.clear()
            await self._flushed_now.wait()

    async def aclose(self) -> None:
        """Send the unsent starts and stop the timer (the client is the caller's)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            with contextlib.suppress(Exception):
                await self._flushing
        await self.flush()

    # ----------------------------------------------------------------- helpers
    def _flush_due(self) -> None:
        self._timer = None
        if self._unsent and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.get_running_loop().create_task(self.flush(), name="routing-stats-flush")
            self._flushing.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self._timer is None:
            # counted by redis_operation; try again a period later
            self._timer = asyncio.get_running_loop().call_later(self.flush_seconds, self._flush_due)

    def _queue_unsent(self, batch: Batch) -> dict[str, int]:
        """Queue the unsent starts into ``batch``; they count as sending until :meth:`_sent`
        or :meth:`_restore` (a route meanwhile still sees them)."""
        unsent, self._unsent = self._unsent, {}
        for agent, n in unsent.items():
            self._sending[agent] = self._sending.get(agent, 0) + n
            stats = key_names.routing_stats(self.prefix, agent)[0]
            batch.command("hincrby", stats, "in_flight", n)
            batch.command("pexpire", stats, self._ttl_ms)
        return unsent

    def _done_sending(self, unsent: dict[str, int]) -> None:
        for agent, n in unsent.items():
            left = self._sending.get(agent, 0) - n
            if left > 0:
                self._sending[agent] = left
            else:
                self._sending.pop(agent, None)

    def _restore(self, unsent: dict[str, int]) -> None:
        self._done_sending(unsent)
        for agent, n in unsent.items():
            self._unsent[agent] = self._unsent.get(agent, 0) + n

    def _sent(self, unsent: dict[str, int], began: float) -> None:
        """``unsent`` reached Redis (sent from ``began``): the numbers read before that get
        them added; numbers read while they were on their way may or may not hold them, so they
        are read again next time (never counted twice, never lost)."""
        self._done_sending(unsent)
        for agent, n in unsent.items():
            if (known := self._known.get(agent)) is None:
                continue
            stats, at = known
            if at < began:
                self._known[agent] = (_with(stats, in_flight=stats.in_flight + n), at)
            else:  # read while they were on their way: read again next time
                self._known[agent] = (stats, float("-inf"))

    def _remember(self, rows: dict[str, Sequence[object]], at: float | None = None) -> None:
        at = self._monotonic() if at is None else at
        if len(self._known) > 100_000:
            self._known.clear()
        for agent, (ok, n, in_flight) in rows.items():
            samples = int(n or 0)  # type: ignore[call-overload]
            self._known[agent] = (
                AgentStats(
                    success_rate=int(ok or 0) / samples if samples else 1.0,  # type: ignore[call-overload]
                    in_flight=int(in_flight or 0),  # type: ignore[call-overload]
                    samples=samples,
                ),
                at,
            )

    def _view(self, agent: str) -> AgentStats:
        stats = self._known[agent][0]
        mine = self._unsent.get(agent, 0) + self._sending.get(agent, 0)
        return _with(stats, in_flight=max(0, stats.in_flight + mine))


def _with(stats: AgentStats, *, in_flight: int) -> AgentStats:
    return AgentStats(success_rate=stats.success_rate, in_flight=in_flight, samples=stats.samples)
