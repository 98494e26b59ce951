"""The quarantine board in Redis (:class:`RedisBoard`); moderation rules, the interface and the
memory board are :mod:`middleware.messaging.moderation`."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from ..messaging.moderation import Quarantined
from .errors import RedisErrorHook, redis_operation
from .keys import quarantine as quarantine_keys

__all__ = ["RedisBoard"]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisBoard:
    """The board in Redis (``{prefix}{quarantine}:board`` hash; ``{prefix}{quarantine}:reports:{id}``
    hashes of reporter -> reason; one hash tag, one Redis Cluster slot: see :mod:`.keys`)."""

    def __init__(
        self, client: Redis, *, prefix: str = "agency:", on_redis_error: RedisErrorHook | None = None
    ):
        self._r = client
        self.on_redis_error = on_redis_error
        self._board = quarantine_keys.board(prefix)
        self._prefix = prefix

    @redis_operation("quarantine.hold")
    async def hold(self, item: Quarantined) -> None:
        await self._r.hset(self._board, item.message_id, item.model_dump_json())

    @redis_operation("quarantine.get")
    async def get(self, message_id: str) -> Quarantined | None:
        raw = await self._r.hget(self._board, message_id)
        return Quarantined.model_validate_json(raw) if raw else None

    @redis_operation("quarantine.take")
    async def take(self, message_id: str) -> Quarantined | None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hget(self._board, message_id)
        pipe.hdel(self._board, message_id)
        raw, _ = await pipe.execute()
        return Quarantined.model_validate_json(raw) if raw else None

    @redis_operation("quarantine.items")
    async def items(self, limit: int = 100) -> list[Quarantined]:
        raw = await self._r.hgetall(self._board)
        return sorted((Quarantined.model_validate_json(v) for v in raw.values()), key=lambda q: q.at)[:limit]

    @redis_operation("quarantine.is_held")
    async def is_held(self, message_ids: list[str]) -> set[str]:
        if not message_ids:
            return set()
        found = await self._r.hmget(self._board, message_ids)
        return {m for m, v in zip(message_ids, found, strict=True) if v is not None}

    @redis_operation("quarantine.report")
    async def report(self, message_id: str, reporter: str, reason: str = "") -> int:
        key = quarantine_keys.reports(self._prefix, message_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, reporter, reason)
        pipe.expire(key, 7 * 86400)
        pipe.hlen(key)
        _, _, count = await pipe.execute()
        return int(count)

    @redis_operation("quarantine.reports")
    async def reports(self, message_id: str) -> dict[str, str]:
        raw = await self._r.hgetall(quarantine_keys.reports(self._prefix, message_id))
        return {_s(k): _s(v) for k, v in raw.items()}
