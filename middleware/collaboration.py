"""The collaboration plan (003 §6): for a case the system cannot settle, it prepares the decision.

For a ``DATA_INCONSISTENCY`` (two sources disagree) or an unmet goal of ``high`` criticality,
the handover (or the conflict question) carries a :class:`CollaborationPlan`: what the person
should verify, the evidence the system already has — every value with its SMF provenance
(source, reliability, the step and agent it came from) — and a suggested reply. The person
decides; they do not search.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ._model import Model
from .failures import FailureEvent, FailureType
from .intake import detect_language
from .tasks import TaskRecord

__all__ = ["CollaborationPlan", "Evidence", "plan_for"]


class Evidence(Model):
    """One fact the system gathered, and where it comes from."""

    label: str
    value: Any = None
    source: str = ""
    reliability: float | None = None
    step: str = ""
    agent: str = ""


class CollaborationPlan(Model):
    """What to verify, the evidence at hand, and a reply to send once decided."""

    verify: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    suggested_reply: str = ""


def _step_evidence(task: TaskRecord) -> list[Evidence]:
    out = []
    for s in task.steps:
        if s.status != "completed":
            continue
        out.append(
            Evidence(
                label=f"output of step {s.name}",
                value=s.output,
                source=s.provenance.source if s.provenance else "",
                reliability=s.provenance.reliability_score if s.provenance else None,
                step=s.name,
                agent=s.agent,
            )
        )
    return out


def _chinese(task: TaskRecord) -> bool:
    """Whether the user writes Chinese: the language an intake agent found, else the request's
    own script (the rule of the handover packet's suggested reply)."""
    return (task.language or detect_language(task.request.text)) == "zh"


def plan_for(task: TaskRecord, event: FailureEvent) -> CollaborationPlan | None:
    """The plan for ``event`` on ``task``, or None when the case needs none. Its suggested
    reply is in the user's language (Chinese when the user writes Chinese)."""
    text = task.request.text[:120]
    zh = _chinese(task)
    if event.type is FailureType.DATA_INCONSISTENCY:
        conflict = dict(event.context.get("conflict") or {})
        fact = str(conflict.get("fact", "the fact"))
        path = str(conflict.get("path", ""))
        values = [v for v in conflict.get("values") or [] if isinstance(v, dict)]
        evidence = [
            Evidence(
                label=f"{fact} at {v.get('path') or '?'} according to {v.get('source', '?')}",
                value=v.get("value"),
                source=str(v.get("source", "")),
                reliability=v.get("reliability_score"),
                step=str(v.get("step", "")),
                agent=str(v.get("agent", "")),
            )
            for v in values
        ]
        sources = " and ".join(str(v.get("source", "?")) for v in values) or "the sources"
        where = f" ({path} of the answer)" if path else ""
        return CollaborationPlan(
            verify=[
                f"Check {fact}{where} at its system of record: {sources} disagree.",
                "Prefer the more reliable, more recent source unless the record says otherwise.",
                "If neither value is right, provide the correct one as the step's output.",
            ],
            evidence=evidence + _step_evidence(task),
            suggested_reply=(
                f"您好，关于您的申请“{text}”：我们正在与源系统核对 {fact}，核实后会给您准确的答复。"
                if zh
                else f"Hello, about your request “{text}”: we are confirming the {fact} with "
                "the source system and will come back to you with a verified answer."
            ),
        )
    if event.type is FailureType.GOAL_UNMET and event.context.get("criticality") == "high":
        failed = [str(s) for s in event.context.get("failed_steps") or []]
        manual = [str(s) for s in event.context.get("manual_pending") or []]
        return CollaborationPlan(
            verify=[f"Verification failed: {s}" for s in failed]
            + [f"Check by hand: {s}" for s in manual]
            + [f"Goal: {task.goal.description}" if task.goal else "The task's goal"],
            evidence=_step_evidence(task),
            suggested_reply=(
                f"您好，关于您的申请“{text}”：同事正在核对最后的细节，确认后会尽快联系您。"
                if zh
                else f"Hello, about your request “{text}”: a colleague is checking the last details "
                "before we confirm; you will hear from us shortly."
            ),
        )
    return None
