"""GOAL_UNMET: a goal stage, or the goal on the final output, fails verification.

Trigger: the goal engine reports failed verification steps (a stage as its step returns, or the
    goal's own steps on the final output), or manual checks awaiting a person.
Default resolution: Escalate to a human with the failed steps; for a low-criticality goal: abort
    with the verdict. Manual checks awaiting a person (``context["manual_pending"]``, no machine
    check failed) are always escalated: only a person can complete them.
Configurable instead (``FailurePolicy.resolution``): abort; or retry (the seed: "retry or escalate"):
    the step whose output failed runs again, up to ``max_retries`` times, then ``on_exhausted``
    (a person, as there is no backup for a goal).
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import abort, escalate

TYPE = FailureType.GOAL_UNMET


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Escalate to a human with the failed steps; for a low-criticality goal: abort with the verdict."""
    if event.context.get("manual_pending") and not event.context.get("failed_steps"):
        return escalate(event, event.detail or "manual checks pending")
    if event.context.get("criticality") == "low":
        return abort(event, event.detail or "goal not met")
    return escalate(event, event.detail or "goal not met")
