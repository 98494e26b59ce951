"""Where task state lives between steps and across gateway replicas.

A task waiting on a clarification or a human can be resumed by any replica, so
its :class:`~middleware.tasks.TaskRecord` is persisted (in memory by default, in
Redis when configured). Two guards keep concurrent writers apart:

* a per-task **lock** (:meth:`TaskStore.lock`) held while a resume checks the task
  and claims it, so two resumes cannot both see it waiting;
* a **version compare-and-set** on every :meth:`TaskStore.save`, so even a writer
  that skipped the lock cannot overwrite a newer state.

:meth:`TaskStore.list` answers ListTasks (see :mod:`middleware.task_listing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from .task_events import TaskEvent, TaskEventLog
from .task_leases import Holder, TaskLeases
from .task_listing import TaskPage, TaskQuery
from .tasks import TaskRecord

__all__ = ["BatchingTaskStore", "TaskStore"]


@runtime_checkable
class TaskStore(Protocol):
    """Persisted task records with a per-task lock and versioned writes."""

    async def create(self, record: TaskRecord) -> None:
        """Store a new task at version 1 (sets ``record.version``).

        Raises:
            AlreadyExists: a task with this id exists.
        """
        ...

    async def get(self, task_id: str) -> TaskRecord:
        """The stored task.

        Raises:
            NotFound: no such task (or it expired).
        """
        ...

    async def save(self, record: TaskRecord) -> None:
        """Write ``record`` if the stored version still equals ``record.version``, then bump it.

        Raises:
            ConcurrentUpdate: someone else saved a newer version first.
            NotFound: the task is gone.
        """
        ...

    def lock(self, task_id: str, *, wait_s: float = 2.0) -> AbstractAsyncContextManager[None]:
        """Hold the task's lock for the ``async with`` block.

        Raises:
            ConcurrentUpdate: the lock was not free within ``wait_s`` seconds.
        """
        ...

    async def list(self, query: TaskQuery) -> TaskPage:
        """The tasks ``query`` asks for, newest first, one page (see :mod:`middleware.task_listing`).

        Raises:
            InvalidInput: a ``page_token`` this store did not give.
        """
        ...

    async def close(self) -> None: ...


@runtime_checkable
class BatchingTaskStore(Protocol):
    """A task store that writes a task together with its lease or its events, in one round trip
    to a shared backend (the Redis store: a task's keys share one hash slot). The gateway uses
    these when :meth:`batches_with` says its lease table and event log are the store's own."""

    def batches_with(self, events: TaskEventLog, leases: TaskLeases | None) -> bool:
        """True when :meth:`save_told` writes to ``events`` and :meth:`create_leased` to ``leases``
        (``None``: no leases) — the same backend and keys as the two would themselves."""
        ...

    async def create_leased(self, record: TaskRecord, leases: TaskLeases, holder: Holder) -> bool:
        """:meth:`TaskLeases.hold` then :meth:`TaskStore.create`, as one write: False (nothing
        stored) when another holder has a lease on the id.

        Raises:
            AlreadyExists: a task with this id exists (no lease is left held).
        """
        ...

    async def save_told(self, record: TaskRecord, events: Sequence[TaskEvent]) -> int:
        """:meth:`TaskEventLog.append` then :meth:`TaskStore.save`, as one write; returns the
        last event's seq (the events are appended even when the save raises)."""
        ...
