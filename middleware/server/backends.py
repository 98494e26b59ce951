"""Choosing the catalog and routing-statistics backends from configuration.

An empty URL keeps everything in process (the embedded default); a ``redis://`` URL puts
the catalog and the routing statistics in Redis, so gateway replicas share both.
"""

from __future__ import annotations

from ..catalog import Catalog
from ..errors import InvalidInput
from ..memory_catalog import MemoryCatalog
from ..redis.errors import RedisErrorHook
from ..routing_stats import MemoryRoutingStats, RoutingStats

__all__ = ["open_backends"]


def open_backends(
    url: str = "",
    *,
    prefix: str = "agency:",
    lease_seconds: float | None = None,
    on_redis_error: RedisErrorHook | None = None,
) -> tuple[Catalog, RoutingStats]:
    """The catalog and routing stats for ``url``.

    Args:
        url: ``""`` (in memory) or ``redis://host:port/db`` (``rediss://`` for TLS).
        prefix: Key namespace in Redis; replicas sharing a catalog use the same one.
        lease_seconds: Heartbeat lease (Redis default 30 s; in memory default none).
        on_redis_error: Told the operation of every Redis error (see :mod:`.redis.errors`).

    Raises:
        InvalidInput: an unsupported URL scheme.
    """
    if not url:
        return MemoryCatalog(lease_seconds=lease_seconds), MemoryRoutingStats()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from redis.asyncio import Redis

        from ..redis.catalog import RedisCatalog
        from ..redis.routing_stats import RedisRoutingStats

        client = Redis.from_url(url)
        catalog = RedisCatalog(
            client,
            prefix=prefix + "catalog:",
            lease_seconds=lease_seconds or 30.0,
            on_redis_error=on_redis_error,
        )
        return catalog, RedisRoutingStats(client, prefix=prefix + "stats:", on_redis_error=on_redis_error)
    raise InvalidInput.single("catalog_url", f"{url!r}: use redis://host:port/db, or nothing for in memory")
