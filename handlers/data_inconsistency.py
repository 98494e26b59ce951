"""DATA_INCONSISTENCY: two sources disagree on the same fact.

Trigger: an output states a fact (a scalar field at any depth) that the request, the task's context or
    an earlier step stated with another value (e.g. price 100 vs 120).
Default resolution: Return the conflict with both values and their provenance, never merged
    silently; the task waits for the user's choice.
Configurable instead (``FailurePolicy.resolution``): use_backup (an arbitration agent),
    escalate_to_human, abort.
"""

from __future__ import annotations

import json

from middleware.failures import FailureEvent, FailurePolicy, FailureType, Resolution, ResolutionKind

TYPE = FailureType.DATA_INCONSISTENCY


def handle(event: FailureEvent, policy: FailurePolicy) -> Resolution:
    """Return the conflict with both values and their provenance, never merged silently; the task waits
    for the user's choice.
    """
    conflict = dict(event.context.get("conflict") or {})
    options = [
        {
            "id": f"value_{i}",
            "label": f"{json.dumps(v.get('value'), ensure_ascii=False)} from {v.get('source', '?')}"
            + (f" (at {v['path']} of step {v.get('step', '?')})" if v.get("path") else ""),
            "value": v.get("value"),
        }
        for i, v in enumerate(conflict.get("values") or [], start=1)
    ]
    return Resolution(
        kind=ResolutionKind.RETURN_CONFLICT,
        failure_type=event.type,
        reason=event.detail or "sources disagree",
        payload={
            "conflict": conflict,
            "question": f"Sources disagree on {conflict.get('fact', 'a fact')}; which value is right?",
            "options": options,
        },
    )
