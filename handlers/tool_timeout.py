"""TOOL_TIMEOUT: An agent did not answer within the deadline derived from its SLO.

Default resolution: Retry (bounded, exponential backoff with jitter), then the next backup agent,
then a human.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.TOOL_TIMEOUT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry (bounded, exponential backoff with jitter), then the next backup agent, then a human."""
    return retry_then_backup(event, policy, "timeout")
