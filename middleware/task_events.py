"""Task events: what a client following a task sees, in order (``Agency.watch``, gRPC WatchTask).

One vocabulary with the audit log. Every record the pipeline writes for a task becomes an event
carrying the record's own id, time, type, outcome, rule and detail — once the record is durable,
so a client never sees what the log might not hold. Two types are the stream's own and never
audited:

* ``agent.progress``: what an agent reports while it works (a streaming chat model's token
  deltas, what it emits, the events of the sub-agents it asks), for contracts with
  ``stream_progress`` (see :mod:`middleware.task_progress`);
* ``task.outcome``: the task stopped — waiting for input (``detail``: state, reason, the
  pending question) or ended; a task's stream ends with its terminal ``task.outcome``.

Each event gets its ``seq`` (1, 2, 3 … per task) from the event log that stores it: a client
whose stream broke asks again after the last ``seq`` it saw and misses nothing.

:class:`TaskEventLog` is the Protocol; ``memory_task_events.MemoryTaskEventLog`` is the
embedded default and ``redis/task_events.RedisTaskEventLog`` the one replicas share.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model, trusted
from .audit.record import AuditEventType, PlainRecord, utc_now_text
from .smf import new_id
from .tasks import Outcome, TaskState

__all__ = [
    "OUTCOME",
    "PROGRESS",
    "TaskEvent",
    "TaskEventLog",
    "events_of",
    "follow",
    "outcome_event",
    "progress_event",
]

#: What an agent reports while it works (not audited; contracts with ``stream_progress``).
PROGRESS = "agent.progress"
#: The task stopped (waiting for input, or ended): its state, reason and pending question.
OUTCOME = "task.outcome"

#: The audit types whose detail names the step they are about.
_STEP_DETAIL = frozenset(
    {
        AuditEventType.ROUTING_DECISION,
        AuditEventType.ROUTING_REFUSED,
        AuditEventType.DISPATCH,
        AuditEventType.AGENT_RESULT,
        AuditEventType.VERIFICATION,
        AuditEventType.FAILURE,
        AuditEventType.HUMAN_HANDOVER,
    }
)

#: Events one :meth:`TaskEventLog.read` hands back at most, whatever the caller asks.
MAX_READ = 1000


class TaskEvent(Model):
    """One event of a task, as a follower sees it (see the module docstring)."""

    seq: int = Field(
        default=0, ge=0, description="Its place in the task's stream (1, 2, 3 …); 0 = not stored."
    )
    id: str = Field(description="The audit record's event id (evt_…); the stream's own for its own types.")
    type: str = Field(description="The audit event type, or agent.progress / task.outcome.")
    time: str = Field(description="The audit record's time (RFC 3339, UTC).")
    task_id: str
    trace_id: str = ""
    state: str = Field(default="", description="The task's state once this event happened.")
    step: str = ""
    agent: str = ""
    outcome: str = Field(default="", description="The audit record's outcome (chosen, retry, passed …).")
    rule: str = ""
    detail: dict[str, Any] = Field(default_factory=dict)
    audit_index: int = Field(default=0, ge=0, description="Its index in the audit log; 0 = not audited.")
    node: str = Field(default="", description="The gateway that recorded it.")
    final: Outcome | None = Field(
        default=None, description="On a terminal task.outcome read back: the task's outcome (never stored)."
    )

    @property
    def ends_task(self) -> bool:
        """Whether this is the last event of its task (a terminal ``task.outcome``)."""
        return self.type == OUTCOME and self.state in _TERMINAL

    def stored(self) -> dict[str, Any]:
        """What a log stores of it (JSON-ready; ``final`` is never stored)."""
        return self.model_dump(mode="json", exclude={"final"})

    @classmethod
    def from_stored(cls, data: dict[str, Any] | bytes | str) -> TaskEvent:
        """An event a log stored (validated: a store is outside the process)."""
        if isinstance(data, dict):
            return cls.model_validate(data)
        return cls.model_validate_json(data)


_TERMINAL = frozenset(s.value for s in TaskState if s.terminal)


def events_of(
    records: Sequence[PlainRecord], states: Sequence[str], indexes: Sequence[int]
) -> list[TaskEvent]:
    """The events of a task's records just made durable (``indexes``: theirs in the log),
    each with the task's state once it happened (``states``)."""
    events: list[TaskEvent] = []
    for record, state, index in zip(records, states, indexes, strict=True):
        detail = record["detail"]
        step = detail.get("step", "") if record["event_type"] in _STEP_DETAIL else ""
        events.append(
            trusted(
                TaskEvent,
                {
                    "seq": 0,
                    "id": record["event_id"],
                    "type": record["event_type"],
                    "time": record["time"],
                    "task_id": record["task_id"],
                    "trace_id": record["trace_id"],
                    "state": state,
                    "step": step if isinstance(step, str) else "",
                    "agent": record["actors"].get("agent", ""),
                    "outcome": record["outcome"],
                    "rule": record["rule"],
                    "detail": detail,
                    "audit_index": index,
                    "node": record["node"],
                    "final": None,
                },
            )
        )
    return events


def progress_event(
    *, task_id: str, trace_id: str, state: str, step: str, agent: str, kind: str, data: Any, node: str
) -> TaskEvent:
    """An ``agent.progress`` event (``outcome`` is its kind: token, progress, subagent …)."""
    return trusted(
        TaskEvent,
        {
            "seq": 0,
            "id": new_id("evt"),
            "type": PROGRESS,
            "time": utc_now_text(),
            "task_id": task_id,
            "trace_id": trace_id,
            "state": state,
            "step": step,
            "agent": agent,
            "outcome": kind,
            "rule": "",
            "detail": {"kind": kind, "data": data},
            "audit_index": 0,
            "node": node,
            "final": None,
        },
    )


def outcome_event(
    *, task_id: str, trace_id: str, state: TaskState, detail: dict[str, Any], node: str
) -> TaskEvent:
    """The ``task.outcome`` event of a task that stopped in ``state``."""
    return trusted(
        TaskEvent,
        {
            "seq": 0,
            "id": new_id("evt"),
            "type": OUTCOME,
            "time": utc_now_text(),
            "task_id": task_id,
            "trace_id": trace_id,
            "state": state.value,
            "step": "",
            "agent": "",
            "outcome": state.value,
            "rule": "",
            "detail": detail,
            "audit_index": 0,
            "node": node,
            "final": None,
        },
    )


@runtime_checkable
class TaskEventLog(Protocol):
    """Every task's events in order, kept for followers (memory, or Redis for replicas)."""

    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        """Store ``events`` after the task's last ones, in order, each given the next ``seq``.

        Returns:
            The ``seq`` of the last one (0 when ``events`` is empty).
        """
        ...

    async def read(
        self, task_id: str, *, after: int = 0, limit: int = 100, wait_s: float = 0.0
    ) -> list[TaskEvent]:
        """The task's events with a ``seq`` above ``after``, oldest first, at most ``limit``
        (and :data:`MAX_READ`); when there are none yet, waits up to ``wait_s`` seconds for
        the first to arrive (an empty list: none came)."""
        ...

    async def last_seq(self, task_id: str) -> int:
        """The ``seq`` of the task's last event (0: none kept)."""
        ...

    async def close(self) -> None: ...


async def follow(
    log: TaskEventLog, task_id: str, *, after: int = 0, wait_s: float = 5.0, page: int = 100
) -> AsyncIterator[TaskEvent]:
    """The task's events after ``after`` as they come, until its terminal ``task.outcome``.

    Nothing is queued per follower: each reads the stored events at its own pace (a slow one
    holds a cursor, not a backlog). ``wait_s`` is how long one read waits before asking again.
    """
    while True:
        events = await log.read(task_id, after=after, limit=page, wait_s=wait_s)
        for event in events:
            yield event
            after = event.seq
            if event.ends_task:
                return
