"""INTENT_DRIFT: an answer that no longer serves the user's goal.

Trigger: at routing, before dispatch, the step's action (or every agent that could take it) is
    outside the goal's ``intention_scope`` (a freight quote for a replacement goal: nothing runs);
    the result's ``intention_trace`` is deeper than ``MAX_INTENTION_DEPTH`` (5), repeats a goal id
    or does not start at the task's goal; or the answer is outside the scope (output fields the
    goal is not about), as the intent judges decide (``middleware.drift``: rules by default,
    optionally a LangChain chat model).
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
