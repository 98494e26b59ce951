"""The resolution executor: the one place where a failure's resolution takes effect.

Handlers only decide (they return a :class:`Resolution`); this module acts on the
decision for a running step: it waits out a retry's backoff, switches to a backup
agent, or stops the step with the state the task must take (failed, or waiting on
input with a clarification question or a human handover packet).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .failures import FailureEvent, Resolution, ResolutionKind
from .tasks import TaskState

__all__ = ["Directive", "ResolutionExecutor", "StepCursor"]


class Directive(Enum):
    """What the pipeline does next with the step."""

    RETRY = "retry"  # same agent, next attempt
    SWITCH = "switch"  # another agent, attempt 1
    STOP = "stop"  # the task leaves the step in ``cursor.stop_state``


@dataclass
class StepCursor:
    """The mutable position of one step: which agent, which attempt, what is left."""

    agent: str
    fallbacks: list[str]
    attempt: int = 1
    backups_used: int = 0
    stop_state: TaskState | None = None
    stop_reason: str = ""
    pending: dict[str, Any] = field(default_factory=dict)


Sleeper = Callable[[float], Awaitable[None]]


class ResolutionExecutor:
    """Applies resolutions to a :class:`StepCursor`."""

    def __init__(self, *, sleep: Sleeper, max_backups: int = 3) -> None:
        self._sleep = sleep
        self._max_backups = max_backups

    async def apply(
        self, resolution: Resolution, event: FailureEvent, cursor: StepCursor, snapshot: dict[str, Any]
    ) -> Directive:
        kind = resolution.kind
        if kind is ResolutionKind.RETRY:
            if resolution.delay_ms:
                await self._sleep(resolution.delay_ms / 1000)
            cursor.attempt += 1
            return Directive.RETRY
        if kind is ResolutionKind.USE_BACKUP and resolution.agent and cursor.backups_used < self._max_backups:
            if resolution.agent in cursor.fallbacks:
                cursor.fallbacks.remove(resolution.agent)
            cursor.agent, cursor.attempt = resolution.agent, 1
            cursor.backups_used += 1
            return Directive.SWITCH
        if kind is ResolutionKind.ASK_CLARIFICATION:
            cursor.pending = {"kind": "clarification", **resolution.payload}
            return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)
        if kind in (ResolutionKind.ESCALATE_TO_HUMAN, ResolutionKind.USE_BACKUP):
            cursor.pending = {
                "kind": "human_handover",
                "blocking_point": resolution.reason,
                "failure": event.model_dump(mode="json"),
                "state": snapshot,
                "suggested_reply": "Your request needs a colleague's review; "
                "they have the full history and will continue from here.",
            }
            return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)
        if kind is ResolutionKind.RETURN_CONFLICT:
            cursor.pending = {"kind": "conflict", **resolution.payload}
            return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)
        if kind is ResolutionKind.QUARANTINE:
            cursor.pending = {"kind": "quarantine", **resolution.payload}
            return self._stop(cursor, TaskState.FAILED, resolution.reason)
        return self._stop(cursor, TaskState.FAILED, resolution.reason)

    @staticmethod
    def _stop(cursor: StepCursor, state: TaskState, reason: str) -> Directive:
        cursor.stop_state, cursor.stop_reason = state, reason
        return Directive.STOP
