"""Intent drift about meaning: an answer outside the goal's intention scope.

Besides a trace deeper than 5 or a cycle (``SMFMessage.intention_drift``), the seed's
orchestrator notices that "the user's goal is a replacement but the logistics agent
returned a freight quote" (section 4.4). A goal declares its
:class:`~middleware.goals.IntentionScope` (the actions, agent tags and output fields
its steps' answers must be about); after each answer the pipeline asks an
:class:`IntentJudge` whether the answer stayed in scope, and a drift is an
``INTENT_DRIFT`` failure carrying the evidence.

* :class:`RuleBasedIntentJudge` (the default) checks the step's action against
  ``actions``, the agent's tags against ``tags``, and the output's fields against
  ``fields`` / ``forbidden_fields``.
* :class:`LangChainIntentJudge` asks a LangChain chat model (any ``BaseChatModel``)
  whether the answer serves the goal; it runs after the rules (which are free) and
  only when they find nothing. Needs the ``langchain`` extra.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .goals import GoalAssertion

__all__ = ["DriftFinding", "IntentJudge", "LangChainIntentJudge", "RuleBasedIntentJudge", "judge_all"]


class DriftFinding(Model):
    """Why an answer drifted from the goal, with the evidence."""

    reason: str
    judge: str = Field(description="Which judge found it (rules, langchain ...).")
    evidence: dict[str, Any] = Field(default_factory=dict)


class Answer(Model):
    """What a judge looks at: one step's answer in the light of the goal."""

    goal: GoalAssertion
    step: str
    action: str = Field(default="", description="The action the step was routed for.")
    agent: str
    agent_tags: list[str] = Field(default_factory=list)
    agent_actions: list[str] = Field(default_factory=list, description="The agent's can_do.")
    output: Any = None
    text: str = Field(default="", description="The user's request (or the step's instruction).")


@runtime_checkable
class IntentJudge(Protocol):
    """Decides whether an answer stayed within its goal's intention scope."""

    def __call__(self, answer: Answer) -> DriftFinding | Awaitable[DriftFinding | None] | None:
        """A finding when the answer drifted, else ``None``."""
        ...


class RuleBasedIntentJudge:
    """The default judge: the goal's intention scope as rules (see the module docstring)."""

    def __call__(self, answer: Answer) -> DriftFinding | None:
        scope = answer.goal.intention_scope
        if scope is None:
            return None
        goal = answer.goal.id
        if scope.actions:
            acting = answer.action or next((a for a in answer.agent_actions if a in scope.actions), "")
            if acting not in scope.actions:
                return DriftFinding(
                    reason=f"{answer.agent} answered step {answer.step} for action "
                    f"{answer.action or '(none)'}, outside the scope of goal {goal} "
                    f"({', '.join(scope.actions)})",
                    judge="rules",
                    evidence={"action": answer.action, "scope_actions": scope.actions},
                )
        if scope.tags and not set(answer.agent_tags) & set(scope.tags):
            return DriftFinding(
                reason=f"{answer.agent} (tags {', '.join(answer.agent_tags) or 'none'}) is outside the "
                f"scope of goal {goal} (tags {', '.join(scope.tags)})",
                judge="rules",
                evidence={"agent_tags": answer.agent_tags, "scope_tags": scope.tags},
            )
        fields = set(answer.output) if isinstance(answer.output, dict) else set()
        forbidden = sorted(fields & set(scope.forbidden_fields))
        if forbidden:
            return DriftFinding(
                reason=f"{answer.agent} answered with {', '.join(forbidden)}: not what goal {goal} is about "
                f"({answer.goal.description})",
                judge="rules",
                evidence={"fields": forbidden, "output": answer.output},
            )
        if scope.fields and isinstance(answer.output, dict) and not fields & set(scope.fields):
            return DriftFinding(
                reason=f"{answer.agent} answered with none of the fields goal {goal} is about "
                f"({', '.join(scope.fields)})",
                judge="rules",
                evidence={"fields": sorted(fields), "scope_fields": scope.fields},
            )
        return None


_PROMPT = (
    "You check whether an agent's answer serves the user's goal. Reply with JSON only: "
    '{{"drift": true|false, "reason": "..."}}.\n'
    "User request: {text}\nGoal {goal_id}: {description}\nIntention scope: {scope}\n"
    "Step {step} (action {action}) was answered by {agent}:\n{output}"
)


class LangChainIntentJudge:
    """Asks a LangChain chat model whether the answer drifted from the goal.

    Args:
        model: Any ``langchain_core`` chat model (``ainvoke`` with a string prompt).
        prompt: A format string with ``text goal_id description scope step action agent output``.

    A reply that is not the expected JSON is not a drift (the rules already ran); it is
    reported in the evidence of nothing, i.e. ignored, so a flaky judge cannot fail tasks.
    """

    def __init__(self, model: Any, *, prompt: str = _PROMPT) -> None:
        self.model = model
        self.prompt = prompt

    async def __call__(self, answer: Answer) -> DriftFinding | None:
        scope = answer.goal.intention_scope
        text = self.prompt.format(
            text=answer.text,
            goal_id=answer.goal.id,
            description=answer.goal.description,
            scope=scope.model_dump_json() if scope else "{}",
            step=answer.step,
            action=answer.action or "(none)",
            agent=answer.agent,
            output=json.dumps(answer.output, ensure_ascii=False, default=str)[:4000],
        )
        reply = await self.model.ainvoke(text)
        content = getattr(reply, "content", reply)
        try:
            verdict = json.loads(content if isinstance(content, str) else json.dumps(content))
        except ValueError:
            return None
        if not isinstance(verdict, dict) or verdict.get("drift") is not True:
            return None
        return DriftFinding(
            reason=f"{answer.agent}: {verdict.get('reason') or 'the answer does not serve the goal'}",
            judge="langchain",
            evidence={"model_reply": verdict},
        )


async def judge_all(judges: list[IntentJudge], answer: Answer) -> DriftFinding | None:
    """The first finding of ``judges`` in order (sync or async judges)."""
    for judge in judges:
        found = judge(answer)
        if inspect.isawaitable(found):
            found = await found
        if found is not None:
            return found
    return None
