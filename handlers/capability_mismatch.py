"""CAPABILITY_MISMATCH: no capability's contract allows the request.

Trigger: the router finds no live contract whose ``can_do`` (and tags, SLO) fit, or the action is in
    ``cannot_do``.
Default resolution: Abort before any agent runs (the task is REJECTED), with each candidate's
    rejection reason.
Configurable instead (``FailurePolicy.resolution``): escalate_to_human.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort

TYPE = FailureType.CAPABILITY_MISMATCH


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Abort before any agent runs (the task is REJECTED), with each candidate's rejection reason."""
    return abort(event, event.detail or "no capability allows the request")
