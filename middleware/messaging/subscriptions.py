"""Who subscribes to which topic: in this process, or in Redis (shared by replicas, durable).

A subscription made through one gateway must be known to every other gateway of the
deployment (else a message published through replica 2 finds no subscriber: topic drift,
the message lost) and must survive a restart. :class:`RedisSubscriptions` keeps them under
the storage key prefix::

    {prefix}{subs}:topic:<topic>   set of subscribed agents
    {prefix}{subs}:topics          set of topics that have (or had) subscribers

(one hash tag, so one Redis Cluster slot: :mod:`middleware.redis.keys`)

:class:`MemorySubscriptions` is the embedded default (one process).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._lazy import lazy_exports

__all__ = ["MemorySubscriptions", "SubscriptionStore"]


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


# The Redis implementation lives in the Redis layer; its name stays importable here
# (imported on first use, so importing this module does not import redis).
__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisSubscriptions": "middleware.redis.subscriptions"}, [*__all__, "RedisSubscriptions"]
)
