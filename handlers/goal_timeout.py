"""GOAL_TIMEOUT: the task ran past its goal's ``timeout_seconds``.

Trigger: the active time of the task exceeds the goal's ``timeout_seconds``.
Default resolution: Escalate to a human with the state reached so far.
Configurable instead (``FailurePolicy.resolution``): abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import escalate

TYPE = FailureType.GOAL_TIMEOUT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Escalate to a human with the state reached so far."""
    return escalate(event, event.detail or "goal timed out")
