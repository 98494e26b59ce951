"""Escalations and the console's recent tasks in Redis (:class:`RedisEscalationStore`); the
interface and the memory store are :mod:`middleware.people.store`.

Layout (``P`` = prefix; two hash tags, each one Redis Cluster slot: see :mod:`.keys`)::

    P{esc}:id:<id>                 string  the escalation as JSON
    P{esc}:open                    zset    open escalation ids by creation time
    P{esc}:task:<task id>          string  the task's open escalation id
    P{esc}:claim:<id>              string  a person's claim (SET NX)
    P{console-tasks}:task:<id>     string  a task summary for the console
    P{console-tasks}:list          zset    the newest task ids

An escalation is written in one transaction with the open list and its task's pointer, and the
open list is read with one MGET, so all escalations share ``{esc}``; likewise the console's
summaries and their list share ``{console-tasks}``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..people.model import Escalation
from ..people.store import MAX_TASKS as _MAX_TASKS
from ..people.store import TTL_S as _TTL_S
from .keys import console_tasks, escalations

__all__ = ["RedisEscalationStore"]


class RedisEscalationStore:
    """Shared by every gateway replica (``redis.asyncio`` client; the store closes it)."""

    def __init__(self, client: Any, *, prefix: str = "agency:") -> None:
        self._r = client
        self._p = prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "agency:") -> RedisEscalationStore:
        import redis.asyncio as aioredis

        return cls(aioredis.Redis.from_url(url), prefix=prefix)

    async def put(self, esc: Escalation) -> None:
        p = self._p
        pipe = self._r.pipeline(transaction=True)
        pipe.set(escalations.one(p, esc.id), esc.model_dump_json(), ex=_TTL_S)
        if esc.status == "open":
            pipe.zadd(escalations.open(p), {esc.id: esc.created_at.timestamp()})
            pipe.set(escalations.of_task(p, esc.task_id), esc.id, ex=_TTL_S)
        else:
            pipe.zrem(escalations.open(p), esc.id)
            pipe.delete(escalations.of_task(p, esc.task_id))
        await pipe.execute()

    async def get(self, esc_id: str) -> Escalation | None:
        raw = await self._r.get(escalations.one(self._p, esc_id))
        return Escalation.model_validate_json(raw) if raw else None

    async def open_for_task(self, task_id: str) -> Escalation | None:
        esc_id = await self._r.get(escalations.of_task(self._p, task_id))
        if not esc_id:
            return None
        esc = await self.get(_text(esc_id))
        return esc if esc is not None and esc.status == "open" else None

    async def list_open(self) -> list[Escalation]:
        ids = await self._r.zrange(escalations.open(self._p), 0, -1)
        if not ids:
            return []
        raws = await self._r.mget([escalations.one(self._p, _text(i)) for i in ids])
        found = [Escalation.model_validate_json(r) for r in raws if r]
        return [e for e in found if e.status == "open"]

    async def claim(self, esc_id: str) -> bool:
        return bool(await self._r.set(escalations.claim(self._p, esc_id), "1", nx=True, ex=_TTL_S))

    async def release(self, esc_id: str) -> None:
        await self._r.delete(escalations.claim(self._p, esc_id))

    async def note_task(self, summary: dict[str, Any]) -> None:
        p = self._p
        pipe = self._r.pipeline(transaction=True)
        pipe.set(console_tasks.summary(p, summary["task_id"]), orjson.dumps(summary), ex=_TTL_S)
        pipe.zadd(console_tasks.listed(p), {summary["task_id"]: time.time()})
        pipe.zremrangebyrank(console_tasks.listed(p), 0, -_MAX_TASKS - 1)
        await pipe.execute()

    async def recent_tasks(self, limit: int = 200) -> list[dict[str, Any]]:
        ids = await self._r.zrevrange(console_tasks.listed(self._p), 0, limit - 1)
        if not ids:
            return []
        keys = [console_tasks.summary(self._p, _text(i)) for i in ids]
        return [orjson.loads(r) for r in await self._r.mget(keys) if r]

    async def close(self) -> None:
        await self._r.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
