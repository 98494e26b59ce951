"""SCHEMA_VIOLATION: data crossing an agent boundary breaks the contract's schema.

Trigger: the input sent to, or the output returned by, an agent does not validate against its
    contract's JSON Schema.
Default resolution: For an output: retry once, then the backup, then a human; for an input (the
    agent is not at fault): abort.
Configurable instead (``FailurePolicy.resolution``): use_backup, escalate_to_human, abort (retry
    with another cap via ``max_retries``).
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort, retry_then_backup

TYPE = FailureType.SCHEMA_VIOLATION


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """For an output: retry once, then the backup, then a human; for an input (the agent is not at
    fault): abort.
    """
    if event.context.get("direction") == "input":
        return abort(event, event.detail or "input does not match the contract")
    capped = policy.model_copy(update={"max_retries": min(1, policy.max_retries)})
    return retry_then_backup(event, capped, "schema violation")
