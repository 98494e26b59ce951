"""The goal assertion model and the verdicts verification produces.

A goal is strict: a bad one is refused at registration with every problem named
(each bad step by its index, each bad sentence with why it is not a check).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .._model import Model
from ..plans import Plan
from .steps import StepSpec

__all__ = [
    "GoalAssertion",
    "GoalStage",
    "GoalVerdict",
    "IntentionScope",
    "StepVerdict",
    "TargetCapability",
]

_GOAL_ID_RE = re.compile(r"^[A-Z][A-Z0-9_]{2,63}$")
_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class GoalStage(Model):
    """A checkpoint of a goal, verified as soon as the task step it is bound to returns.

    Example: stage ``kyc`` bound to step ``kyc_report`` checks the KYC report before
    the payment review runs, so a bad report is caught where it happens.
    """

    name: str = Field(pattern=_NAME_RE, description="Stage name, shown in the outcome when it fails.")
    step: str = Field(pattern=_NAME_RE, description="Name of the task step whose output this stage checks.")
    description: str = Field(default="", max_length=2000)
    verification_steps: list[StepSpec] = Field(min_length=1, max_length=100)


class TargetCapability(Model):
    """A capability the goal relies on, and (optionally) the SLA it promises, for linting."""

    name: str = Field(min_length=1, max_length=256, description="Contract name or name@version.")
    sla_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="Business SLA of this capability; else the catalog's SLO."
    )


class IntentionScope(Model):
    """What the outputs of a goal's steps must be about (seed section 3.4, 4.4: a replacement
    goal answered with a freight quote has drifted, however shallow its intention trace).

    An answer is in scope when the agent that gave it may do one of ``actions`` (its
    contract's ``can_do``) or carries one of ``tags``, and its output (a JSON object) holds
    no field listed in ``forbidden_fields``; when ``fields`` is set, it must also hold at
    least one of them. Empty lists do not constrain.
    """

    actions: list[str] = Field(default_factory=list, max_length=100, description="Actions in scope.")
    tags: list[str] = Field(default_factory=list, max_length=100, description="Agent tags in scope.")
    fields: list[str] = Field(
        default_factory=list, max_length=100, description="Output fields an in-scope answer may carry."
    )
    forbidden_fields: list[str] = Field(
        default_factory=list, max_length=100, description="Output fields that show the answer drifted."
    )


class GoalAssertion(Model):
    """A user goal, anchored when a task starts and verified as it runs and when it ends.

    Attributes:
        id: Global goal id such as ``GOAL_FINANCE_001``.
        description: What the user wants, in words.
        verification_steps: Checks on the final output (structured steps or sentences).
        timeout_seconds: Past this the task fails with GOAL_TIMEOUT (1..3600, default 300).
        criticality: ``low`` | ``medium`` | ``high`` (how an unmet goal is handled).
        stages: Checkpoints bound to task steps, verified as each step returns.
        target_capabilities: Capabilities the goal targets (for ``agency goal lint``).
        time_critical: Every message of its tasks must carry a ``freshness_ttl``.
        intention_scope: What its steps' outputs must be about (else INTENT_DRIFT).
        plan: The steps the gateway runs for it when a task names no steps (``middleware.plans``);
            its stages bind to the plan's steps.
    """

    id: str = Field(description="Global goal id such as ``GOAL_FINANCE_001``.")
    description: str = Field(min_length=1, max_length=2000)
    # ``stages`` is declared before ``verification_steps`` so the latter's validator sees it.
    stages: list[GoalStage] = Field(default_factory=list, max_length=50)
    verification_steps: list[StepSpec] = Field(default_factory=list, max_length=100)
    timeout_seconds: int = Field(default=300, ge=1, le=3600)
    criticality: Literal["low", "medium", "high"] = "medium"
    target_capabilities: list[TargetCapability] = Field(default_factory=list, max_length=100)
    time_critical: bool = Field(
        default=False, description="Every message of its tasks must carry a freshness_ttl."
    )
    intention_scope: IntentionScope | None = Field(
        default=None, description="What its steps' outputs must be about (else INTENT_DRIFT)."
    )
    plan: Plan | None = Field(
        default=None, description="The steps the gateway runs for it when a task names none."
    )
    tenant: str = Field(
        default="",
        max_length=63,
        description="The tenant whose tasks may anchor it (empty: every task; middleware.tenancy).",
    )

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _GOAL_ID_RE.match(v):
            raise ValueError("must be upper-case letters, digits and _ (e.g. GOAL_FINANCE_001)")
        return v

    @field_validator("target_capabilities", mode="before")
    @classmethod
    def _targets(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"name": t} if isinstance(t, str) else t for t in v]
        return v

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: list[GoalStage]) -> list[GoalStage]:
        names: dict[str, int] = {}
        steps: dict[str, int] = {}
        for i, stage in enumerate(v):
            if stage.name in names:
                raise ValueError(
                    f"stage {stage.name!r} is declared twice (stages {names[stage.name]} and {i})"
                )
            if stage.step in steps:
                raise ValueError(
                    f"step {stage.step!r} is bound to two stages ({v[steps[stage.step]].name!r} and "
                    f"{stage.name!r}); put all its checks in one stage"
                )
            names[stage.name], steps[stage.step] = i, i
        return v

    @field_validator("verification_steps")
    @classmethod
    def _some_check(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if not v and not info.data.get("stages"):
            raise ValueError("a goal needs at least one verification step (or a stage with steps)")
        return v

    @model_validator(mode="after")
    def _plan_fits(self) -> GoalAssertion:
        if self.plan is None:
            return self
        names = self.plan.names()
        for i, step in enumerate(self.plan.steps):
            if not step.action or step.action.startswith("@"):
                raise ValueError(f"plan.steps[{i}].action: required (the action the step asks for)")
            scope = self.intention_scope.actions if self.intention_scope is not None else []
            if scope and step.action not in scope:
                raise ValueError(
                    f"plan.steps[{i}].action: {step.action} is outside the goal's intention_scope.actions"
                )
        for i, stage in enumerate(self.stages):
            if stage.step not in names:
                raise ValueError(
                    f"stages[{i}].step: stage {stage.name!r} is bound to step {stage.step!r}, which the "
                    f"plan does not have (steps: {', '.join(names)})"
                )
        return self

    def stage_for(self, step: str) -> GoalStage | None:
        """The stage bound to task step ``step``, if any."""
        for stage in self.stages:
            if stage.step == step:
                return stage
        return None

    @property
    def has_manual_steps(self) -> bool:
        """Whether some step needs a person (the goal can then only end pending)."""
        return any(s.kind == "manual" for s in self.verification_steps) or any(
            s.kind == "manual" for st in self.stages for s in st.verification_steps
        )


class StepVerdict(Model):
    """The verdict of one verification step, with expected vs actual and why.

    ``status`` is ``passed``, ``failed`` or ``manual`` (a person must confirm; a manual
    step never passes by itself).
    """

    step: str
    kind: str
    passed: bool
    status: Literal["passed", "failed", "manual"] = "passed"
    expected: Any = None
    actual: Any = None
    reason: str = ""


class GoalVerdict(Model):
    """The result of verifying one goal (or one of its stages) against one output.

    ``status`` is ``passed``, ``failed`` (some machine check failed) or
    ``pending_manual`` (every machine check passed, some manual check awaits a person).
    ``passed`` is true only for ``passed``.
    """

    goal_id: str
    passed: bool
    status: Literal["passed", "failed", "pending_manual"] = "passed"
    stage: str = Field(default="", description="The stage verified; empty for the final verification.")
    steps: list[StepVerdict]
    duration_ms: float = 0.0

    @property
    def failed_steps(self) -> list[StepVerdict]:
        """The steps that failed (manual ones excluded)."""
        return [s for s in self.steps if s.status == "failed"]

    @property
    def manual_steps(self) -> list[StepVerdict]:
        """The steps awaiting a person."""
        return [s for s in self.steps if s.status == "manual"]
