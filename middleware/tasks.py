"""Tasks: what a client submits, the states a task moves through, and its outcome.

States map onto the A2A task states so A2A users recognise them::

    SUBMITTED ─► ROUTING ─► DISPATCHED ─► VERIFYING ─► COMPLETED
                   │  ▲         │  ▲          │
                   │  └─RETRYING◄┘  │          ├─► INPUT_REQUIRED ─► ROUTING (resume)
                   ▼                │          ▼
                REJECTED        (next step)  FAILED / CANCELED

An illegal transition is a bug and raises :class:`IllegalTransition`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from ._model import Model
from .errors import FailedPrecondition
from .failures import FailureEvent, Resolution
from .goals import GoalAssertion, GoalVerdict
from .smf import Provenance, new_id, utcnow

__all__ = [
    "A2A_STATE",
    "IllegalTransition",
    "Outcome",
    "StepRecord",
    "TaskRequest",
    "TaskState",
    "TaskStep",
    "check_transition",
]


class TaskState(StrEnum):
    SUBMITTED = "submitted"
    ROUTING = "routing"
    DISPATCHED = "dispatched"
    RETRYING = "retrying"
    VERIFYING = "verifying"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = {TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED, TaskState.CANCELED}

#: The A2A 1.0 state each of ours corresponds to.
A2A_STATE: dict[TaskState, str] = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.ROUTING: "TASK_STATE_WORKING",
    TaskState.DISPATCHED: "TASK_STATE_WORKING",
    TaskState.RETRYING: "TASK_STATE_WORKING",
    TaskState.VERIFYING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
}

_S = TaskState
_LEGAL: dict[TaskState, frozenset[TaskState]] = {
    _S.SUBMITTED: frozenset({_S.ROUTING, _S.REJECTED, _S.CANCELED, _S.FAILED}),
    _S.ROUTING: frozenset({_S.DISPATCHED, _S.REJECTED, _S.FAILED, _S.CANCELED, _S.INPUT_REQUIRED}),
    _S.DISPATCHED: frozenset(
        {_S.VERIFYING, _S.RETRYING, _S.ROUTING, _S.INPUT_REQUIRED, _S.FAILED, _S.CANCELED}
    ),
    _S.RETRYING: frozenset({_S.DISPATCHED, _S.FAILED, _S.CANCELED}),
    _S.VERIFYING: frozenset({_S.COMPLETED, _S.ROUTING, _S.INPUT_REQUIRED, _S.FAILED, _S.CANCELED}),
    _S.INPUT_REQUIRED: frozenset({_S.ROUTING, _S.DISPATCHED, _S.COMPLETED, _S.FAILED, _S.CANCELED}),
}


class IllegalTransition(FailedPrecondition):
    reason = "ILLEGAL_TRANSITION"
    default_message = "illegal task state transition"


def check_transition(current: TaskState, new: TaskState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> new`` is allowed."""
    if new not in _LEGAL.get(current, frozenset()):
        raise IllegalTransition(f"task cannot go from {current.value} to {new.value}")


class TaskStep(Model):
    """One sub-task of a task: routed and verified on its own."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$")
    action: str = Field(default="", description="Required action; empty = extracted from text.")
    tags: list[str] = Field(default_factory=list, description="Tags the agent must carry.")
    text: str = Field(default="", description="Instruction for this step (defaults to the task's).")
    input: dict[str, Any] = Field(default_factory=dict, description="Extra input for this step.")


class TaskRequest(Model):
    """What a client submits: the request text, the goal, constraints and context."""

    task_id: str = Field(default_factory=lambda: new_id("task"), min_length=1, max_length=128)
    text: str = Field(min_length=1, max_length=100_000, description="The user's request.")
    goal: GoalAssertion | None = Field(default=None, description="Inline goal to anchor.")
    goal_id: str = Field(default="", description="A registered goal to anchor instead.")
    input: dict[str, Any] = Field(default_factory=dict, description="Structured input for the agents.")
    constraints: dict[str, Any] = Field(
        default_factory=dict, description="Explicit constraints (action, tags ...) added to extracted ones."
    )
    steps: list[TaskStep] = Field(default_factory=list, description="Sub-tasks; empty = one step.")
    user_id: str = Field(default="anonymous", max_length=256)
    session_id: str = Field(default="", max_length=256)
    trace_id: str = Field(default="", max_length=64, description="Empty = a new trace.")
    provenance: Provenance = Field(default_factory=lambda: Provenance(source="user", reliability_score=1.0))
    freshness_ttl: float = Field(default=300.0, ge=0)
    confidence_score: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_goal(self) -> TaskRequest:
        if self.goal is not None and self.goal_id and self.goal_id != self.goal.id:
            raise ValueError("goal_id and goal.id disagree; send one or the other")
        names = [s.name for s in self.steps]
        if len(names) != len(set(names)):
            raise ValueError("steps: step names must be unique")
        return self


class StepRecord(Model):
    """What happened in one step: the agent chosen, output, and timing."""

    name: str
    agent: str = ""
    attempts: int = 0
    output: Any = None
    confidence_score: float | None = None
    started_at: datetime = Field(default_factory=utcnow)
    duration_ms: float = 0.0
    status: str = "pending"


class Outcome(Model):
    """What the client gets back."""

    task_id: str
    trace_id: str
    state: TaskState
    output: Any = None
    goal_id: str = ""
    goal_verdict: GoalVerdict | None = Field(
        default=None, description="The last verification: a failed stage's, or the final one."
    )
    failed_stage: str = Field(default="", description="The goal stage that failed, if one did.")
    stage_verdicts: list[GoalVerdict] = Field(
        default_factory=list, description="Each goal stage verified, in order."
    )
    steps: list[StepRecord] = Field(default_factory=list)
    failures: list[FailureEvent] = Field(default_factory=list)
    resolutions: list[Resolution] = Field(default_factory=list)
    routing: list[dict[str, Any]] = Field(default_factory=list, description="Each routing decision.")
    reason: str = Field(default="", description="Why the task ended as it did, when not completed.")
    pending: dict[str, Any] = Field(
        default_factory=dict, description="For input_required: the clarification or handover packet."
    )
    audit_index: int = Field(default=0, description="Index of the last audit record of this task.")
    a2a_state: str = ""

    @model_validator(mode="after")
    def _a2a(self) -> Outcome:
        object.__setattr__(self, "a2a_state", A2A_STATE[self.state])
        return self
