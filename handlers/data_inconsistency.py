"""DATA_INCONSISTENCY: Two sources disagree on the same fact.

Default resolution: Return the conflict with both values and their provenance; never merge silently.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

TYPE = FailureType.DATA_INCONSISTENCY


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Return the conflict with both values and their provenance; never merge silently."""
    return Resolution(
        kind=ResolutionKind.RETURN_CONFLICT,
        failure_type=event.type,
        reason=event.detail or "sources disagree",
        payload={"conflict": event.context.get("conflict", {})},
    )
