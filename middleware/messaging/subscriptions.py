"""Who subscribes to which topic: in this process, or in Redis (shared by replicas, durable).

A subscription made through one gateway must be known to every other gateway of the
deployment (else a message published through replica 2 finds no subscriber: topic drift,
the message lost) and must survive a restart. :class:`RedisSubscriptions` keeps them under
the storage key prefix::

    {prefix}subs:{topic}    set of subscribed agents
    {prefix}subs            set of topics that have (or had) subscribers

:class:`MemorySubscriptions` is the embedded default (one process).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from redis.asyncio import Redis

from ..redis.errors import RedisErrorHook, redis_operation

__all__ = ["MemorySubscriptions", "RedisSubscriptions", "SubscriptionStore"]


@runtime_checkable
class SubscriptionStore(Protocol):
    """Topic subscriptions."""

    async def add(self, topic: str, agent: str) -> None:
        """Subscribe ``agent`` to ``topic`` (idempotent)."""
        ...

    async def remove(self, topic: str, agent: str) -> None:
        """Unsubscribe ``agent`` from ``topic`` (idempotent)."""
        ...

    async def members(self, topic: str) -> set[str]:
        """The agents subscribed to ``topic``."""
        ...

    async def all(self) -> dict[str, set[str]]:
        """Every topic with at least one subscriber, and its subscribers."""
        ...


class MemorySubscriptions:
    """Subscriptions in this process only (lost on restart, unknown to other replicas)."""

    def __init__(self) -> None:
        self._topics: dict[str, set[str]] = {}

    async def add(self, topic: str, agent: str) -> None:
        self._topics.setdefault(topic, set()).add(agent)

    async def remove(self, topic: str, agent: str) -> None:
        members = self._topics.get(topic)
        if members is not None:
            members.discard(agent)
            if not members:
                del self._topics[topic]

    async def members(self, topic: str) -> set[str]:
        return set(self._topics.get(topic, ()))

    async def all(self) -> dict[str, set[str]]:
        return {t: set(m) for t, m in self._topics.items() if m}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisSubscriptions:
    """Subscriptions in Redis under ``prefix``: shared by every replica, kept across restarts.

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
        return f"{self._prefix}subs:{topic}"

    @redis_operation("subscriptions.add")
    async def add(self, topic: str, agent: str) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.sadd(self._key(topic), agent)
        pipe.sadd(f"{self._prefix}subs", topic)
        await pipe.execute()

    @redis_operation("subscriptions.remove")
    async def remove(self, topic: str, agent: str) -> None:
        await self._r.srem(self._key(topic), agent)

    @redis_operation("subscriptions.members")
    async def members(self, topic: str) -> set[str]:
        return {_s(m) for m in await self._r.smembers(self._key(topic))}

    @redis_operation("subscriptions.all")
    async def all(self) -> dict[str, set[str]]:
        topics = sorted(_s(t) for t in await self._r.smembers(f"{self._prefix}subs"))
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
