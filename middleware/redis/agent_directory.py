"""The agent directory in Redis (:class:`RedisDirectory`); the interface and the memory version are
:mod:`middleware.messaging.directory` (its docstring gives the key layout)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from ..messaging.directory import AgentRecord
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisDirectory"]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# KEYS: agents, tokens. ARGV: name, token hash, record JSON. 1 = added, 0 = name taken.
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
"""


class RedisDirectory:
    """The directory in Redis: every replica under the same prefix shares it.

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
        self._agents = f"{prefix}agents"
        self._tokens = f"{prefix}agents:tokens"
        self._seen = f"{prefix}agents:seen"
        self._add = client.register_script(_ADD)

    @redis_operation("directory.add")
    async def add(self, record: AgentRecord) -> bool:
        added = await self._add(
            keys=[self._agents, self._tokens],
            args=[record.name, record.token_sha256, record.model_dump_json()],
        )
        return bool(int(added))

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
