"""Goal assertions: the user's goal as machine-checkable steps, verified on outputs.

A goal is anchored when a task starts, its stages are verified as the task steps
they are bound to return, and its own steps are verified on the final output.
Each verification step is a structured object (a ``kind`` plus arguments, see
:mod:`.steps`); short English or Chinese sentences are accepted for the common
cases (:mod:`.sentences`), and a sentence that is not a machine check is refused
unless marked manual. Custom checks are registered by the user (:mod:`.checks`).
Goals are kept in a :class:`GoalStore` and linted before they go live (:mod:`.lint`).
"""

from .checks import CheckRegistry, CheckResult, RegisteredCheck
from .goal_store import GoalStore
from .memory_goal_store import MemoryGoalStore
from .model import GoalAssertion, GoalStage, GoalVerdict, IntentionScope, StepVerdict, TargetCapability
from .sentences import SentenceError, coerce_step, parse_step_sentence
from .stage_bindings import check_stage_bindings, stage_binding_problems
from .steps import (
    STEP_KINDS,
    AllOfStep,
    ContainsStep,
    CustomStep,
    EveryItemStep,
    JsonPathStep,
    JsonSchemaStep,
    LengthStep,
    ManualStep,
    NotContainsStep,
    RegexStep,
    StepSpec,
    VerificationStep,
    step_label,
)
from .verifier import StagedVerifier, Verifier, text_of, verify_goal

__all__ = [
    "STEP_KINDS",
    "AllOfStep",
    "CheckRegistry",
    "CheckResult",
    "ContainsStep",
    "CustomStep",
    "EveryItemStep",
    "GoalAssertion",
    "GoalStage",
    "GoalStore",
    "GoalVerdict",
    "IntentionScope",
    "JsonPathStep",
    "JsonSchemaStep",
    "LengthStep",
    "ManualStep",
    "MemoryGoalStore",
    "NotContainsStep",
    "RegexStep",
    "RegisteredCheck",
    "SentenceError",
    "StagedVerifier",
    "StepSpec",
    "StepVerdict",
    "TargetCapability",
    "VerificationStep",
    "Verifier",
    "check_stage_bindings",
    "coerce_step",
    "parse_step_sentence",
    "stage_binding_problems",
    "step_label",
    "text_of",
    "verify_goal",
]
