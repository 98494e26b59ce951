"""Rate-limit buckets in Redis (:class:`RedisBuckets`); the limits, the interface and the memory
store are :mod:`middleware.messaging.limits`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ..messaging.limits import Bucket
from . import keys as key_names
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisBuckets"]


# KEYS: bucket hashes. ARGV: (rate, burst) per key. Redis' clock, so replicas agree.
# Returns 0 when every bucket was charged, else {index (1-based), retry ms} of the longest wait.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local levels = {}
local worst, worst_ms = 0, 0
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local v = redis.call('HMGET', key, 't', 'at')
  local tokens, at = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or at == nil then tokens, at = burst, now end
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
  levels[i] = tokens
  if tokens < 1 then
    local ms = math.max(1, math.ceil((1 - tokens) / rate * 1000))
    if ms > worst_ms then worst, worst_ms = i, ms end
  end
end
if worst > 0 then return {worst, worst_ms} end
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  redis.call('HSET', key, 't', string.format('%.17g', levels[i] - 1), 'at', string.format('%.17g', now))
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
end
return 0
"""


class RedisBuckets:
    """Buckets in Redis under ``{prefix}{ratelimit}:{scope}:{name}``, shared by every replica.

    Every bucket carries the one hash tag ``{ratelimit}`` (one Redis Cluster slot): a take
    charges several buckets (sender, recipient, topic...) all or none in one script, and which
    buckets meet in one take is open-ended. The cost: on a cluster, rate limiting is served by
    one primary (one script per message: far below one primary's capacity).

    Args:
        client: A ``redis.asyncio.Redis``.
        prefix: The storage key prefix (``storage.key_prefix``).
        on_redis_error: Called with ``"ratelimit.take"`` when a Redis error escapes.
        owns_client: Close ``client`` in :meth:`close`.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "agency:",
        on_redis_error: RedisErrorHook | None = None,
        owns_client: bool = False,
    ) -> None:
        self._r = client
        self._prefix = prefix
        self.on_redis_error = on_redis_error
        self._owns_client = owns_client
        self._take = client.register_script(_TAKE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisBuckets:
        """Buckets on their own connection to ``url`` (closed by :meth:`close`)."""
        return cls(Redis.from_url(url), owns_client=True, **kwargs)

    @redis_operation("ratelimit.take")
    async def take(self, buckets: Sequence[Bucket]) -> tuple[Bucket, int] | None:
        if not buckets:
            return None
        keys = [key_names.rate_limits(self._prefix, b.key) for b in buckets]
        args: list[Any] = []
        for b in buckets:
            args += [repr(float(b.rate)), b.burst]
        got = await self._take(keys=keys, args=args)
        if not got:
            return None
        index, wait = int(got[0]), int(got[1])
        return buckets[index - 1], wait

    async def close(self) -> None:
        if self._owns_client:
            await self._r.aclose()
