"""TOOL_UNAVAILABLE: an agent could not be reached.

Trigger: connection refused / ``Unavailable`` from the agent, no implementation attached, or its
    circuit breaker is open.
Default resolution: Switch to the backup at once (retrying an unreachable agent rarely helps); a
    human when none is left.
Configurable instead (``FailurePolicy.resolution``): retry (bounded, backoff), escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import backup

TYPE = FailureType.TOOL_UNAVAILABLE


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Switch to the backup at once (retrying an unreachable agent rarely helps); a human when none is
    left.
    """
    return backup(event, policy, "unavailable")
