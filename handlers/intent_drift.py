"""INTENT_DRIFT: An intention trace deeper than 5 or with a cycle.

Default resolution: Abort the drifting branch and escalate to a human to re-anchor the goal.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import escalate

TYPE = FailureType.INTENT_DRIFT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Abort the drifting branch and escalate to a human to re-anchor the goal."""
    del policy  # this handler does not depend on the policy
    return escalate(event, event.detail or "intention trace drifted from the user's goal")
