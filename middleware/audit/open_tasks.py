"""The log's task invariant: every task that began in the log ends in it.

A task *begins* a segment with ``task.submitted`` (or ``task.resumed``) and ends it with
``task.completed`` (its outcome, final or waiting for input) or ``task.interrupted``
(cut short: a backend error, a cancelled call, the gateway shutting down). The gateway
writes ``task.interrupted`` itself when it can; when it could not (a crash, kill -9),
:func:`close_open_tasks` writes it when the log is next opened, and
``agency audit verify`` reports tasks left open (:func:`open_tasks`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .log import AuditLog
from .record import AuditEventType, AuditRecord

__all__ = ["BEGINS", "ENDS", "close_open_tasks", "open_tasks"]

BEGINS = frozenset({AuditEventType.TASK_SUBMITTED.value, AuditEventType.TASK_RESUMED.value})
ENDS = frozenset({AuditEventType.TASK_COMPLETED.value, AuditEventType.TASK_INTERRUPTED.value})

RECOVERY_REASON = (
    "the gateway stopped (crash or kill) before the task ended: found open when the log was opened"
)


def open_tasks(records: Iterable[AuditRecord]) -> dict[str, AuditRecord]:
    """Tasks whose last segment began and did not end, with the record that began it.

    ``records`` are one node's, in log order.
    """
    running: dict[str, AuditRecord] = {}
    for record in records:
        if not record.task_id:
            continue
        if record.event_type in BEGINS:
            running[record.task_id] = record
        elif record.event_type in ENDS:
            running.pop(record.task_id, None)
    return running


async def close_open_tasks(
    log: AuditLog, records: Iterable[AuditRecord], *, node: str, reason: str = RECOVERY_REASON
) -> list[str]:
    """Append a ``task.interrupted`` record for every task ``records`` leave open.

    Returns:
        The ids of the tasks closed, in the order they began.
    """
    closed: list[str] = []
    for task_id, began in open_tasks(records).items():
        await log.append(
            AuditRecord.model_validate(
                {
                    "event_type": AuditEventType.TASK_INTERRUPTED.value,
                    "node": node,
                    "component": "gateway",
                    "actors": began.actors.model_dump(),
                    "task_id": task_id,
                    "trace_id": began.trace_id,
                    "goal_id": began.goal_id,
                    "outcome": "interrupted",
                    "detail": {"reason": reason, "began_at": began.time.isoformat()},
                }
            )
        )
        closed.append(task_id)
    return closed
