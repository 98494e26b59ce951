"""Spending sums in Redis (:class:`RedisUsageMeter`), shared by every replica; the interface and
the memory version are :mod:`middleware.usage_meter`.

One hash per entity and period: ``{prefix}{usage:<scope>:<name>}:<period>`` with the fields
``in``, ``out`` and ``micros`` (HINCRBY: exact integer sums from any replica), and the alert
marks beside it in ``...:<period>:marks`` (SADD: once per period and threshold). Both keys of
one entity carry the entity's hash tag, so they stay in one Redis Cluster slot. Day counters
expire after 3 days, month counters after 40 days; totals do not expire.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ..usage_meter import Counter, Spend
from . import keys
from .batch import Batch
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisUsageMeter"]

_DAY = 86_400

# KEYS: one entity's period hashes (one hash tag: one slot). ARGV: in, out, micros, then a TTL
# per key (0: none). Returns the new in, out, micros of each key, flat.
_ADD = """
local out = {}
for i, key in ipairs(KEYS) do
  local a = redis.call('HINCRBY', key, 'in', ARGV[1])
  local b = redis.call('HINCRBY', key, 'out', ARGV[2])
  local c = redis.call('HINCRBY', key, 'micros', ARGV[3])
  local ttl = tonumber(ARGV[3 + i])
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
end
return out
"""


def _ttl(period: str) -> int | None:
    if period == "total":
        return None
    return 3 * _DAY if len(period) == 10 else 40 * _DAY  # 2026-12-31 | 2026-12


class RedisUsageMeter:
    """Sums in Redis under ``{prefix}{usage:<scope>:<name>}:<period>``.

    Args:
        client: A ``redis.asyncio.Redis``.
        prefix: The storage key prefix (``storage.key_prefix``).
        on_redis_error: Called with the operation when a Redis error escapes.
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
        self._add = client.register_script(_ADD)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisUsageMeter:
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    def key(self, counter: Counter) -> str:
        return keys.usage(self._prefix, counter.scope, counter.name, counter.period)

    @redis_operation("usage.add")
    async def add(
        self, counters: Sequence[Counter], *, input_tokens: int, output_tokens: int, cost_micros: int
    ) -> list[Spend]:
        # one script per entity (its period hashes share a hash tag, so a cluster slot), all of
        # them in one pipeline: one round trip, and a handful of commands instead of 4 per counter
        groups: dict[tuple[str, str], list[int]] = {}
        for i, c in enumerate(counters):
            groups.setdefault((c.scope, c.name), []).append(i)
        batch = Batch()  # by EVALSHA: no SCRIPT EXISTS round trip before it
        for indexes in groups.values():
            names = [self.key(counters[i]) for i in indexes]
            ttls = [_ttl(counters[i].period) or 0 for i in indexes]
            batch.script(self._add, names, [input_tokens, output_tokens, cost_micros, *ttls])
        results = await batch.run(self._r)
        out: list[Spend | None] = [None] * len(counters)
        for indexes, got in zip(groups.values(), results, strict=True):
            for j, i in enumerate(indexes):
                out[i] = Spend(int(got[3 * j]), int(got[3 * j + 1]), int(got[3 * j + 2]))
        return [s for s in out if s is not None]

    @redis_operation("usage.get")
    async def get(self, counters: Sequence[Counter]) -> list[Spend]:
        pipe = self._r.pipeline(transaction=False)
        for c in counters:
            pipe.hmget(self.key(c), "in", "out", "micros")
        got = await pipe.execute()
        return [Spend(*(int(v) if v is not None else 0 for v in values)) for values in got]

    @redis_operation("usage.mark")
    async def first_time(self, counter: Counter, mark: str) -> bool:
        key = keys.usage_marks(self._prefix, counter.scope, counter.name, counter.period)
        batch = Batch()  # the mark and its TTL in one round trip
        batch.command("sadd", key, mark)
        if (ttl := _ttl(counter.period)) is not None:
            batch.command("expire", key, ttl)
        return int((await batch.run(self._r))[0]) == 1

    async def close(self) -> None:
        if self._owns_client:
            await self._r.aclose()
