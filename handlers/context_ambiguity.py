"""CONTEXT_AMBIGUITY: the output hedges and the agent is unsure.

Trigger: the output contains a hedging word ("可能", "大概", "probably", "maybe" …, configurable in
    ``DetectorConfig``) and its confidence is below 0.7.
Default resolution: Ask the user a structured clarification: a question with options (never an open
    question); a human when there are no options.
Configurable instead (``FailurePolicy.resolution``): use_backup (e.g. a knowledge-graph agent that
    completes the context), retry, escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution

from ._common import ask

TYPE = FailureType.CONTEXT_AMBIGUITY


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Ask the user a structured clarification: a question with options (never an open question); a
    human when there are no options.
    """
    options = [dict(o) for o in event.context.get("options") or []]
    question = str(event.context.get("question") or "Please confirm which option you mean.")
    return ask(event, event.detail or "the answer is ambiguous", question, options)
