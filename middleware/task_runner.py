"""Tasks that run on after the call that submitted them answered (Submit ``return_immediately``).

The gateway owns them, not the call: a :class:`TaskRunner` keeps each one, logs what it raises,
bounds how many run at once, and on shutdown **drains**: it takes no new task, gives the running
ones the drain time to end, then cancels the rest — each is then ended in the audit log as
interrupted by the pipeline (``task.interrupted``), like a task whose call was cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from .errors import ResourceExhausted, Unavailable

__all__ = ["DEFAULT_MAX_BACKGROUND_TASKS", "TaskRunner"]

log = logging.getLogger("agency.runner")

#: Tasks one gateway runs in the background at once (beyond: RESOURCE_EXHAUSTED, retry later).
DEFAULT_MAX_BACKGROUND_TASKS = 10_000


class TaskRunner:
    """The background tasks of one agency.

    Args:
        max_tasks: Tasks running at once; one more is refused (``ResourceExhausted``).
    """

    def __init__(self, *, max_tasks: int = DEFAULT_MAX_BACKGROUND_TASKS) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._max = max_tasks
        self._draining = False

    @property
    def running(self) -> int:
        """Tasks running now."""
        return len(self._tasks)

    def check(self) -> None:
        """Raise now what :meth:`start` would raise (before the task is created anywhere).

        Raises:
            Unavailable: the gateway is shutting down.
            ResourceExhausted: ``max_tasks`` tasks run already.
        """
        if self._draining:
            raise Unavailable("the gateway is shutting down: submit to another replica")
        if len(self._tasks) >= self._max:
            raise ResourceExhausted(
                f"{self._max} tasks already run in the background on this gateway; wait for some to end",
                retryable=True,
                details={"retry_after_ms": 1000},
            )

    def start(self, task_id: str, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` (the rest of task ``task_id``) in the background.

        Raises:
            Unavailable, ResourceExhausted: as :meth:`check` (``work`` is closed unrun).
        """
        try:
            self.check()
        except Exception:
            work.close()
            raise
        task = asyncio.get_running_loop().create_task(work, name=f"task:{task_id}")
        self._tasks[task_id] = task
        task.add_done_callback(lambda done: self._ended(task_id, done))

    def _ended(self, task_id: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(task_id) is task:
            del self._tasks[task_id]
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:  # the pipeline ended it in the log (interrupted); say why here
            log.error(
                "background task %s stopped: %s: %s",
                task_id,
                type(error).__name__,
                error,
                exc_info=(type(error), error, error.__traceback__),
            )

    async def drain(self, timeout: float) -> int:  # noqa: ASYNC109 (a drain time, not a call's)
        """Take no new task; wait up to ``timeout`` seconds for the running ones to end.

        Returns:
            How many still run (:meth:`close` cancels them).
        """
        self._draining = True
        pending = list(self._tasks.values())
        if pending and timeout > 0:
            await asyncio.wait(pending, timeout=timeout)
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel what still runs and wait until each has ended (recorded as interrupted)."""
        self._draining = True
        pending = list(self._tasks.values())
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
