"""Escalations and the console's recent tasks in Redis (:class:`RedisEscalationStore`); the
interface, the memory store and the key layout are :mod:`middleware.people.store`."""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..people.model import Escalation
from ..people.store import MAX_TASKS as _MAX_TASKS
from ..people.store import TTL_S as _TTL_S
from .errors import RedisErrorHook, redis_operation

__all__ = ["RedisEscalationStore"]


class RedisEscalationStore:
    """Shared by every gateway replica (``redis.asyncio`` client; the store closes it)."""

    #: Told the operation of every Redis error (the error reaches the caller as BackendUnavailable).
    on_redis_error: RedisErrorHook | None = None

    def __init__(self, client: Any, *, prefix: str = "agency:") -> None:
        self._r = client
        self._p = prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "agency:") -> RedisEscalationStore:
        from .connection import redis_client

        return cls(redis_client(url), prefix=prefix)

    @redis_operation("escalations.put")
    async def put(self, esc: Escalation) -> None:
        p = self._p
        pipe = self._r.pipeline(transaction=True)
        pipe.set(f"{p}esc:{esc.id}", esc.model_dump_json(), ex=_TTL_S)
        if esc.status == "open":
            pipe.zadd(f"{p}esc-open", {esc.id: esc.created_at.timestamp()})
            pipe.set(f"{p}esc-task:{esc.task_id}", esc.id, ex=_TTL_S)
        else:
            pipe.zrem(f"{p}esc-open", esc.id)
            pipe.delete(f"{p}esc-task:{esc.task_id}")
        await pipe.execute()

    @redis_operation("escalations.get")
    async def get(self, esc_id: str) -> Escalation | None:
        raw = await self._r.get(f"{self._p}esc:{esc_id}")
        return Escalation.model_validate_json(raw) if raw else None

    @redis_operation("escalations.open_for_task")
    async def open_for_task(self, task_id: str) -> Escalation | None:
        esc_id = await self._r.get(f"{self._p}esc-task:{task_id}")
        if not esc_id:
            return None
        esc = await self.get(esc_id.decode() if isinstance(esc_id, bytes) else esc_id)
        return esc if esc is not None and esc.status == "open" else None

    @redis_operation("escalations.list_open")
    async def list_open(self) -> list[Escalation]:
        ids = await self._r.zrange(f"{self._p}esc-open", 0, -1)
        if not ids:
            return []
        raws = await self._r.mget([f"{self._p}esc:{i.decode() if isinstance(i, bytes) else i}" for i in ids])
        found = [Escalation.model_validate_json(r) for r in raws if r]
        return [e for e in found if e.status == "open"]

    @redis_operation("escalations.claim")
    async def claim(self, esc_id: str) -> bool:
        return bool(await self._r.set(f"{self._p}esc-claim:{esc_id}", "1", nx=True, ex=_TTL_S))

    @redis_operation("escalations.release")
    async def release(self, esc_id: str) -> None:
        await self._r.delete(f"{self._p}esc-claim:{esc_id}")

    @redis_operation("escalations.note_task")
    async def note_task(self, summary: dict[str, Any]) -> None:
        p = self._p
        pipe = self._r.pipeline(transaction=True)
        pipe.set(f"{p}console-task:{summary['task_id']}", orjson.dumps(summary), ex=_TTL_S)
        pipe.zadd(f"{p}console-tasks", {summary["task_id"]: time.time()})
        pipe.zremrangebyrank(f"{p}console-tasks", 0, -_MAX_TASKS - 1)
        await pipe.execute()

    @redis_operation("escalations.recent_tasks")
    async def recent_tasks(self, limit: int = 200) -> list[dict[str, Any]]:
        ids = await self._r.zrevrange(f"{self._p}console-tasks", 0, limit - 1)
        if not ids:
            return []
        keys = [f"{self._p}console-task:{i.decode() if isinstance(i, bytes) else i}" for i in ids]
        return [orjson.loads(r) for r in await self._r.mget(keys) if r]

    async def close(self) -> None:
        await self._r.aclose()
