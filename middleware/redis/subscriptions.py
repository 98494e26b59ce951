"""Topic subscriptions in Redis (:class:`RedisSubscriptions`); the interface and the memory store
are :mod:`middleware.messaging.subscriptions` (its docstring gives the key layout)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from .errors import RedisErrorHook, redis_operation
from .keys import subscriptions as subscription_keys

__all__ = ["RedisSubscriptions"]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisSubscriptions:
    """Subscriptions in Redis under ``prefix``: shared by every replica, kept across restarts.

    Every key carries the hash tag ``{subs}`` (one Redis Cluster slot): subscribing adds the
    member and the topic to the topic list in one transaction.

    Args:
        client: A ``redis.asyncio.Redis``.
        prefix: The storage key prefix (``storage.key_prefix``).
        on_redis_error: Called with ``"subscriptions.<op>"`` when a Redis error escapes.
    """

    def __init__(
        self, client: Redis, *, prefix: str = "agency:", on_redis_error: RedisErrorHook | None = None
    ):
        self._r = client
        self._prefix = prefix
        self.on_redis_error = on_redis_error

    def _key(self, topic: str) -> str:
        return subscription_keys.topic(self._prefix, topic)

    @redis_operation("subscriptions.add")
    async def add(self, topic: str, agent: str) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.sadd(self._key(topic), agent)
        pipe.sadd(subscription_keys.topics(self._prefix), topic)
        await pipe.execute()

    @redis_operation("subscriptions.remove")
    async def remove(self, topic: str, agent: str) -> None:
        await self._r.srem(self._key(topic), agent)

    @redis_operation("subscriptions.members")
    async def members(self, topic: str) -> set[str]:
        return {_s(m) for m in await self._r.smembers(self._key(topic))}

    @redis_operation("subscriptions.all")
    async def all(self) -> dict[str, set[str]]:
        topics = sorted(_s(t) for t in await self._r.smembers(subscription_keys.topics(self._prefix)))
        if not topics:
            return {}
        pipe = self._r.pipeline(transaction=False)
        for topic in topics:
            pipe.smembers(self._key(topic))
        out = {}
        for topic, members in zip(topics, await pipe.execute(), strict=True):
            if members:
                out[topic] = {_s(m) for m in members}
        return out
