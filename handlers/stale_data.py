"""STALE_DATA: a message is older than its freshness TTL.

Trigger: an SMF result's ``created_at + freshness_ttl`` is in the past when the gateway receives it.
Default resolution: Retry to obtain fresh data, then the backup, then a human.
Configurable instead (``FailurePolicy.resolution``): use_backup, escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.STALE_DATA


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry to obtain fresh data, then the backup, then a human."""
    return retry_then_backup(event, policy, "stale data")
