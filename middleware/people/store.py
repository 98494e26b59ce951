"""Where escalations (and the console's list of recent tasks) live: memory or Redis.

An escalation is claimed once: :meth:`EscalationStore.claim` is atomic (a Python dict under
one event loop; ``SET NX`` on Redis), so two people answering at once, on one gateway or on
two replicas, cannot both resume the task. The Redis layout (hash tags ``{esc}`` and
``{console-tasks}``) is in :mod:`middleware.redis.escalation_store`.
"""

from __future__ import annotations

from typing import Any, Protocol

from .._lazy import lazy_exports
from .model import Escalation

__all__ = ["EscalationStore", "MemoryEscalationStore"]

TTL_S = 7 * 24 * 3600
MAX_TASKS = 1000


class EscalationStore(Protocol):
    """Escalations by id, the open one of each task, one-time claims; recent task summaries."""

    async def put(self, esc: Escalation) -> None: ...
    async def get(self, esc_id: str) -> Escalation | None: ...
    async def open_for_task(self, task_id: str) -> Escalation | None: ...
    async def list_open(self) -> list[Escalation]: ...
    async def claim(self, esc_id: str) -> bool: ...
    async def release(self, esc_id: str) -> None: ...
    async def note_task(self, summary: dict[str, Any]) -> None: ...
    async def recent_tasks(self, limit: int = 200) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


class MemoryEscalationStore:
    """In this process (one gateway)."""

    def __init__(self) -> None:
        self._esc: dict[str, Escalation] = {}
        self._claims: set[str] = set()
        self._tasks: dict[str, dict[str, Any]] = {}

    async def put(self, esc: Escalation) -> None:
        self._esc[esc.id] = esc.model_copy(deep=True)

    async def get(self, esc_id: str) -> Escalation | None:
        esc = self._esc.get(esc_id)
        return esc.model_copy(deep=True) if esc is not None else None

    async def open_for_task(self, task_id: str) -> Escalation | None:
        for esc in self._esc.values():
            if esc.task_id == task_id and esc.status == "open":
                return esc.model_copy(deep=True)
        return None

    async def list_open(self) -> list[Escalation]:
        found = [e.model_copy(deep=True) for e in self._esc.values() if e.status == "open"]
        return sorted(found, key=lambda e: e.created_at)

    async def claim(self, esc_id: str) -> bool:
        if esc_id in self._claims:
            return False
        self._claims.add(esc_id)
        return True

    async def release(self, esc_id: str) -> None:
        self._claims.discard(esc_id)

    async def note_task(self, summary: dict[str, Any]) -> None:
        self._tasks.pop(summary["task_id"], None)
        self._tasks[summary["task_id"]] = dict(summary)
        while len(self._tasks) > MAX_TASKS:
            self._tasks.pop(next(iter(self._tasks)))

    async def recent_tasks(self, limit: int = 200) -> list[dict[str, Any]]:
        return [dict(t) for t in reversed(list(self._tasks.values()))][:limit]

    async def close(self) -> None:
        return None


# The Redis implementation lives in the Redis layer; its name stays importable here
# (imported on first use, so importing this module does not import redis).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {"RedisEscalationStore": "middleware.redis.escalation_store"},
    [*__all__, "RedisEscalationStore"],
)
