"""Tasks the audit log knows and the task store does not: rebuilt when a gateway starts.

A task that stops to wait for input (an approval, a clarification, a human handover) ends
its segment in the log with ``task.completed`` whose detail carries the whole task record
(``detail.task``, the :class:`TaskRecord` as JSON). A store that forgot it — the embedded
memory store after any restart, a Redis store that lost its data — gets it back from the
last such record: a task still waiting is waiting again (and is decided once, as before);
a task whose later segment was cut short (``task.interrupted``, or left open by a crash)
comes back failed, never runnable a second time (cancelled, if the last record of it is a
cancellation). Any ``task.*`` record after the snapshot — new kinds included — means the
task moved on. Tasks that never waited have no record to rebuild from and are not rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .audit.shredding import ERASED
from .errors import NotFound
from .task_store import TaskStore
from .tasks import TaskRecord, TaskState

__all__ = ["RebuiltTasks", "rebuild_tasks"]

log = logging.getLogger("agency.tasks")


@dataclass
class RebuiltTasks:
    """What :func:`rebuild_tasks` put back in the store.

    Attributes:
        waiting: Tasks waiting for input again.
        interrupted: Tasks whose last segment was cut short, stored as failed.
        unreadable: Tasks whose snapshot did not validate (logged, not rebuilt).
    """

    waiting: list[str]
    interrupted: list[str]
    unreadable: list[str]


async def rebuild_tasks(
    records: Iterable[dict[str, Any]],
    tasks: TaskStore,
    *,
    reveal: Callable[[str], str] | None = None,
) -> RebuiltTasks:
    """Put back in ``tasks`` each held or interrupted task of ``records`` it does not have.

    With the personal-data guard on, the snapshot's personal values are sealed (or redacted)
    in the log: ``reveal`` opens sealed ones (``audit.shredding.reveal`` with the subject keys).
    A task whose personal data cannot be had back — its subject erased, or the values only
    redacted — is never resumed with placeholders: it comes back failed, saying why.

    Args:
        records: One node's ``task.*`` records (plain JSON objects), in log order.
        tasks: The store to fill.
        reveal: Opens the sealed values of a string (None: they stay sealed, the task fails).
    """
    snapshot: dict[str, dict[str, Any]] = {}
    last: dict[str, dict[str, Any]] = {}
    for rec in records:
        task_id, etype = rec.get("task_id"), rec.get("event_type")
        if not task_id or not isinstance(etype, str) or not etype.startswith("task."):
            continue
        last[task_id] = rec  # any later task.* record (a new kind too) means it moved on
        detail = rec.get("detail") or {}
        if etype == "task.completed" and isinstance(detail.get("task"), dict):
            snapshot[task_id] = detail["task"]
    done = RebuiltTasks([], [], [])
    for task_id, data in snapshot.items():
        end = last[task_id]
        ended = end.get("detail") or {}
        waiting = end["event_type"] == "task.completed" and isinstance(ended.get("task"), dict)
        try:
            await tasks.get(task_id)
            continue  # the store has it: it knows better than the log's last snapshot
        except NotFound:
            pass
        data, lost = _revealed(data, reveal)
        try:
            run = TaskRecord.model_validate(data)
        except ValidationError as exc:
            log.error("task %s: its snapshot in the audit log does not validate: %s", task_id, exc)
            done.unreadable.append(task_id)
            continue
        if lost:  # never resumed with placeholders for its data
            run.state, run.pending = TaskState.FAILED, {}
            run.reason = f"its personal data is not in the audit log in clear ({lost}): not resumable"
            await tasks.create(run)
            done.interrupted.append(task_id)
            continue
        if not waiting:  # resumed, then cut short (or still open after a crash): never run again
            why = str(ended.get("reason") or f"the log's last word on it: {end['event_type']}")
            cancelled = "cancel" in str(end["event_type"])
            run.state = TaskState.CANCELED if cancelled else TaskState.FAILED
            run.pending, run.reason = {}, why if cancelled else f"interrupted: {why}"
        await tasks.create(run)
        (done.waiting if waiting else done.interrupted).append(task_id)
    if done.waiting or done.interrupted:
        log.warning(
            "rebuilt %d waiting and %d interrupted task(s) from the audit log (the task store did not "
            "have them)",
            len(done.waiting),
            len(done.interrupted),
        )
    return done


def _revealed(value: Any, reveal: Callable[[str], str] | None) -> tuple[Any, str]:
    """``value`` with its sealed strings opened; and why personal data is missing ("" if not)."""
    lost: list[str] = []

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            if "[sealed:" in v:
                v = reveal(v) if reveal is not None else v
                if ERASED in v:
                    lost.append("its subject was erased")
            if "[sealed:" in v or "[redacted:" in v:
                lost.append("sealed or redacted")
            return v
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    out = walk(value)
    return out, (lost[0] if lost else "")
