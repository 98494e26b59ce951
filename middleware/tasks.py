"""Tasks: what a client submits, the states a task moves through, and its outcome.

States map onto the A2A task states so A2A users recognise them::

    SUBMITTED ─► ROUTING ─► DISPATCHED ─► VERIFYING ─► COMPLETED
       │           │  ▲  ▲      │  ▲  │       │
       │           │  │  └──────┘  │  │       │          (next step / backup agent)
       │           │  │   RETRYING─┘◄─┘       │
       │           │  │                        │
       │           ▼  └─── INPUT_REQUIRED ◄────┘  (clarification, conflict, human;
       ▼        REJECTED        │                   resumed by Agency.resume)
    FAILED / CANCELED ◄─────────┘  (from any non-terminal state)

    SUBMITTED … VERIFYING ─► INTERRUPTED ─► ROUTING / VERIFYING (resumed) | CANCELED | FAILED
                              (its gateway died: another replica took the task over, or the
                               call that ran it was cut short; see ``middleware.takeover``)

Only the transitions in ``_LEGAL`` are allowed; an illegal one is a bug and raises
:class:`IllegalTransition`. :class:`TaskRecord` is the persisted state of one task
(see ``middleware.task_store``): enough to resume it on any gateway replica.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from ._model import Model, trusted
from .errors import FailedPrecondition
from .failures import FailureEvent, FailureType, Resolution
from .goals import GoalAssertion, GoalVerdict
from .plans import Plan
from .smf import Provenance, new_id, utcnow
from .usage import UsageTotals

__all__ = [
    "A2A_STATE",
    "LEGAL_TRANSITIONS",
    "IllegalTransition",
    "Outcome",
    "StepRecord",
    "TaskRecord",
    "TaskRequest",
    "TaskState",
    "TaskStep",
    "check_transition",
    "keep_outcome_json",
    "outcome_json",
]


class TaskState(StrEnum):
    SUBMITTED = "submitted"
    ROUTING = "routing"
    DISPATCHED = "dispatched"
    RETRYING = "retrying"
    VERIFYING = "verifying"
    INPUT_REQUIRED = "input_required"
    INTERRUPTED = "interrupted"
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
    # stopped without an outcome: someone must resume or cancel it (the caller's input)
    TaskState.INTERRUPTED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
}

_S = TaskState
#: Every legal transition. Terminal states have none.
LEGAL_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    _S.SUBMITTED: frozenset({_S.ROUTING, _S.REJECTED, _S.FAILED, _S.CANCELED, _S.INTERRUPTED}),
    _S.ROUTING: frozenset(
        {_S.DISPATCHED, _S.INPUT_REQUIRED, _S.REJECTED, _S.FAILED, _S.CANCELED, _S.INTERRUPTED}
    ),
    _S.DISPATCHED: frozenset(
        {_S.VERIFYING, _S.RETRYING, _S.ROUTING, _S.INPUT_REQUIRED, _S.FAILED, _S.CANCELED, _S.INTERRUPTED}
    ),
    _S.RETRYING: frozenset({_S.DISPATCHED, _S.INPUT_REQUIRED, _S.FAILED, _S.CANCELED, _S.INTERRUPTED}),
    _S.VERIFYING: frozenset(
        {_S.COMPLETED, _S.ROUTING, _S.INPUT_REQUIRED, _S.FAILED, _S.CANCELED, _S.INTERRUPTED}
    ),
    _S.INPUT_REQUIRED: frozenset({_S.ROUTING, _S.DISPATCHED, _S.VERIFYING, _S.FAILED, _S.CANCELED}),
    _S.INTERRUPTED: frozenset({_S.ROUTING, _S.VERIFYING, _S.FAILED, _S.CANCELED}),
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.REJECTED: frozenset(),
    _S.CANCELED: frozenset(),
}
_LEGAL = LEGAL_TRANSITIONS


class IllegalTransition(FailedPrecondition):
    reason = "ILLEGAL_TRANSITION"
    default_message = "illegal task state transition"


def check_transition(current: TaskState, new: TaskState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> new`` is allowed."""
    if new not in _LEGAL.get(current, frozenset()):
        raise IllegalTransition(
            f"task cannot go from {current.value} to {new.value}",
            details={"from": current.value, "to": new.value},
        )


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
        default_factory=dict,
        description=(
            "Explicit constraints (action, tags ...): with an action, the whole of them (the text"
            " is not read); without, they override what is read from the text."
        ),
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


#: The core's own working records (:class:`TaskRecord`, :class:`StepRecord`) are validated
#: when built and when read back from a store, not on each of the ~30 assignments the
#: pipeline makes per task: every assignment site is core code checked by mypy (strict), so
#: re-validating (and copying) each value again cost ~1 µs apiece on the hot path.
_WORKING_RECORD = ConfigDict(validate_assignment=False)


class StepRecord(Model):
    """What happened in one step: the agent chosen, output, and timing."""

    model_config = _WORKING_RECORD

    name: str
    agent: str = ""
    attempts: int = 0
    output: Any = None
    confidence_score: float | None = None
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    duration_ms: float = 0.0
    status: str = "pending"
    provenance: Provenance | None = Field(default=None, description="Source of the output.")
    fresh_until: datetime | None = Field(default=None, description="The output's freshness TTL ends here.")
    usage: UsageTotals | None = Field(default=None, description="What the agent's models spent in this step.")

    @classmethod
    def begin(cls, name: str) -> StepRecord:
        """A new step record (``name`` is a validated step's name), built without validation."""
        return trusted(
            cls,
            {
                "name": name,
                "agent": "",
                "attempts": 0,
                "output": None,
                "confidence_score": None,
                "started_at": utcnow(),
                "finished_at": None,
                "duration_ms": 0.0,
                "status": "pending",
                "provenance": None,
                "fresh_until": None,
                "usage": None,
            },
        )


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
    plan: dict[str, Any] = Field(
        default_factory=dict,
        description="The plan the gateway ran ({source, steps: [{name, action, after ...}]}); empty: none.",
    )
    usage: UsageTotals | None = Field(
        default=None, description="What the task's model calls spent: tokens, cost, per model (None: none)."
    )
    audit_index: int = Field(default=0, description="Index of the last audit record of this task.")
    a2a_state: str = ""

    @model_validator(mode="after")
    def _a2a(self) -> Outcome:
        object.__setattr__(self, "a2a_state", _a2a_state(self.state, self.pending))
        return self


#: An outcome's JSON as UTF-8 bytes (``model_dump_json`` is these bytes decoded).
_OUTCOME_JSON: Callable[[Outcome], bytes] = Outcome.__pydantic_serializer__.to_json

# The JSON kept for an outcome the pipeline returned (by id, while the outcome lives): the
# pipeline serialises the outcome to bound its size, and the gRPC edge sends the same bytes.
_KEPT_JSON: dict[int, tuple[weakref.ref[Outcome], bytes]] = {}


def outcome_json(outcome: Outcome) -> bytes:
    """``outcome``'s JSON as UTF-8 bytes (``model_dump_json``'s text, encoded).

    The bytes kept by :func:`keep_outcome_json` when there are (an outcome is not changed
    once the pipeline returned it), else serialised now.
    """
    kept = _KEPT_JSON.get(id(outcome))
    if kept is not None and kept[0]() is outcome:
        return kept[1]
    return _OUTCOME_JSON(outcome)


def keep_outcome_json(outcome: Outcome, measured: Outcome, data: bytes) -> None:
    """Keep ``outcome``'s JSON, made from ``data``, the JSON of ``measured``, for :func:`outcome_json`.

    ``measured`` is the same outcome before its last records were durable: it may differ
    from ``outcome`` in ``audit_index`` alone (the index of the task's last record), which
    is the JSON's last field but one. Anything else different (compared value by value, the
    containers' items by identity first) and nothing is kept: the edge serialises ``outcome``.
    """
    values = dict(outcome.__dict__)
    values["audit_index"] = measured.audit_index
    if values != measured.__dict__:
        return
    end = b'"a2a_state":"' + outcome.a2a_state.encode() + b'"}'
    old, new = b',"audit_index":%d,' % measured.audit_index, b',"audit_index":%d,' % outcome.audit_index
    if not data.endswith(old + end):
        return
    key = id(outcome)
    _KEPT_JSON[key] = (
        weakref.ref(outcome, lambda _: _KEPT_JSON.pop(key, None)),
        data[: len(data) - len(old) - len(end)] + new + end,
    )


def _a2a_state(state: TaskState, pending: dict[str, Any]) -> str:
    if state is TaskState.INPUT_REQUIRED and pending.get("kind") == "approval":
        return "TASK_STATE_AUTH_REQUIRED"  # waits for a person's authorization, not for the user
    return A2A_STATE[state]


class Transition(Model):
    """One state change, when it happened and on which gateway."""

    from_state: TaskState
    to_state: TaskState
    at: datetime = Field(default_factory=utcnow)
    node: str = ""

    @classmethod
    def now(cls, from_state: TaskState, to_state: TaskState, node: str) -> Transition:
        """The pipeline's own transition, happening now (built without validation)."""
        return trusted(cls, {"from_state": from_state, "to_state": to_state, "at": utcnow(), "node": node})


class TaskRecord(Model):
    """The persisted state of one task: where it is, what is done, what it waits for.

    ``version`` grows by one on every save; stores compare it so two writers (two
    gateway replicas resuming the same task) cannot both win.
    """

    model_config = _WORKING_RECORD

    request: TaskRequest
    goal: GoalAssertion | None = None
    trace_id: str
    client: str = Field(
        default="", description="The authenticated client that submitted it (empty: tokens off)."
    )
    tenant: str = Field(default="", description="The tenant the task belongs to (empty: no tenants).")
    usage: UsageTotals | None = Field(default=None, description="What its model calls spent so far.")
    state: TaskState = TaskState.SUBMITTED
    version: int = Field(default=0, ge=0)
    step_index: int = Field(default=0, ge=0, description="The step the task is at (len = verification).")
    steps: list[StepRecord] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)
    failures: list[FailureEvent] = Field(default_factory=list)
    resolutions: list[Resolution] = Field(default_factory=list)
    routing: list[dict[str, Any]] = Field(default_factory=list)
    pending: dict[str, Any] = Field(default_factory=dict)
    step_inputs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Extra input per step from resumes (e.g. a clarification)."
    )
    held: dict[str, Any] = Field(
        default_factory=dict, description="A held output (ambiguous, conflicting) a resume may accept."
    )
    approvals: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Approvals granted, per step: who, role, when, why."
    )
    output: Any = None
    verdict: GoalVerdict | None = None
    stage_verdicts: list[GoalVerdict] = Field(default_factory=list, description="Each goal stage verified.")
    reason: str = ""
    last_index: int = 0
    last_source: Provenance
    intent: str = Field(default="", description="The user's intent, as an intake agent extracted it.")
    language: str = Field(default="", description="The user's language (zh, en ...), for replies.")
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="Context extracted by an intake agent (or carried over from the session); every "
        "agent's input holds it.",
    )
    anchor_goal: str = Field(default="", description="A goal an intake agent asked to anchor (transient).")
    plan: Plan | None = Field(
        default=None,
        description="The plan the gateway runs (the goal's, the planner's); None: the request's steps.",
    )
    plan_source: str = Field(
        default="",
        description="Where the plan came from (goal:<id>, intake, planner) or none; empty: not decided yet.",
    )
    active_ms: float = Field(default=0.0, ge=0, description="Time spent running (not waiting).")
    rewinds: int = Field(default=0, ge=0, description="Steps redone because their output went stale.")
    transitions: list[Transition] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def task_id(self) -> str:
        return self.request.task_id

    @classmethod
    def start(
        cls,
        request: TaskRequest,
        goal: GoalAssertion | None,
        trace_id: str,
        *,
        client: str = "",
        tenant: str = "",
    ) -> TaskRecord:
        """A new task of a validated ``request`` (and ``goal``), built without validating them
        again; ``trace_id`` is the request's (validated) or a new one."""
        source = request.provenance
        now = utcnow()
        return trusted(
            cls,
            {
                "request": request,
                "goal": goal,
                "trace_id": trace_id,
                "client": client,
                "tenant": tenant,
                "usage": None,
                "state": TaskState.SUBMITTED,
                "version": 0,
                "step_index": 0,
                "steps": [],
                "outputs": {},
                "failures": [],
                "resolutions": [],
                "routing": [],
                "pending": {},
                "step_inputs": {},
                "held": {},
                "approvals": {},
                "output": None,
                "verdict": None,
                "stage_verdicts": [],
                "reason": "",
                "last_index": 0,
                "last_source": trusted(
                    Provenance, {"source": source.source, "reliability_score": source.reliability_score}
                ),
                "intent": "",
                "language": "",
                "context": {},
                "anchor_goal": "",
                "plan": None,
                "plan_source": "",
                "active_ms": 0.0,
                "rewinds": 0,
                "transitions": [],
                "created_at": now,
                "updated_at": now,
            },
        )

    def step_record(self, name: str) -> StepRecord | None:
        for record in reversed(self.steps):
            if record.name == name:
                return record
        return None

    def failure_event(
        self,
        ftype: FailureType,
        *,
        step: str,
        detail: str,
        agent: str = "",
        attempt: int = 1,
        fallbacks: list[str] | None = None,
        context: dict[str, Any] | None = None,
    ) -> FailureEvent:
        """A failure event of this task.

        Args:
            ftype: The failure type.
            step: The step it happened at (``""``: none).
            detail: What happened, for people.
            agent: The agent involved (``""``: none, e.g. a routing refusal).
            attempt: The how-many-th attempt of the step failed.
            fallbacks: The agents still left to switch to.
            context: Type-specific detail (handlers read it).
        """
        return FailureEvent(
            type=ftype,
            task_id=self.task_id,
            trace_id=self.trace_id,
            step=step,
            agent=agent,
            attempt=attempt,
            fallbacks=list(fallbacks or []),
            detail=detail,
            context=context or {},
        )

    def goal_unmet_event(self, verdict: GoalVerdict, step: str) -> FailureEvent:
        """The GOAL_UNMET event for a failed (or manually pending) verification at ``step``."""
        assert self.goal is not None
        goal = self.goal
        where = f"stage {verdict.stage} of goal {goal.id}" if verdict.stage else f"goal {goal.id}"
        if verdict.failed_steps:
            failed = "; ".join(f"{s.step}: {s.reason}" for s in verdict.failed_steps)
            detail = f"{where} not met: {failed}"
        else:
            detail = f"{where} awaits manual checks: " + "; ".join(s.step for s in verdict.manual_steps)
        context: dict[str, Any] = {
            "criticality": goal.criticality,
            "stage": verdict.stage,
            "failed_steps": [s.step for s in verdict.failed_steps],
        }
        if verdict.manual_steps:
            context["manual_pending"] = [s.step for s in verdict.manual_steps]
        record = self.step_record(step)
        agent = record.agent if record is not None else ""  # the agent whose output failed
        # the how-many-th time this step's output failed the goal (a retry policy counts these)
        attempt = 1 + sum(1 for f in self.failures if f.type is FailureType.GOAL_UNMET and f.step == step)
        return self.failure_event(
            FailureType.GOAL_UNMET, step=step, agent=agent, attempt=attempt, detail=detail, context=context
        )

    def complete_step(
        self,
        name: str,
        output: Any,
        *,
        agent: str = "",
        confidence: float | None = None,
        provenance: Provenance | None = None,
        fresh_until: datetime | None = None,
    ) -> StepRecord:
        """The output of step ``name`` (the current one) is final: record it and move on."""
        record = self.step_record(name)
        if record is None:
            record = StepRecord.begin(name)
            self.steps.append(record)
        record.agent = agent or record.agent
        record.output, record.confidence_score, record.status = output, confidence, "completed"
        record.finished_at, record.provenance, record.fresh_until = utcnow(), provenance, fresh_until
        self.outputs[name] = output
        if self.held.get("step", name) == name:  # a parallel branch's held answer stays its own
            self.held = {}
        self.step_index += 1
        return record

    def snapshot(self) -> dict[str, Any]:
        """The conversation state a human taking over needs: request, goal, outputs so far."""
        return {
            "task_id": self.task_id,
            "text": self.request.text,
            "user_id": self.request.user_id,
            "session_id": self.request.session_id,
            "input": self.request.input,
            "intent": self.intent,
            "language": self.language,
            "context": self.context,
            "goal": self.goal.model_dump(mode="json") if self.goal else None,
            "state": self.state.value,
            "outputs": self.outputs,
            "failures": [
                {"type": f.type.value, "step": f.step, "agent": f.agent, "detail": f.detail}
                for f in self.failures
            ],
        }

    def outcome(self, state: TaskState | None = None) -> Outcome:
        """What a client sees of this task now (``state``: as it will be in that state).

        Built from the record's own (validated) values without validating them again; its
        containers are copies, as validation would make them (the record goes on changing).
        """
        state = self.state if state is None else state
        return trusted(
            Outcome,
            {
                "task_id": self.request.task_id,
                "trace_id": self.trace_id,
                "state": state,
                "output": self.output,
                "goal_id": self.goal.id if self.goal else "",
                "goal_verdict": self.verdict,
                "failed_stage": next((v.stage for v in self.stage_verdicts if not v.passed), ""),
                "stage_verdicts": list(self.stage_verdicts),
                "steps": list(self.steps),
                "failures": list(self.failures),
                "resolutions": list(self.resolutions),
                "routing": [dict(r) for r in self.routing],
                "reason": self.reason,
                "pending": dict(self.pending),
                "plan": {"source": self.plan_source, "steps": self.plan.summary()} if self.plan else {},
                "usage": self.usage.model_copy(deep=True) if self.usage is not None else None,
                "audit_index": self.last_index,
                "a2a_state": _a2a_state(state, self.pending),
            },
        )
