"""Task events in Redis: one stream per task, so that any replica serves a task's followers.

Layout: ``{prefix}{task:ID}:events`` is a Redis Stream. Its entry ids are ``0-<seq>``: Redis
gives them itself (``XADD key 0-* …``), so a task's events are numbered 1, 2, 3 … without a
counter of ours, whichever replica appends. Each entry is one event as JSON (field ``e``). A
batch goes in with one Lua script (atomic, in order) that renews the key's TTL: the stream lives
``ttl_s`` after the task's last event (by default as long as a task record).

A follower reads with ``XRANGE`` after the last seq it saw; when nothing is there it waits with
``XREAD BLOCK`` (in slices shorter than the client's socket timeout, so a long wait never ends
in a read timeout). Nothing is trimmed: a task's audited events are bounded by the task itself,
its progress by the limit per agent call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from ..task_events import MAX_READ, TaskEvent
from . import keys
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisTaskEventLog"]

#: Longest single XREAD BLOCK (shorter when the client's socket timeout is).
BLOCK_SLICE_SECONDS = 2.0

# KEYS[1] the task's stream; ARGV[1] ttl ms, ARGV[2..] the events' JSON. Returns the last id.
_APPEND = """
local last = ''
for i = 2, #ARGV do
  last = redis.call('XADD', KEYS[1], '0-*', 'e', ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return last
"""


class RedisTaskEventLog:
    """A :class:`~middleware.task_events.TaskEventLog` on Redis Streams.

    Args:
        client: A ``redis.asyncio.Redis`` client (the caller owns it unless ``owns_client``).
        prefix: Namespace of every key (the deployment's ``storage.key_prefix``).
        ttl_s: How long a task's events live after its last one.
        on_redis_error: Told the operation (``"task_events.append"`` …) of every Redis error.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "agency:",
        ttl_s: float = 7 * 24 * 3600,
        owns_client: bool = False,
        on_redis_error: RedisErrorHook | None = None,
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._owns_client = owns_client
        self.on_redis_error = on_redis_error
        self._append = client.register_script(_APPEND)
        pool_kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        socket_timeout = pool_kwargs.get("socket_timeout") or pool_kwargs.get("orig_socket_timeout")
        # a quarter of the socket timeout: Redis ends a block up to 1/hz (100 ms) late
        self._slice = (
            min(BLOCK_SLICE_SECONDS, float(socket_timeout) / 4) if socket_timeout else BLOCK_SLICE_SECONDS
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTaskEventLog:
        """A log on its own connection to ``url`` (closed by :meth:`close`)."""
        from .connection import redis_client

        return cls(redis_client(url), owns_client=True, **kwargs)

    def key(self, task_id: str) -> str:
        """The stream of ``task_id``'s events."""
        return keys.task_events(self._prefix, task_id)

    @redis_operation("task_events.append")
    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        if not events:
            last = await self.last(task_id)
            return last.seq if last is not None else 0
        data = [event.to_json() for event in events]
        last = await self._append(keys=[self.key(task_id)], args=[self._ttl_ms, *data])
        return _seq(last)

    @redis_operation("task_events.read")
    async def read(
        self, task_id: str, *, after: int = 0, limit: int = 100, wait_s: float = 0.0
    ) -> list[TaskEvent]:
        key = self.key(task_id)
        count = max(1, min(limit, MAX_READ))
        entries = await self._redis.xrange(key, min=f"(0-{max(after, 0)}", max="+", count=count)
        remaining = wait_s
        late = False
        while not entries and remaining > 0:
            wait = min(remaining, self._slice)
            remaining -= wait
            try:
                reply = await self._redis.xread(
                    {key: f"0-{max(after, 0)}"}, count=count, block=max(1, int(wait * 1000))
                )
            except RedisTimeoutError:  # once per wait a late reply (a busy loop), not an outage
                if late:
                    raise
                late = True
                continue
            entries = [entry for _, stream in reply or [] for entry in stream]
        return [_event(entry_id, fields) for entry_id, fields in entries]

    @redis_operation("task_events.last")
    async def last(self, task_id: str) -> TaskEvent | None:
        newest = await self._redis.xrevrange(self.key(task_id), count=1)
        return _event(*newest[0]) if newest else None

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()


def _seq(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id or "")
    return int(text.partition("-")[2] or 0)


def _event(entry_id: Any, fields: dict[Any, Any]) -> TaskEvent:
    event = TaskEvent.from_json(fields[b"e"] if b"e" in fields else fields["e"])
    event.__dict__["seq"] = _seq(entry_id)  # the stream's own number (validated: an int)
    return event
