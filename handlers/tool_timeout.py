"""TOOL_TIMEOUT: an agent did not answer within its deadline.

Trigger: dispatch waited ``slo_latency_ms * deadline_factor`` and got no answer.
Default resolution: Retry (bounded by ``max_retries``, exponential backoff with jitter), then the
    configured backup or the router's next fallback, then a human.
Configurable instead (``FailurePolicy.resolution``): use_backup (at once), escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.TOOL_TIMEOUT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry (bounded by ``max_retries``, exponential backoff with jitter), then the configured backup
    or the router's next fallback, then a human.
    """
    return retry_then_backup(event, policy, "timeout")
