"""STALE_DATA: A message is older than its freshness TTL.

Default resolution: Retry to obtain fresh data, then the next backup, then a human.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import retry_then_backup

TYPE = FailureType.STALE_DATA


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Retry to obtain fresh data, then the next backup, then a human."""
    return retry_then_backup(event, policy, "stale data")
