"""SCHEMA_VIOLATION: Data crossing an agent boundary does not match the contract's schema.

Default resolution: An output that breaks the contract: retry once, then the next backup; bad input: abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort, retry_then_backup

TYPE = FailureType.SCHEMA_VIOLATION


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """An output that breaks the contract: retry once, then the next backup; bad input: abort."""
    if event.context.get("direction") == "input":
        return abort(event, event.detail or "input does not match the contract")
    if event.attempt <= min(1, policy.max_retries):
        return retry_then_backup(event, policy, "schema violation")
    return retry_then_backup(
        event.model_copy(update={"attempt": policy.max_retries + 1}), policy, "schema violation"
    )
