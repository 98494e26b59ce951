"""CAPABILITY_MISMATCH: No live capability's contract allows the request.

Default resolution: Abort before any agent runs, with each candidate's rejection reason.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort

TYPE = FailureType.CAPABILITY_MISMATCH


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Abort before any agent runs, with each candidate's rejection reason."""
    del policy  # this handler does not depend on the policy
    return abort(event, event.detail or "no capability allows the request")
