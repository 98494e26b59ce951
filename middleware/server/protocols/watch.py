"""Task state changes as they happen, for status streaming (A2A ``SendStreamingMessage``).

The pipeline records every state transition in the audit log; :class:`TaskWatch` wraps the
log (as the tracing and metrics wrappers do) and tells whoever watches a task each
transition of it, in order. Observing is synchronous and happens before the record is
handed on, so the log's ordering guarantee (records take their place in call order) holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...audit import AuditLog, AuditRecord
from ...audit.record import AuditEventType, PlainRecord
from ...pipeline import Agency

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

    def _tell(self, event_type: str, task_id: str, detail: dict[str, Any], node: str) -> None:
        if event_type == AuditEventType.STATE_TRANSITION and task_id in self._watchers:
            for queue in self._watchers[task_id]:
                queue.put_nowait({**detail, "node": node})

    async def append(self, record: AuditRecord) -> int:
        self._tell(record.event_type, record.task_id, record.detail, record.node)
        return await self.inner.append(record)

    def on_task_record(self, record: PlainRecord) -> None:
        """A task's record as the pipeline's journal records it (before its barrier): the
        transition is told now, as it happens, not when the batch reaches the log."""
        self._tell(record["event_type"], record["task_id"], record["detail"], record["node"])
        inner = getattr(self.inner, "on_task_record", None)
        if inner is not None:
            inner(record)

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        """Hand a journal's batch on (its transitions were told by :meth:`on_task_record`)."""
        return await self.inner.append_batch(records)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return self.inner.records()

    def __getattr__(self, name: str) -> Any:  # e.g. the WAL's checkpoints, for the audit service
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()
