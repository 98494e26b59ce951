"""Failure semantics: typed failures, resolutions as data, and the processor.

A failure is a state of the system with a business meaning, not an exception. Each
:class:`FailureEvent` has a :class:`FailureType` (a constant, never a free string);
:class:`FailureProcessor` hands it to the handler registered for its type (the
built-ins live in the top-level ``handlers`` package, one module per type); the
handler is a pure function returning a :class:`Resolution`; the executor in
``middleware.pipeline`` is the only place that applies resolutions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .errors import InvalidInput
from .smf import new_id, utcnow

__all__ = [
    "FailureEvent",
    "FailureHandler",
    "FailurePolicy",
    "FailureProcessor",
    "FailureType",
    "Resolution",
    "ResolutionKind",
]


class FailureType(StrEnum):
    """The failure vocabulary (seed section 3.3)."""

    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    TOOL_ERROR = "TOOL_ERROR"
    CONTEXT_AMBIGUITY = "CONTEXT_AMBIGUITY"
    POLICY_VIOLATION = "POLICY_VIOLATION"
    DATA_INCONSISTENCY = "DATA_INCONSISTENCY"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    GOAL_UNMET = "GOAL_UNMET"
    GOAL_TIMEOUT = "GOAL_TIMEOUT"
    CAPABILITY_MISMATCH = "CAPABILITY_MISMATCH"
    STALE_DATA = "STALE_DATA"
    INTENT_DRIFT = "INTENT_DRIFT"

    @classmethod
    def of(cls, value: str | FailureType) -> FailureType:
        """The constant for ``value``; an unknown type is an :class:`InvalidInput`."""
        try:
            return cls(value)
        except ValueError:
            raise InvalidInput.single(
                "type", f"unknown failure type {value!r}; known: {', '.join(t.value for t in cls)}"
            ) from None


class ResolutionKind(StrEnum):
    RETRY = "retry"
    USE_BACKUP = "use_backup"
    ASK_CLARIFICATION = "ask_clarification"
    ESCALATE_TO_HUMAN = "escalate_to_human"
    QUARANTINE = "quarantine"
    ABORT = "abort"
    RETURN_CONFLICT = "return_conflict"


class FailureEvent(Model):
    """One failure, with everything a pure handler needs to decide."""

    event_id: str = Field(default_factory=lambda: new_id("fail"))
    type: FailureType
    task_id: str
    trace_id: str
    step: str = Field(default="", description="The task step (sub-task) that failed.")
    agent: str = Field(default="", description="Contract key of the agent involved.")
    attempt: int = Field(default=1, ge=1, description="Which attempt on this agent failed (1 = first).")
    fallbacks: list[str] = Field(default_factory=list, description="Remaining backup agents, best first.")
    detail: str = ""
    context: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime = Field(default_factory=utcnow)


class Resolution(Model):
    """What to do about a failure, as data. The executor applies it."""

    kind: ResolutionKind
    reason: str
    failure_type: FailureType
    delay_ms: float = Field(default=0.0, ge=0, description="Wait before a retry.")
    agent: str = Field(default="", description="For use_backup: the agent to switch to.")
    payload: dict[str, Any] = Field(default_factory=dict)


class FailurePolicy(Model):
    """Operator-tunable knobs the built-in handlers read."""

    max_retries: int = Field(default=2, ge=0, le=20, description="Retries per agent (seed: 2).")
    backoff_base_ms: float = Field(default=100.0, ge=0)
    backoff_max_ms: float = Field(default=5000.0, ge=0)
    jitter: float = Field(default=0.2, ge=0, le=1, description="± fraction of the backoff.")
    on_exhausted: Literal["use_backup", "escalate_to_human", "abort"] = "use_backup"


@runtime_checkable
class FailureHandler(Protocol):
    """A pure function from a failure event to a resolution (no side effects)."""

    def __call__(self, event: FailureEvent, policy: FailurePolicy) -> Resolution: ...


class FailureProcessor:
    """Dispatches each failure event to the handler registered for its type."""

    def __init__(
        self,
        handlers: Mapping[FailureType | str, FailureHandler] | None = None,
        *,
        policy: FailurePolicy | None = None,
        policies: Mapping[FailureType | str, FailurePolicy] | None = None,
    ) -> None:
        from handlers import builtin_handlers

        self._handlers: dict[FailureType, FailureHandler] = dict(builtin_handlers())
        for ftype, handler in (handlers or {}).items():
            self.register(ftype, handler)
        self.policy = policy or FailurePolicy()
        self._policies = {FailureType.of(k): v for k, v in (policies or {}).items()}

    def register(self, ftype: FailureType | str, handler: FailureHandler) -> None:
        """Install ``handler`` for ``ftype``, replacing the built-in one."""
        if not callable(handler):
            raise InvalidInput.single("handler", "must be callable (event, policy) -> Resolution")
        self._handlers[FailureType.of(ftype)] = handler

    def handler_for(self, ftype: FailureType | str) -> FailureHandler:
        return self._handlers[FailureType.of(ftype)]

    def policy_for(self, ftype: FailureType) -> FailurePolicy:
        return self._policies.get(ftype, self.policy)

    def process(self, event: FailureEvent) -> Resolution:
        """The resolution for ``event``; a handler returning anything else is a bug."""
        resolution = self.handler_for(event.type)(event, self.policy_for(event.type))
        if not isinstance(resolution, Resolution):
            raise TypeError(f"handler for {event.type} returned {type(resolution).__name__}, not Resolution")
        return resolution


HandlerFactory = Callable[[], FailureHandler]
