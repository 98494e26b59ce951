"""Built-in failure handlers, one module per failure type.

Every handler is a pure function ``(FailureEvent, FailurePolicy) -> Resolution``: it
decides, it does not act. ``builtin_handlers()`` maps each failure type to its
handler; ``middleware.failures.FailureProcessor`` starts from it.
"""

from __future__ import annotations

from middleware.failures import FailureHandler, FailureType

from . import (
    capability_mismatch,
    context_ambiguity,
    data_inconsistency,
    goal_timeout,
    goal_unmet,
    intent_drift,
    policy_violation,
    schema_violation,
    stale_data,
    tool_error,
    tool_timeout,
    tool_unavailable,
)

__all__ = ["builtin_handlers"]


def builtin_handlers() -> dict[FailureType, FailureHandler]:
    """A fresh mapping from every failure type to its built-in handler."""
    return {
        FailureType.TOOL_TIMEOUT: tool_timeout.handle,
        FailureType.TOOL_UNAVAILABLE: tool_unavailable.handle,
        FailureType.TOOL_ERROR: tool_error.handle,
        FailureType.CONTEXT_AMBIGUITY: context_ambiguity.handle,
        FailureType.POLICY_VIOLATION: policy_violation.handle,
        FailureType.DATA_INCONSISTENCY: data_inconsistency.handle,
        FailureType.SCHEMA_VIOLATION: schema_violation.handle,
        FailureType.GOAL_UNMET: goal_unmet.handle,
        FailureType.GOAL_TIMEOUT: goal_timeout.handle,
        FailureType.CAPABILITY_MISMATCH: capability_mismatch.handle,
        FailureType.STALE_DATA: stale_data.handle,
        FailureType.INTENT_DRIFT: intent_drift.handle,
    }
