"""The governed planner: a model proposes a plan for a request no goal's plan covers.

Off by default (``Agency(planner=...)``). When a task names no steps and its goal (if any)
declares no plan, the gateway asks the planner for one: a :class:`PlanRequest` (the user's
words, what the task knows, the goal and its scope, the catalog's actions with the inputs
their contracts require, the step limit) in, a :class:`PlanProposal` out — a plan as data,
or a question with options, or a reason it has none. The planner only proposes: the gateway
validates the proposal before anything runs (``middleware.plans.check_plan``: every step has a
live contract that can do it, none that ``cannot_do`` it, within the goal's scope and the task
limits, stages bound), audits it (``plan.proposed``, ``plan.accepted`` / ``plan.refused`` with
the reasons), and a refused plan becomes a clarification or a handover to a person, never a
guess (``middleware.plan_runner``).

:class:`LangChainPlanner` asks any LangChain chat model (``ainvoke``) for JSON; a reply that
is not a plan is a refusal, not an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .goals import GoalAssertion

__all__ = ["CatalogAction", "LangChainPlanner", "PlanProposal", "PlanRequest", "Planner", "parse_proposal"]

#: Most characters of the model's reply kept for the audit log.
MAX_RAW_CHARS = 4000


@dataclass(frozen=True)
class CatalogAction:
    """One action the catalog offers, as a planner sees it."""

    action: str
    agents: list[str]
    description: str = ""
    required_inputs: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)

    def described(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "agents": self.agents,
            "description": self.description,
            "required_inputs": self.required_inputs,
            "inputs": self.inputs,
        }


@dataclass(frozen=True)
class PlanRequest:
    """What the planner is told about one task.

    Attributes:
        text: The user's words.
        language: The user's language, when known.
        input: The request's structured input.
        context: What the task knows besides (the intake agent's extraction, the session).
        goal: The anchored goal, if any (its scope bounds the plan; its stages need steps).
        actions: What the catalog can do now (live contracts; never a ``cannot_do``).
        max_steps: The most steps the plan may have.
        done: Steps that already ran (``steps.<name>`` may read their outputs).
        clarification: The user's answer to the planner's earlier question, if any.
    """

    text: str
    language: str
    input: dict[str, Any]
    context: dict[str, Any]
    goal: GoalAssertion | None
    actions: list[CatalogAction]
    max_steps: int
    done: list[str] = field(default_factory=list)
    clarification: dict[str, Any] | None = None


@dataclass
class PlanProposal:
    """What a planner proposes: a plan (as data, validated by the gateway), or a question with
    options, or nothing (``reason`` says why)."""

    plan: Any = None
    question: str = ""
    options: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    raw: str = ""

    def described(self) -> dict[str, Any]:
        """The proposal as the audit log keeps it."""
        out: dict[str, Any] = {}
        if self.plan is not None:
            out["plan"] = self.plan
        if self.question:
            out["question"], out["options"] = self.question, self.options
        if self.reason:
            out["reason"] = self.reason
        if self.raw:
            out["raw"] = self.raw[:MAX_RAW_CHARS]
        return out


@runtime_checkable
class Planner(Protocol):
    """Proposes plans (see the module docstring). ``name`` is recorded in the audit log."""

    name: str

    async def propose(self, request: PlanRequest) -> PlanProposal: ...


_PROMPT = """You plan the work of a governed multi-agent gateway. Decompose the user's request into steps,
each done by one of the catalog's actions. Reply with JSON only, one of:
{{"plan": {{"steps": [{{"name": "...", "action": "...", "after": ["..."],
                       "input": {{"field": "reference"}}}}]}}}}
{{"question": "...", "options": [{{"id": "...", "label": "..."}}, ...]}}   (when the request is ambiguous)
{{"refuse": "why no plan fits"}}
Rules: use only the actions listed; a step's "after" names earlier steps it waits for (steps that wait for
nothing in common run in parallel); every step must lead to the last, whose output answers the user;
an input reference is request.<field>, context.<field>, task.text, task.user_id or
steps.<earlier step>[.<field>]; map every required input of the action. At most {max_steps} steps.
Never invent an action.

Request: {text}
Language: {language}
Input: {input}
Known context: {context}
Goal: {goal}
Steps already done (their outputs can be read): {done}
Clarification from the user: {clarification}
Catalog actions: {actions}
"""


class LangChainPlanner:
    """Asks a LangChain chat model (any ``langchain_core`` chat model: ``ainvoke`` with a
    string prompt) for a plan as JSON (see :func:`parse_proposal`).

    Args:
        model: The chat model.
        prompt: A format string with ``text language input context goal done clarification
            actions max_steps``.
        name: How the audit log names this planner.
    """

    def __init__(self, model: Any, *, prompt: str = _PROMPT, name: str = "langchain") -> None:
        self.model = model
        self.prompt = prompt
        self.name = name

    async def propose(self, request: PlanRequest) -> PlanProposal:
        goal = request.goal
        text = self.prompt.format(
            text=request.text,
            language=request.language or "-",
            input=_json(request.input),
            context=_json(request.context),
            goal=_json(
                {
                    "id": goal.id,
                    "description": goal.description,
                    "scope": goal.intention_scope.actions if goal.intention_scope else [],
                    "stages_need_steps": [s.step for s in goal.stages],
                }
            )
            if goal is not None
            else "none",
            done=", ".join(request.done) or "none",
            clarification=_json(request.clarification) if request.clarification else "none",
            actions=_json([a.described() for a in request.actions]),
            max_steps=request.max_steps,
        )
        reply = await self.model.ainvoke(text)
        content = getattr(reply, "content", reply)
        return parse_proposal(content if isinstance(content, str) else _json(content))


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def parse_proposal(reply: str) -> PlanProposal:
    """A model's reply as a proposal: ``{"plan": ...}`` (or a bare ``{"steps": [...]}``),
    ``{"question": ..., "options": [...]}``, ``{"refuse": ...}``; anything else is a proposal
    of nothing, its reason saying so (the gateway never guesses what was meant)."""
    raw = reply[:MAX_RAW_CHARS]
    fenced = _FENCE.match(reply)
    text = fenced.group(1) if fenced else reply.strip()
    try:
        data = json.loads(text)
    except ValueError:
        return PlanProposal(reason="the planner's reply is not JSON", raw=raw)
    if not isinstance(data, dict):
        return PlanProposal(reason="the planner's reply is not a JSON object", raw=raw)
    if "plan" in data or "steps" in data:
        return PlanProposal(plan=data.get("plan", {"steps": data.get("steps")}), raw=raw)
    question = data.get("question") or (data.get("clarify") or {}).get("question")
    if isinstance(question, str) and question.strip():
        options = data.get("options") or (data.get("clarify") or {}).get("options") or []
        return PlanProposal(
            question=question.strip(),
            options=[o for o in options if isinstance(o, dict)] if isinstance(options, list) else [],
            raw=raw,
        )
    refusal = data.get("refuse") or data.get("reason")
    return PlanProposal(reason=str(refusal) if refusal else "the planner proposed no plan", raw=raw)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:8000]
