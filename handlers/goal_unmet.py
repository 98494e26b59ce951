"""GOAL_UNMET: The final output fails one or more verification steps of the goal.

Default resolution: Escalate to a human with the failed steps (for low criticality: abort with the verdict).
Manual checks awaiting a person (``context["manual_pending"]``, no machine check failed) are always
escalated: only a person can complete them.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort, escalate

TYPE = FailureType.GOAL_UNMET


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Escalate to a human with the failed steps (for low criticality: abort with the verdict)."""
    del policy  # this handler does not depend on the policy
    if event.context.get("manual_pending") and not event.context.get("failed_steps"):
        return escalate(event, event.detail or "manual checks pending")
    if event.context.get("criticality") == "low":
        return abort(event, event.detail or "goal not met")
    return escalate(event, event.detail or "goal not met")
