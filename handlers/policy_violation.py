"""POLICY_VIOLATION: an output breaks a configured policy rule.

Trigger: a deny-listed term, a forbidden pattern, or a pluggable classifier flags the output.
Default resolution: Quarantine: the output is blocked (it never reaches the user or the next agent),
    audited, and an alert is raised.
Configurable instead (``FailurePolicy.resolution``): escalate_to_human (e.g. the compliance officer,
    without the content), abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

TYPE = FailureType.POLICY_VIOLATION


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Quarantine: the output is blocked (it never reaches the user or the next agent), audited, and an
    alert is raised.
    """
    return Resolution(
        kind=ResolutionKind.QUARANTINE,
        failure_type=event.type,
        reason=event.detail or "output violates policy",
        payload={
            "rule": event.context.get("rule", ""),
            "output_sha256": event.context.get("output_sha256", ""),
        },
    )
