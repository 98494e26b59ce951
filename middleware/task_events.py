"""Task events: what a client following a task sees, in order (``Agency.watch``, gRPC WatchTask).

One vocabulary with the audit log. Every record the pipeline writes for a task becomes an event
carrying the record's own id, time, type, outcome, rule and detail — once the record is durable,
so a client never sees what the log might not hold. Two types are the stream's own and never
audited:

* ``agent.progress``: what an agent reports while it works (a streaming chat model's token
  deltas, what it emits, the events of the sub-agents it asks), for contracts with
  ``stream_progress`` (see :mod:`middleware.task_progress`);
* ``task.outcome``: the task stopped — waiting for input (``detail``: state, reason, the
  pending question), interrupted (its gateway stopped: resume or cancel it), or ended; a task's
  stream ends with its terminal ``task.outcome``.

Each event gets its ``seq`` (1, 2, 3 … per task) from the event log that stores it: a client
whose stream broke asks again after the last ``seq`` it saw and misses nothing.

:class:`TaskEventLog` is the Protocol; ``memory_task_events.MemoryTaskEventLog`` is the
embedded default and ``redis/task_events.RedisTaskEventLog`` the one replicas share.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import orjson
from pydantic import Field
from pydantic_core import to_jsonable_python

from ._model import Model, trusted
from .audit.record import AuditEventType, PlainRecord, utc_now_text
from .smf import new_id
from .tasks import Outcome, TaskState, outcome_json

__all__ = [
    "OUTCOME",
    "PROGRESS",
    "TaskEvent",
    "TaskEventLog",
    "describe",
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
        default=None, description="On the terminal task.outcome: the task's outcome (stored with it)."
    )

    @property
    def ends_task(self) -> bool:
        """Whether this is the last event of its task (a terminal ``task.outcome``)."""
        return self.type == OUTCOME and self.state in _TERMINAL

    def to_json(self) -> bytes:
        """The event as JSON bytes, what a log keeps (bytes: nothing for the garbage collector
        to scan, however many tasks' events a log holds; ``final`` as the outcome's own JSON)."""
        values = self.__dict__
        final = values["final"]
        if final is not None:
            values = {**values, "final": orjson.Fragment(outcome_json(final))}
        try:
            return orjson.dumps(values, default=_jsonable)
        except TypeError:  # an integer beyond 64 bits (a client's JSON may hold one): the json module
            if final is not None:  # writes it; the outcome as its parsed JSON (a Fragment is orjson's)
                values = {**values, "final": json.loads(outcome_json(final))}
            return json.dumps(values, separators=(",", ":"), ensure_ascii=False, default=_jsonable).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> TaskEvent:
        """An event a log kept (validated again: a store may be outside the process)."""
        return cls.model_validate_json(data)


_TERMINAL = frozenset(s.value for s in TaskState if s.terminal)


def _jsonable(value: Any) -> Any:
    """What orjson does not write itself (a model in a detail, a datetime), as pydantic writes it."""
    return to_jsonable_python(value)


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
    *,
    task_id: str,
    trace_id: str,
    state: TaskState,
    detail: dict[str, Any],
    node: str,
    final: Outcome | None = None,
) -> TaskEvent:
    """The ``task.outcome`` event of a task that stopped in ``state`` (``final``: the outcome of
    a task that ended)."""
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
            "final": final,
        },
    )


@runtime_checkable
class TaskEventLog(Protocol):
    """Every task's events in order, kept for followers (memory, or Redis for replicas)."""

    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        """Store ``events`` after the task's last ones, in order, each given the next ``seq``.

        Returns:
            The ``seq`` of the last one (when ``events`` is empty: of the task's last event, or 0).
        """
        ...

    async def read(
        self, task_id: str, *, after: int = 0, limit: int = 100, wait_s: float = 0.0
    ) -> list[TaskEvent]:
        """The task's events with a ``seq`` above ``after``, oldest first, at most ``limit``
        (and :data:`MAX_READ`); when there are none yet, waits up to ``wait_s`` seconds for
        the first to arrive (an empty list: none came)."""
        ...

    async def last(self, task_id: str) -> TaskEvent | None:
        """The task's last event (its ``seq``, and the task's state then); None: none kept."""
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


# ------------------------------------------------------------------ in words
def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _step(d: dict[str, Any]) -> str:
    return f"step {d['step']}: " if d.get("step") else ""


def _verdict(e: TaskEvent) -> str:
    d = e.detail
    stage = f"stage {d['stage']}" if d.get("stage") else f"goal {e.detail.get('goal_id') or ''}".strip()
    checks = d.get("steps") or []
    passed = sum(1 for c in checks if isinstance(c, dict) and c.get("passed"))
    return f"{stage}: {e.outcome} ({passed}/{len(checks)} checks)"


def _progress(e: TaskEvent) -> str:
    data = e.detail.get("data")
    if e.outcome == "token" and isinstance(data, dict) and isinstance(data.get("text"), str):
        return f"{e.agent} writes: {data['text']}"
    shown = json.dumps(data, ensure_ascii=False, default=str) if data is not None else ""
    return f"{e.agent} {e.outcome}: {_cut(shown, 200)}" if shown else f"{e.agent} {e.outcome}"


def _outcome(e: TaskEvent) -> str:
    d = e.detail
    if e.state == "input_required":
        pending = d.get("pending") or {}
        question = pending.get("question") or pending.get("why") or d.get("reason") or "input required"
        options = [str(o.get("id")) for o in pending.get("options") or [] if isinstance(o, dict)]
        offered = f" (options: {', '.join(options)})" if options else ""
        return f"waiting for input: {_cut(str(question), 160)}{offered}"
    if e.state == "interrupted":
        return f"interrupted: {_cut(str(d.get('reason', '')), 160)} (resume or cancel it)"
    reason = f": {_cut(str(d.get('reason')), 160)}" if d.get("reason") else ""
    return f"outcome {e.state}{reason}"


_DESCRIBE: dict[str, Callable[[TaskEvent], str]] = {
    "task.submitted": lambda e: f"accepted: {_cut(str(e.detail.get('text', '')), 100)}",
    "message.accepted": lambda e: "request message accepted (SMF)",
    "goal.anchored": lambda e: (
        f"goal {e.detail.get('goal', {}).get('id', '')} anchored" + (f" by {e.agent}" if e.agent else "")
    ),
    "task.transition": lambda e: f"{e.detail.get('from', '')} -> {e.detail.get('to', '')}",
    "routing.decision": lambda e: (
        f"{_step(e.detail)}routed to {e.detail.get('chosen', '')}"
        + (f" (backups: {', '.join(e.detail['fallbacks'])})" if e.detail.get("fallbacks") else "")
    ),
    "routing.refused": lambda e: (
        f"{_step(e.detail)}refused: {_cut(str(e.detail.get('explanation', '')), 160)}"
    ),
    "agent.dispatch": lambda e: (
        f"{_step(e.detail)}dispatched to {e.agent} (attempt {e.detail.get('attempt', 1)})"
    ),
    "agent.result": lambda e: (
        f"{_step(e.detail)}{e.agent} answered in {e.detail.get('duration_ms', 0):.0f} ms"
    ),
    "failure.event": lambda e: (
        f"{_step(e.detail)}failure {e.outcome} on {e.agent or '-'} "
        f"(attempt {e.detail.get('attempt', 1)}): {_cut(str(e.detail.get('detail', '')), 140)}"
    ),
    "failure.resolution": lambda e: (
        f"resolution {e.outcome}"
        + (f" -> {e.detail['agent']}" if e.detail.get("agent") else "")
        + f": {_cut(str(e.detail.get('reason', '')), 140)}"
    ),
    "goal.verification": _verdict,
    "human.handover": lambda e: (
        f"{e.outcome}: waiting for a person"
        + (f" ({_cut(str(e.detail.get('why')), 120)})" if e.detail.get("why") else "")
    ),
    "task.resumed": lambda e: (
        f"resumed: {e.outcome}"
        + (f" by {e.detail['person']}" if e.detail.get("person") else "")
        + (f" ({_cut(str(e.detail.get('reason')), 120)})" if e.detail.get("reason") else "")
    ),
    "task.completed": lambda e: f"stopped: {e.outcome}",
    "task.interrupted": lambda e: f"interrupted: {_cut(str(e.detail.get('reason', '')), 160)}",
    "failure.quarantine": lambda e: f"output of {e.agent} quarantined",
    "agent.circuit": lambda e: (
        f"circuit of {e.agent}: {e.detail.get('from', '')} -> {e.detail.get('to', '')}"
    ),
    "contract.review": lambda e: f"contract {e.agent} {e.outcome} for review",
    PROGRESS: _progress,
    OUTCOME: _outcome,
}


def describe(event: TaskEvent) -> str:
    """What ``event`` says, in a few words (``agency task watch``, A2A and MCP progress)."""
    how = _DESCRIBE.get(event.type)
    if how is None:
        return f"{event.type} {event.outcome}".strip()
    try:
        return how(event)
    except (KeyError, TypeError, ValueError, AttributeError):  # an unexpected detail: the raw facts
        return f"{event.type} {event.outcome}".strip()
