"""A task's audit records between two durability barriers, handed to the log as one batch.

The pipeline appends every governed step of a task to the audit log, but it needs each
step to be *durable* only at a barrier: before an agent is dispatched, when the task
ends, when a segment of it returns. A ``TaskJournal`` collects the records between two
barriers as plain data (``audit.record.plain_record``: no model is built or validated —
these records are written by the gateway itself; what came from a client or an agent was
validated where it came in) and hands them to the log with one ``append_batch`` at the
barrier: one hand-over and one wait instead of one per record. Each record stays its own
entry (its own frame and Merkle leaf in the write-ahead log), in the order it was added.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .audit.log import AuditLog
from .audit.record import PlainRecord, task_record_template, utc_now_text
from .smf import new_id

__all__ = ["TaskJournal", "observer_of"]


def observer_of(log: AuditLog) -> Callable[[PlainRecord], None] | None:
    """The log's ``on_task_record``, if it (or a log it wraps) wants records as they are recorded."""
    return getattr(log, "on_task_record", None)


class TaskJournal:
    """The records of one task not yet handed to the audit log.

    Args:
        log: Where the records go.
        node: The gateway's node id (each record's ``node``).
        task_id, trace_id, goal_id, user, session: What every record of the task carries
            (``goal_id`` may be set later: an intake agent anchors the goal mid-task).
        observer: Told of each record as it is recorded: :func:`observer_of` the log (tracing
            starts the task's span there), looked up once by the caller, not per journal.
    """

    __slots__ = (
        "_log",
        "_observer",
        "_pending",
        "_session",
        "_states",
        "_template",
        "_tenant",
        "_user",
        "goal_id",
    )

    def __init__(
        self,
        log: AuditLog,
        *,
        node: str,
        task_id: str,
        trace_id: str,
        goal_id: str,
        user: str,
        session: str,
        observer: Callable[[PlainRecord], None] | None,
        tenant: str = "",
    ) -> None:
        self._log = log
        # what every record of the task carries, built once: each record is a copy of it
        self._template = task_record_template(node=node, task_id=task_id, trace_id=trace_id)
        self._user, self._session, self._tenant = user, session, tenant
        self.goal_id = goal_id
        self._pending: list[PlainRecord] = []
        self._states: list[str] = []  # the task's state once each pending record happened
        # an observer that wants records as they are recorded (tracing: the task's span)
        self._observer = observer

    def add(
        self,
        event_type: str,
        outcome: str,
        detail: dict[str, Any],
        *,
        agent: str = "",
        rule: str = "",
        state: str = "",
    ) -> None:
        """Record one step (time-stamped now); it reaches the log at the next ``flush``.

        ``state``: the task's state once it happened (for the task's event stream)."""
        # plain_record's record (the same keys in the same order), the task's fields copied
        record = self._template.copy()
        record["event_id"] = new_id("evt")
        record["event_type"] = event_type
        record["time"] = utc_now_text()
        actors = {"user": self._user, "agent": agent, "session": self._session}
        if self._tenant:  # records without a tenant keep their bytes (audit.record.Actors)
            actors["tenant"] = self._tenant
        record["actors"] = actors
        record["goal_id"] = self.goal_id
        record["rule"] = rule
        record["outcome"] = outcome
        record["detail"] = detail
        self._pending.append(record)
        self._states.append(state)
        if self._observer is not None:
            self._observer(record)

    def __len__(self) -> int:
        return len(self._pending)

    async def flush(self) -> int:
        """Hand every pending record to the log as one batch and wait until it is durable.

        Returns:
            The index of the last record (0 if there was nothing to hand over).
        """
        _, _, indexes = await self.hand_over()
        return indexes[-1] if indexes else 0

    async def hand_over(self) -> tuple[list[PlainRecord], list[str], range]:
        """:meth:`flush`, answering what was handed over: the records, the task's state at
        each (the ``state`` of :meth:`add`) and their indexes in the log (the task's event
        stream is made of them, once durable)."""
        if not self._pending:
            return [], [], range(0)
        batch, self._pending = self._pending, []  # handed over: a cancelled wait does not re-send
        states, self._states = self._states, []
        return batch, states, await self._log.append_batch(batch)
