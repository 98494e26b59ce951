"""TOOL_ERROR: An agent raised an error while handling the request.

Default resolution: Retry (bounded), then the next backup agent, then a human.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.TOOL_ERROR


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry (bounded), then the next backup agent, then a human."""
    return retry_then_backup(event, policy, "error")
