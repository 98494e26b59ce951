"""CONTEXT_AMBIGUITY: The output hedges ("maybe", "可能") with confidence below 0.7.

Default resolution: Ask the user a structured clarification (a question with options, never an open question).
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

TYPE = FailureType.CONTEXT_AMBIGUITY


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Ask the user a structured clarification (a question with options, never an open question)."""
    options = list(event.context.get("options") or [])
    return Resolution(
        kind=ResolutionKind.ASK_CLARIFICATION,
        failure_type=event.type,
        reason=event.detail or "the answer is ambiguous",
        payload={
            "question": event.context.get("question") or "Please confirm which option you mean.",
            "options": options,
        },
    )
