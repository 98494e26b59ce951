"""Task state changes as they happen, for status streaming (A2A ``SendStreamingMessage``).

The pipeline records every state transition in the audit log; :class:`TaskWatch` wraps the
log (as the tracing and metrics wrappers do) and tells whoever watches a task each
transition of it, in order. Observing is synchronous and happens before the record is
handed on, so the log's ordering guarantee (records take their place in call order) holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..audit import AuditLog, AuditRecord
from ..audit.record import AuditEventType
from ..pipeline import Agency

__all__ = ["TaskWatch"]


class TaskWatch:
    """An :class:`AuditLog` wrapper that streams each watched task's state transitions."""

    def __init__(self, inner: AuditLog) -> None:
        self.inner = inner
        self._watchers: dict[str, list[asyncio.Queue[dict[str, Any]]]] = {}

    @classmethod
    def install(cls, agency: Agency) -> TaskWatch:
        """The watch on ``agency``'s audit log (wrapping it the first time)."""
        if isinstance(agency.audit, TaskWatch):
            return agency.audit
        watch = cls(agency.audit)
        agency.audit = watch
        return watch

    @contextmanager
    def watching(self, task_id: str) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """A queue of ``{"from", "to", "node"}`` for each transition of ``task_id`` while inside."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._watchers.setdefault(task_id, []).append(queue)
        try:
            yield queue
        finally:
            queues = self._watchers.get(task_id, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._watchers.pop(task_id, None)

    @property
    def location(self) -> str:
        return self.inner.location

    async def append(self, record: AuditRecord) -> int:
        if record.event_type == AuditEventType.STATE_TRANSITION and record.task_id in self._watchers:
            for queue in self._watchers[record.task_id]:
                queue.put_nowait({**record.detail, "node": record.node})
        return await self.inner.append(record)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return self.inner.records()

    def __getattr__(self, name: str) -> Any:  # e.g. the WAL's checkpoints, for the audit service
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()
