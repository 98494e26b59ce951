"""GOAL_UNMET: the final output fails verification steps of the goal.

Trigger: ``verify_goal`` on the final output reports failed steps.
Default resolution: Escalate to a human with the failed steps; for a low-criticality goal: abort
    with the verdict.
Configurable instead (``FailurePolicy.resolution``): abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort, configured, escalate

TYPE = FailureType.GOAL_UNMET


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Escalate to a human with the failed steps; for a low-criticality goal: abort with the verdict."""
    forced = configured(event, policy)
    if forced is not None:
        return forced
    if event.context.get("criticality") == "low":
        return abort(event, event.detail or "goal not met")
    return escalate(event, event.detail or "goal not met")
