"""INTENT_DRIFT: an intention trace deeper than 5 or with a cycle.

Trigger: the result's ``intention_trace`` is deeper than ``MAX_INTENTION_DEPTH`` (5) or repeats a
    goal id.
Default resolution: Stop the drifting branch and escalate to a human to re-anchor the goal.
Configurable instead (``FailurePolicy.resolution``): abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import configured, escalate

TYPE = FailureType.INTENT_DRIFT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Stop the drifting branch and escalate to a human to re-anchor the goal."""
    forced = configured(event, policy)
    if forced is not None:
        return forced
    return escalate(event, event.detail or "intention trace drifted from the user's goal")
