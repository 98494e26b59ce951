"""The agent directory in Redis (:class:`RedisDirectory`); the interface and the memory version are
:mod:`middleware.messaging.directory` (its docstring gives the key layout)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from ..messaging.directory import AgentRecord, Taken
from .errors import RedisErrorHook, redis_operation
from .keys import directory as directory_keys

__all__ = ["RedisDirectory"]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# KEYS: agents, tokens, look-alike keys, the client's set. ARGV: name, token hash, record JSON,
# quota (0 = none), client, look-alike keys... Returns {why, other}: why "" = added.
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {'name', ''} end
for i = 6, #ARGV do
  local other = redis.call('HGET', KEYS[3], ARGV[i])
  if other then return {'look_alike', other} end
end
local quota = tonumber(ARGV[4])
if quota > 0 and ARGV[5] ~= '' and redis.call('SCARD', KEYS[4]) >= quota then return {'quota', ''} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
for i = 6, #ARGV do redis.call('HSET', KEYS[3], ARGV[i], ARGV[1]) end
if ARGV[5] ~= '' then redis.call('SADD', KEYS[4], ARGV[1]) end
return {'', ''}
"""


class RedisDirectory:
    """The directory in Redis: every replica under the same prefix shares it.

    Every key carries the hash tag ``{directory}`` (one Redis Cluster slot): adding an agent is
    one script over the records, the token index, the look-alike names and the client's set.

    Args:
        client: A ``redis.asyncio.Redis``.
        prefix: The storage key prefix.
        on_redis_error: Called with ``"directory.<op>"`` when a Redis error escapes.
    """

    def __init__(
        self, client: Redis, *, prefix: str = "agency:", on_redis_error: RedisErrorHook | None = None
    ):
        self._r = client
        self.on_redis_error = on_redis_error
        self._prefix = prefix
        self._agents = directory_keys.agents(prefix)
        self._tokens = directory_keys.tokens(prefix)
        self._seen = directory_keys.seen(prefix)
        self._keys = directory_keys.names(prefix)
        self._add = client.register_script(_ADD)

    def _by(self, client: str) -> str:
        return directory_keys.of_client(self._prefix, client)

    @redis_operation("directory.add")
    async def add(self, record: AgentRecord, *, max_per_client: int = 0) -> Taken | None:
        why, other = await self._add(
            keys=[self._agents, self._tokens, self._keys, self._by(record.registered_by)],
            args=[
                record.name,
                record.token_sha256,
                record.model_dump_json(),
                max_per_client,
                record.registered_by,
                *record.name_keys,
            ],
        )
        why, other = _s(why), _s(other)
        return Taken(why, other) if why else None  # type: ignore[arg-type]

    @redis_operation("directory.put")
    async def put(self, record: AgentRecord) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(self._agents, record.name, record.model_dump_json())
        pipe.hset(self._tokens, record.token_sha256, record.name)
        await pipe.execute()

    @redis_operation("directory.get")
    async def get(self, name: str) -> AgentRecord | None:
        raw = await self._r.hget(self._agents, name)
        return AgentRecord.model_validate_json(raw) if raw else None

    @redis_operation("directory.by_token")
    async def by_token(self, token_sha256: str) -> AgentRecord | None:
        name = await self._r.hget(self._tokens, token_sha256)
        if not name:
            return None
        record = await self.get(_s(name))
        return record if record is not None and record.token_sha256 == token_sha256 else None

    @redis_operation("directory.remove")
    async def remove(self, name: str) -> AgentRecord | None:
        record = await self.get(name)
        if record is None:
            return None
        pipe = self._r.pipeline(transaction=True)
        pipe.hdel(self._agents, name)
        pipe.hdel(self._tokens, record.token_sha256)
        pipe.hdel(self._seen, name)
        for key in record.name_keys:
            pipe.hdel(self._keys, key)
        if record.registered_by:
            pipe.srem(self._by(record.registered_by), name)
        await pipe.execute()
        return record

    @redis_operation("directory.all")
    async def all(self) -> list[AgentRecord]:
        raw = await self._r.hgetall(self._agents)
        return sorted((AgentRecord.model_validate_json(v) for v in raw.values()), key=lambda r: r.name)

    @redis_operation("directory.touch")
    async def touch(self, name: str, at: float) -> None:
        await self._r.hset(self._seen, name, repr(at))

    @redis_operation("directory.last_seen")
    async def last_seen(self, names: list[str]) -> dict[str, float]:
        if not names:
            return {}
        values = await self._r.hmget(self._seen, names)
        return {n: float(_s(v)) for n, v in zip(names, values, strict=True) if v is not None}
