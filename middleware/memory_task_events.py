"""The default task event log: in this process only (events do not survive a restart).

The events of up to ``max_tasks`` tasks are kept, each as its JSON bytes (read back when a
follower asks: a gateway nobody follows pays little, and its garbage collector has no event
objects to scan); when another task's first event comes, the task whose events were appended
longest ago is dropped (a running task keeps appending, so it stays). A follower waits on the
task's signal, set by every append: no polling, no per-follower queue.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from .task_events import MAX_READ, TaskEvent

__all__ = ["MemoryTaskEventLog"]


class MemoryTaskEventLog:
    """A :class:`~middleware.task_events.TaskEventLog` in a dict.

    Args:
        max_tasks: Tasks whose events are kept (the least recently appended to go first):
            about 9 KB of memory a task for a task of a dozen steps (``agency serve`` takes
            it from ``AgencyConfig.kept_task_events``).
    """

    def __init__(self, *, max_tasks: int = 1_000) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        self._events: OrderedDict[str, list[bytes]] = OrderedDict()  # task id -> events (seq = index + 1)
        self._signals: dict[str, asyncio.Event] = {}  # task id -> set by the next append
        self._max_tasks = max_tasks

    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        if not events:
            return len(self._events.get(task_id, ()))
        kept = self._events.get(task_id)
        if kept is None:
            kept = self._events[task_id] = []
            while len(self._events) > self._max_tasks:
                old, _ = self._events.popitem(last=False)
                self._signals.pop(old, None)
        else:
            self._events.move_to_end(task_id)
        seq = len(kept)
        for event in events:
            seq += 1
            # the events handed to a log are the log's (the pipeline builds them for it): the
            # seq is set in place, without a copy or a validation per event
            event.__dict__["seq"] = seq
            # a copy of exactly its length: orjson's bytes keep the capacity of its output
            # buffer (~8 KB whatever the event), which made 1,000 tasks' events ~100 MB of RSS
            kept.append(memoryview(event.to_json()).tobytes())
        signal = self._signals.pop(task_id, None)
        if signal is not None:
            signal.set()
        return seq

    async def read(
        self, task_id: str, *, after: int = 0, limit: int = 100, wait_s: float = 0.0
    ) -> list[TaskEvent]:
        found = self._after(task_id, after, limit)
        if found or wait_s <= 0:
            return found
        signal = self._signals.setdefault(task_id, asyncio.Event())
        try:
            async with asyncio.timeout(wait_s):
                await signal.wait()
        except TimeoutError:
            return []
        return self._after(task_id, after, limit)

    def _after(self, task_id: str, after: int, limit: int) -> list[TaskEvent]:
        kept = self._events.get(task_id)
        if not kept:
            return []
        # seqs are 1, 2, 3 … in a list: the event after ``after`` is at index ``after``
        start = max(after, 0)
        return [TaskEvent.from_json(data) for data in kept[start : start + max(1, min(limit, MAX_READ))]]

    async def last(self, task_id: str) -> TaskEvent | None:
        kept = self._events.get(task_id)
        return TaskEvent.from_json(kept[-1]) if kept else None

    async def close(self) -> None:
        return None
