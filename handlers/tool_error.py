"""TOOL_ERROR: an agent raised an error while handling the request.

Trigger: the agent raised (any exception other than a timeout or a connection error).
Default resolution: Retry (bounded, backoff with jitter), then the backup agent, then a human.
Configurable instead (``FailurePolicy.resolution``): use_backup, escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.TOOL_ERROR


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry (bounded, backoff with jitter), then the backup agent, then a human."""
    return retry_then_backup(event, policy, "error")
