"""The Redis scale-out layer: every backend that talks to Redis, beside the in-memory core.

Each module implements a core Protocol for replicas that share state through Redis:
:mod:`.catalog` (``RedisCatalog``), :mod:`.task_store` (``RedisTaskStore``),
:mod:`.session_store` (``RedisSessionStore``), :mod:`.routing_stats` (``RedisRoutingStats``),
:mod:`.mailbox` (``RedisMailbox``, Redis Streams), :mod:`.errors` (one mapping of Redis errors to
``BackendUnavailable`` and the ``on_redis_error`` hook), :mod:`.health` (the backend monitor
behind gRPC health) and :mod:`.connection` (a storage URL -> redis-py's client for one server,
Sentinel or Cluster, used by every ``from_url``). Nothing here is imported by
``import middleware``; the server chooses backends in :mod:`middleware.server.backends` and
:mod:`middleware.server.bootstrap`.

The messaging stores whose memory and Redis versions still share one module (directory,
rate limits, moderation board, subscriptions; ``people.store``) are not moved yet.
"""
