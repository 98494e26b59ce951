"""POLICY_VIOLATION: An output breaks a configured policy rule.

Default resolution: Quarantine the output (blocked, audited, alert raised); it never reaches the
user or the next agent.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

TYPE = FailureType.POLICY_VIOLATION


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Quarantine the output (blocked, audited, alert raised); it never reaches the user or the next agent."""
    return Resolution(
        kind=ResolutionKind.QUARANTINE,
        failure_type=event.type,
        reason=event.detail or "output violates policy",
        payload={"rule": event.context.get("rule", "")},
    )
