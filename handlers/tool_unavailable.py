"""TOOL_UNAVAILABLE: An agent could not be reached (connection refused, open circuit).

Default resolution: Switch to the next backup at once (retrying an unreachable agent rarely helps);
a human when none is left.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

from ._common import escalate

TYPE = FailureType.TOOL_UNAVAILABLE


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Switch to the next backup at once (retrying an unreachable agent rarely helps); a human when
    none is left."""
    if event.fallbacks:
        return Resolution(
            kind=ResolutionKind.USE_BACKUP,
            failure_type=event.type,
            agent=event.fallbacks[0],
            reason=f"{event.agent} unavailable; switching to backup {event.fallbacks[0]}",
        )
    return escalate(event, f"{event.agent} unavailable and no backup left")
