"""The resolution executor: the one place where a failure's resolution takes effect.

Handlers only decide (they return a :class:`Resolution`); this module acts on the
decision for a running step: it waits out a retry's backoff (through the injected
``sleep``), switches to a backup agent, raises an alert for a quarantined output,
or stops the step with the state the task must take – failed, or waiting on input
with a structured clarification, a conflict to settle, or a human handover packet.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .collaboration import plan_for
from .errors import InvalidInput
from .failures import FailureEvent, Resolution, ResolutionKind
from .interventions import (
    Blocking,
    Clarification,
    CompletedStep,
    HandoverPacket,
    InputRequest,
    suggested_reply,
)
from .smf import utcnow
from .tasks import TaskRecord, TaskState

__all__ = [
    "Alert",
    "AlertSink",
    "Directive",
    "LoggingAlertSink",
    "MemoryAlertSink",
    "ResolutionExecutor",
    "StepCursor",
]

log = logging.getLogger("agency.alerts")


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
    #: Why the resolution was not carried out as decided ('' when it was): a person took over.
    not_carried_out: str = ""


class Alert(Model):
    """A security/operations alert (e.g. a quarantined output)."""

    kind: str
    task_id: str
    failure_type: str
    agent: str = ""
    rule: str = ""
    detail: str = ""
    at: datetime = Field(default_factory=utcnow)


@runtime_checkable
class AlertSink(Protocol):
    """Where alerts go (a pager, a SIEM, a chat channel ...)."""

    async def alert(self, alert: Alert) -> None: ...


class LoggingAlertSink:
    """Default sink: an ERROR log line on the ``agency.alerts`` logger."""

    async def alert(self, alert: Alert) -> None:
        log.error("ALERT %s", alert.model_dump_json())


class MemoryAlertSink:
    """Keeps alerts in a list (tests, embedding)."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    async def alert(self, alert: Alert) -> None:
        self.alerts.append(alert)


Sleeper = Callable[[float], Awaitable[None]]


class ResolutionExecutor:
    """Applies resolutions to a :class:`StepCursor`.

    Args:
        sleep: How a retry waits its backoff (injected: tests never sleep).
        max_backups: Backups tried per step before a human takes over.
        alerts: Where quarantine alerts go.
    """

    def __init__(self, *, sleep: Sleeper, max_backups: int = 3, alerts: AlertSink | None = None) -> None:
        self._sleep = sleep
        self._max_backups = max_backups
        self.alerts = alerts or LoggingAlertSink()

    async def apply(
        self, resolution: Resolution, event: FailureEvent, cursor: StepCursor, task: TaskRecord
    ) -> Directive:
        kind = resolution.kind
        cursor.not_carried_out = ""
        if kind is ResolutionKind.RETRY:
            if resolution.delay_ms:
                await self._sleep(resolution.delay_ms / 1000)
            cursor.attempt += 1
            return Directive.RETRY
        if kind is ResolutionKind.USE_BACKUP:
            if resolution.agent not in cursor.fallbacks:  # only agents the router found fit (any handler)
                why = f"{resolution.agent or 'no agent'} is not a fallback left for step {event.step}"
                return self.not_carried_out(resolution, event, cursor, task, why)
            if cursor.backups_used >= self._max_backups:
                why = f"max_backups ({self._max_backups}) backups already used for step {event.step}"
                return self.not_carried_out(resolution, event, cursor, task, why)
            cursor.fallbacks.remove(resolution.agent)
            cursor.agent, cursor.attempt = resolution.agent, 1
            cursor.backups_used += 1
            return Directive.SWITCH
        if kind is ResolutionKind.ASK_CLARIFICATION and resolution.payload.get("missing"):
            cursor.pending = _input_request(resolution, event)
            return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)
        if kind in (ResolutionKind.ASK_CLARIFICATION, ResolutionKind.RETURN_CONFLICT):
            question = _clarification(resolution, event, task)
            if question is None:
                why = "the question has fewer than two valid options to offer"
                return self.not_carried_out(resolution, event, cursor, task, why)
            cursor.pending = question
            return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)
        if kind is ResolutionKind.QUARANTINE:
            cursor.pending = {"kind": "quarantine", **resolution.payload}
            await self.alerts.alert(
                Alert(
                    kind="quarantine",
                    task_id=event.task_id,
                    failure_type=event.type.value,
                    agent=event.agent,
                    rule=str(resolution.payload.get("rule", "")),
                    detail=resolution.reason,
                )
            )
            return self._stop(cursor, TaskState.FAILED, resolution.reason)
        if kind is ResolutionKind.ABORT:
            return self._stop(cursor, TaskState.FAILED, resolution.reason)
        if kind is not ResolutionKind.ESCALATE_TO_HUMAN:  # a kind this executor has no action for
            return self.not_carried_out(
                resolution, event, cursor, task, f"no action is known for {kind.value}"
            )
        cursor.pending = handover(task, event, resolution.reason).model_dump(mode="json")
        return self._stop(cursor, TaskState.INPUT_REQUIRED, resolution.reason)

    def not_carried_out(
        self, resolution: Resolution, event: FailureEvent, cursor: StepCursor, task: TaskRecord, why: str
    ) -> Directive:
        """``resolution`` cannot be carried out (``why``): a person takes over with the handover
        packet. ``cursor.not_carried_out`` says why, so the caller records it beside the resolution."""
        reason = f"{resolution.kind.value} not carried out: {why}; a person decides ({resolution.reason})"
        cursor.not_carried_out = why
        cursor.pending = handover(task, event, reason).model_dump(mode="json")
        return self._stop(cursor, TaskState.INPUT_REQUIRED, reason)

    @staticmethod
    def _stop(cursor: StepCursor, state: TaskState, reason: str) -> Directive:
        cursor.stop_state, cursor.stop_reason = state, reason
        return Directive.STOP


def _clarification(resolution: Resolution, event: FailureEvent, task: TaskRecord) -> dict[str, Any] | None:
    """The structured question, or None when it would not be one (fewer than two options)."""
    conflict = resolution.kind is ResolutionKind.RETURN_CONFLICT
    plan = plan_for(task, event) if conflict else None
    try:
        return Clarification.parse(
            {
                "kind": "conflict" if conflict else "clarification",
                "step": event.step,
                "question": resolution.payload.get("question") or "Please choose one option.",
                "options": resolution.payload.get("options") or [],
                "failure_type": event.type.value,
                "conflict": resolution.payload.get("conflict") or {},
                "plan": plan.model_dump(mode="json") if plan is not None else None,
            }
        ).model_dump(mode="json")
    except InvalidInput:
        return None


def _input_request(resolution: Resolution, event: FailureEvent) -> dict[str, Any]:
    """The question for a plan step's missing input (``middleware.plan_runner``)."""
    missing = [dict(m) for m in resolution.payload.get("missing") or [] if isinstance(m, dict)]
    return InputRequest(
        step=event.step,
        question=str(resolution.payload.get("question") or "Please give the missing input."),
        fields=[str(m.get("answer_as") or m.get("field")) for m in missing],
        missing=missing,
        schemas=dict(resolution.payload.get("schemas") or {}),
        failure_type=event.type.value,
    ).model_dump(mode="json")


def handover(task: TaskRecord, event: FailureEvent, reason: str) -> HandoverPacket:
    """The packet a human gets: state snapshot, completed steps, blocking point, a reply."""
    return HandoverPacket(
        task_id=task.task_id,
        state=task.snapshot(),
        completed_steps=[
            CompletedStep(
                name=s.name,
                agent=s.agent,
                status=s.status,
                started_at=s.started_at,
                finished_at=s.finished_at,
                attempts=s.attempts,
            )
            for s in task.steps
        ],
        blocking_point=Blocking(
            step=event.step,
            agent=event.agent,
            failure_type=event.type.value,
            detail=reason or event.detail,
            attempts=event.attempt,
        ),
        failure=event.model_dump(mode="json"),
        suggested_reply=suggested_reply(event.type.value, task.request.text, language=task.language),
        plan=plan.model_dump(mode="json") if (plan := plan_for(task, event)) is not None else None,
    )
