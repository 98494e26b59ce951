"""INTENT_DRIFT: an answer that no longer serves the user's goal.

Trigger: the result's ``intention_trace`` is deeper than ``MAX_INTENTION_DEPTH`` (5) or repeats a
    goal id; or the answer is outside the goal's ``intention_scope`` (a step action, agent tags or
    output fields the goal is not about: a freight quote for a replacement goal), as the intent
    judges decide (``middleware.drift``: rules by default, optionally a LangChain chat model).
Default resolution: Stop the drifting branch and escalate to a human to re-anchor the goal.
Configurable instead (``FailurePolicy.resolution``): abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import escalate

TYPE = FailureType.INTENT_DRIFT


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Stop the drifting branch and escalate to a human to re-anchor the goal."""
    return escalate(event, event.detail or "intention trace drifted from the user's goal")
