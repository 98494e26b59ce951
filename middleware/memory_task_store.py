"""The default task store: in this process only (tasks do not survive a restart).

Finished tasks (completed, failed, rejected, canceled) are kept for ``GetTask`` up to
``max_finished`` of them, oldest evicted first, so a long-running gateway does not grow
without bound; tasks still running or waiting for input are never evicted.

Records are kept as JSON, copies in and out like a real store. A new task's record is the
exception until it is first read: nothing in this process outlives it, so the copy taken
when it is created is serialised only if someone reads it before the task stops — most
tasks run to their end without a reader, and their one snapshot is the one saved then.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._model import trusted
from .errors import AlreadyExists, ConcurrentUpdate, NotFound
from .task_listing import TaskPage, TaskQuery, TaskSummary, micros, page_token, parse_page_token, summary_of
from .tasks import TaskRecord

__all__ = ["MemoryTaskStore"]


class MemoryTaskStore:
    """Task records as JSON in a dict (copies in and out, like a real store), with asyncio locks."""

    def __init__(self, *, max_finished: int = 1_000) -> None:
        # task id -> (version, its JSON, or a new task's copy not serialised yet)
        self._data: dict[str, tuple[int, bytes | TaskRecord]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._finished: deque[str] = deque()
        self._max_finished = max_finished
        self._summaries: dict[str, TaskSummary] = {}  # task id -> its row in a task list

    async def create(self, record: TaskRecord) -> None:
        if record.task_id in self._data:
            raise AlreadyExists(f"task {record.task_id!r} already exists")
        record.version = 1
        fresh = _fresh_copy(record)
        self._data[record.task_id] = (1, fresh if fresh is not None else _json(record))
        self._summaries[record.task_id] = summary_of(record)

    async def get(self, task_id: str) -> TaskRecord:
        try:
            version, data = self._data[task_id]
        except KeyError:
            raise NotFound(f"no task {task_id!r}") from None
        if isinstance(data, TaskRecord):  # a new task read before it stopped: serialised now
            data = _json(data)
            self._data[task_id] = (version, data)
        return TaskRecord.model_validate_json(data)

    async def save(self, record: TaskRecord) -> None:
        stored = self._data.get(record.task_id)
        if stored is None:
            raise NotFound(f"no task {record.task_id!r}")
        if stored[0] != record.version:
            raise ConcurrentUpdate(
                f"task {record.task_id} changed concurrently "
                f"(stored v{stored[0]}, writing over v{record.version})"
            )
        record.version += 1
        self._data[record.task_id] = (record.version, _json(record))
        self._summaries[record.task_id] = summary_of(record)
        if record.state.terminal:
            self._finished.append(record.task_id)
            while len(self._finished) > self._max_finished:
                old = self._finished.popleft()
                self._data.pop(old, None)
                self._summaries.pop(old, None)
                lock = self._locks.get(old)
                if lock is not None and not lock.locked():
                    del self._locks[old]

    @asynccontextmanager
    async def lock(self, task_id: str, *, wait_s: float = 2.0) -> AsyncIterator[None]:
        lock = self._locks.setdefault(task_id, asyncio.Lock())
        try:
            await asyncio.wait_for(lock.acquire(), timeout=wait_s)
        except TimeoutError:
            raise ConcurrentUpdate(f"task {task_id} is locked by another request") from None
        try:
            yield
        finally:
            lock.release()

    async def list(self, query: TaskQuery) -> TaskPage:
        cursor = parse_page_token(query.page_token)
        rows = sorted(
            ((micros(s.created_at), s.task_id, s) for s in self._summaries.values() if query.matches(s)),
            key=lambda row: (row[0], row[1]),
            reverse=True,
        )
        if cursor is not None:
            rows = [row for row in rows if (row[0], row[1]) < cursor]
        page = rows[: query.page_size]
        more = len(rows) > len(page)
        token = page_token(page[-1][0], page[-1][1]) if more and page else ""
        return TaskPage(tasks=[row[2] for row in page], next_page_token=token)

    async def close(self) -> None:
        return None


#: A record's JSON as UTF-8 bytes (what ``model_dump_json`` decodes to text).
_json = TaskRecord.__pydantic_serializer__.to_json

#: What a task record holds besides its containers: its validated request and goal (never
#: changed once the task exists), strings, numbers, states and times.
_CONTAINERS = tuple(
    name for name, field in TaskRecord.model_fields.items() if field.default_factory in (list, dict)
)


def _fresh_copy(record: TaskRecord) -> TaskRecord | None:
    """A copy of a new task's record as it is now, or None when it is not new (something in
    it is already a container's item the task may change later: serialise it instead).

    Its containers are its own (the session context, the only one a new task may have filled,
    holds JSON values the task replaces, never changes in place); the rest is shared.
    """
    values = dict(record.__dict__)
    for name in _CONTAINERS:
        value = values[name]
        if value:
            if name != "context":
                return None
            values[name] = dict(value)
        else:
            values[name] = type(value)()
    return trusted(TaskRecord, values)
