"""CONTEXT_AMBIGUITY: the output hedges and the agent is unsure.

Trigger: the output contains a hedging word ("可能", "大概", "probably", "maybe" …, configurable in
    ``DetectorConfig``) and its confidence is below 0.7.
    Also: a plan step whose input the task cannot build (``missing`` in the context: the fields), and a
    plan the gateway refused (``plan_refused``: the reasons, with the planner's question if it asked one).
Default resolution: Ask the user a structured clarification: a question with options (never an open
    question); for missing input, a question naming the fields to give; a human when there are no
    options.
Configurable instead (``FailurePolicy.resolution``): use_backup (e.g. a knowledge-graph agent that
    completes the context), retry, escalate_to_human, abort.
"""

from __future__ import annotations

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

from ._common import ask

TYPE = FailureType.CONTEXT_AMBIGUITY


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Ask the user a structured clarification: a question with options (never an open question); a
    human when there are no options.
    """
    missing = event.context.get("missing")
    if isinstance(missing, list) and missing:  # named fields: the user is asked for their values
        return Resolution(
            kind=ResolutionKind.ASK_CLARIFICATION,
            failure_type=event.type,
            reason=event.detail or "input is missing",
            payload={
                "question": str(event.context.get("question") or "Please give the missing input."),
                "missing": missing,
                "schemas": dict(event.context.get("schemas") or {}),
            },
        )
    options = [dict(o) for o in event.context.get("options") or []]
    question = str(event.context.get("question") or "Please confirm which option you mean.")
    return ask(event, event.detail or "the answer is ambiguous", question, options)
