"""What a task waiting on someone carries, and the answers that resume it.

A task stops in ``input_required`` for one of three reasons, each a structured
``pending`` payload (never an open question):

* ``clarification`` – a question with options for the user (CONTEXT_AMBIGUITY);
* ``missing_input`` – a plan step's input the task cannot build: the fields to give
  (CONTEXT_AMBIGUITY; answered with ``input``, the values joining the task's context);
* ``conflict`` – two sources disagree; both values with their provenance, as options
  (DATA_INCONSISTENCY);
* ``human_handover`` – a :class:`HandoverPacket` for a colleague: the conversation
  state, the completed steps with timestamps, the blocking point and a suggested reply.

``Agency.resume`` takes the user's ``answer`` (an option id), the ``input`` asked for, or
a human's :class:`HumanDecision` and continues where the task stopped.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from ._model import Model
from .errors import InvalidInput

__all__ = [
    "ACCEPT",
    "RETRY",
    "Blocking",
    "Clarification",
    "CompletedStep",
    "HandoverPacket",
    "HumanDecision",
    "InputRequest",
    "Option",
    "check_answer",
    "suggested_reply",
]

#: Option id that takes the held (ambiguous) output as it is.
ACCEPT = "accept"
#: Option id that asks the agent again, with the question and answer added to its input.
RETRY = "retry"


class Option(Model):
    """One choice offered to the user."""

    id: str = Field(min_length=1, max_length=64)
    label: str = Field(min_length=1, max_length=2000)
    value: Any = None


class Clarification(Model):
    """A structured question: at least two options, the answer must be one of them."""

    kind: Literal["clarification", "conflict"] = "clarification"
    step: str
    question: str = Field(min_length=1)
    options: list[Option] = Field(min_length=2)
    failure_type: str = ""
    conflict: dict[str, Any] = Field(default_factory=dict, description="For conflicts: fact, values.")
    plan: dict[str, Any] | None = Field(
        default=None, description="The collaboration plan (middleware.collaboration), for conflicts."
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> Clarification:
        ids = [o.id for o in self.options]
        if len(ids) != len(set(ids)):
            raise ValueError("options: ids must be unique")
        return self


class InputRequest(Model):
    """What a plan step needs and nobody gave: the fields to answer with (``resume(input=...)``)."""

    kind: Literal["missing_input"] = "missing_input"
    step: str
    question: str = Field(min_length=1)
    fields: list[str] = Field(min_length=1, description="The names to answer by.")
    missing: list[dict[str, Any]] = Field(
        default_factory=list, description="Each missing input: field, the references tried, answer_as."
    )
    schemas: dict[str, Any] = Field(default_factory=dict, description="JSON Schema per field, when known.")
    failure_type: str = ""


class CompletedStep(Model):
    name: str
    agent: str
    status: str
    started_at: datetime
    finished_at: datetime | None = None
    attempts: int = 0


class Blocking(Model):
    """Where and why the task stopped."""

    step: str
    agent: str = ""
    failure_type: str
    detail: str
    attempts: int = 1


class HandoverPacket(Model):
    """Everything a human taking over needs; nothing needs to be asked again."""

    kind: Literal["human_handover"] = "human_handover"
    task_id: str
    state: dict[str, Any] = Field(description="Conversation state snapshot: request, input, outputs.")
    completed_steps: list[CompletedStep]
    blocking_point: Blocking
    failure: dict[str, Any] = Field(default_factory=dict, description="The failure event that blocked it.")
    suggested_reply: str
    decisions: list[str] = Field(
        default_factory=lambda: ["retry", "use_agent", "provide_output", "approve", "abort", "cancel"],
        description="What ``HumanDecision.action`` may be.",
    )
    plan: dict[str, Any] | None = Field(
        default=None, description="The collaboration plan (middleware.collaboration), for hard cases."
    )


class HumanDecision(Model):
    """A human's answer to a handover packet.

    Actions: ``retry`` the blocked step (routed again), ``use_agent`` (run it on
    ``agent``), ``provide_output`` (the human supplies the step's output, verified like an
    agent's), ``approve`` (the blocked step's output stands as it is: the human vouches for
    it, e.g. after manual checks), ``abort`` (the task fails) or ``cancel`` (the task is
    canceled).
    """

    action: Literal["retry", "use_agent", "provide_output", "approve", "abort", "cancel"]
    agent: str = ""
    output: Any = None
    note: str = Field(default="", max_length=4000)
    by: str = Field(default="", max_length=256, description="Who decided (for the audit log).")

    @model_validator(mode="after")
    def _arguments(self) -> HumanDecision:
        if self.action == "use_agent" and not self.agent:
            raise ValueError("agent: required when action is use_agent")
        if self.action == "provide_output" and self.output is None:
            raise ValueError("output: required when action is provide_output")
        return self


def check_answer(pending: Clarification, answer: str) -> Option:
    """The option ``answer`` names; anything else is an :class:`InvalidInput`."""
    for option in pending.options:
        if option.id == answer:
            return option
    ids = ", ".join(o.id for o in pending.options)
    raise InvalidInput.single("answer", f"must be one of the offered options: {ids}", what="resume")


_REPLIES = {
    "TOOL_TIMEOUT": "One of our systems is responding slowly; a colleague has your full request and "
    "will finish it for you.",
    "TOOL_UNAVAILABLE": "One of our systems is unavailable right now; a colleague has your full "
    "request and will finish it for you.",
    "GOAL_UNMET": "I could not complete every part of your request automatically; a colleague has "
    "reviewed what is done so far and will complete the rest.",
    "GOAL_TIMEOUT": "Your request is taking longer than expected; a colleague has everything gathered "
    "so far and will continue from here.",
    "POLICY_VIOLATION": "Your request needs a review by our team before we can answer; we will come "
    "back to you.",
}


_REPLIES_ZH = {
    "TOOL_TIMEOUT": "我们的一个系统响应较慢，同事已拿到您的完整申请，会继续为您办理。",
    "TOOL_UNAVAILABLE": "我们的一个系统暂时不可用，同事已拿到您的完整申请，会继续为您办理。",
    "GOAL_UNMET": "您的申请有部分内容未能自动完成，同事已核对目前的进展和原因，会为您完成后续处理。",
    "GOAL_TIMEOUT": "您的申请处理时间比预期长，同事已拿到目前收集的全部资料，会接着为您处理。",
    "POLICY_VIOLATION": "您的申请需要我们团队复核后才能答复，我们会尽快联系您。",
}


def suggested_reply(failure_type: str, text: str, *, language: str = "") -> str:
    """A reply the human can send as is (adapted to what blocked the task), in the user's
    language: ``language`` when known (an intake agent's ``zh``, ``en`` ...), else Chinese when
    the request is written in Chinese, else English."""
    if (language or ("zh" if re.search(r"[\u3400-\u4dbf\u4e00-\u9fff]", text) else "en")) == "zh":
        base_zh = _REPLIES_ZH.get(failure_type, "您的申请需要同事复核，他们已掌握全部记录，会接着为您处理。")
        return f"您好，关于您的申请“{text[:120]}”：{base_zh}"
    base = _REPLIES.get(
        failure_type,
        "Your request needs a colleague's review; they have the full history and will continue from here.",
    )
    return f"Hello, about your request “{text[:120]}”: {base}"
