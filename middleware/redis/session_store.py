"""Conversation states in Redis, shared by every gateway replica.

Layout (``prefix`` defaults to ``agency:``): ``{prefix}{session:ID}`` holds the state
as JSON with a TTL (``storage.retention.session_seconds``, by default
``agency.session_ttl_seconds``: 24 h; restarted on every save); ``{prefix}{session:ID}:lock``
holds the lock token (``SET NX PX``, released by a compare-and-delete script, so a replica only
releases its own lock). Both carry the session's hash tag (one Redis Cluster slot).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import RedisError

from ..errors import ConcurrentUpdate
from ..sessions import DEFAULT_SESSION_TTL_S, ConversationState
from . import keys
from .errors import RedisErrorHook, backend_unavailable, count_redis_error, redis_operation

__all__ = ["RedisSessionStore"]

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisSessionStore:
    """A :class:`~middleware.sessions.SessionStore` on Redis.

    Args:
        client: A ``redis.asyncio.Redis`` client.
        prefix: Namespace for every key.
        ttl_s: How long a session's state lives after its last change (default 24 h).
        lock_ttl_s: A lock's lifetime, so a crashed replica cannot hold a session forever.
        owns_client: Close the client in :meth:`close`.
        on_redis_error: Told the operation of every Redis error (see :mod:`.errors`); the error
            reaches the caller as :class:`~middleware.errors.BackendUnavailable`.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "agency:",
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        lock_ttl_s: float = 30.0,
        poll_s: float = 0.01,
        owns_client: bool = False,
        on_redis_error: RedisErrorHook | None = None,
    ) -> None:
        self._redis = client
        self.on_redis_error = on_redis_error
        self._prefix = prefix
        self._ttl_ms = int(ttl_s * 1000)
        self._lock_ttl_ms = int(lock_ttl_s * 1000)
        self._poll_s = poll_s
        self._owns_client = owns_client
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisSessionStore:
        """A store on its own connection to ``url`` (closed by :meth:`close`)."""
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    def key(self, session_id: str) -> str:
        """The Redis key of a session's state."""
        return keys.session(self._prefix, session_id)

    @redis_operation("sessions.get")
    async def get(self, session_id: str) -> ConversationState | None:
        data = await self._redis.get(self.key(session_id))
        return None if data is None else ConversationState.model_validate_json(data)

    @redis_operation("sessions.save")
    async def save(self, state: ConversationState) -> None:
        await self._redis.set(self.key(state.session_id), state.model_dump_json(), px=self._ttl_ms)

    @asynccontextmanager
    async def lock(self, session_id: str, *, wait_s: float = 5.0) -> AsyncIterator[None]:
        key = keys.session_lock(self._prefix, session_id)
        token = uuid.uuid4().hex
        deadline = time.monotonic() + wait_s
        try:
            while not await self._redis.set(key, token, nx=True, px=self._lock_ttl_ms):
                if time.monotonic() >= deadline:
                    raise ConcurrentUpdate(f"session {session_id} is locked by another task")
                await asyncio.sleep(self._poll_s)  # cross-process wait: no event to wait on
        except RedisError as exc:
            count_redis_error(self.on_redis_error, "sessions.lock", exc)
            raise backend_unavailable("sessions.lock", exc) from exc
        try:
            yield
        finally:
            try:
                await self._release(keys=[key], args=[token])
            except RedisError as exc:
                count_redis_error(self.on_redis_error, "sessions.unlock", exc)
                raise backend_unavailable("sessions.unlock", exc) from exc

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()
