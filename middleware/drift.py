"""Intent drift about meaning: an answer outside the goal's intention scope.

Besides a trace deeper than 5 or a cycle (``SMFMessage.intention_drift``), the seed's
orchestrator notices that "the user's goal is a replacement but the logistics agent
returned a freight quote" (section 4.4). A goal declares its
:class:`~middleware.goals.IntentionScope` (the actions, agent tags and output fields
its steps' answers must be about); after each answer the pipeline asks an
:class:`IntentJudge` whether the answer stayed in scope, and a drift is an
``INTENT_DRIFT`` failure carrying the evidence.

* :func:`out_of_scope` is the part known before any agent runs: the step's action against
  ``actions`` and the agent's tags against ``tags``. The dispatcher applies it at routing
  (an agent out of scope is not chosen; when none is left the step is refused as
  ``INTENT_DRIFT`` before dispatch), so an action outside the scope never runs.
* :class:`RuleBasedIntentJudge` (the default) judges the answer: the same rules, then the
  output's fields against ``fields`` / ``forbidden_fields`` (what the answer itself reveals).
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

__all__ = [
    "DriftFinding",
    "IntentJudge",
    "LangChainIntentJudge",
    "RuleBasedIntentJudge",
    "judge_all",
    "out_of_scope",
]


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


def out_of_scope(
    goal: GoalAssertion, *, action: str, agent: str, tags: list[str], can_do: list[str], step: str = ""
) -> DriftFinding | None:
    """Why ``agent`` doing ``action`` is outside ``goal``'s intention scope (None: it is within).

    What is known before the agent runs: the action it is asked for (without one, the agent
    must be able to do an action in scope) and its tags.
    """
    scope = goal.intention_scope
    if scope is None:
        return None
    if scope.actions:
        acting = action or next((a for a in can_do if a in scope.actions), "")
        if acting not in scope.actions:
            where = f" step {step}" if step else ""
            return DriftFinding(
                reason=f"{agent} would answer{where} for action {action or '(none)'}, outside the scope "
                f"of goal {goal.id} ({', '.join(scope.actions)})",
                judge="rules",
                evidence={"action": action, "scope_actions": scope.actions},
            )
    if scope.tags and not set(tags) & set(scope.tags):
        return DriftFinding(
            reason=f"{agent} (tags {', '.join(tags) or 'none'}) is outside the scope of goal {goal.id} "
            f"(tags {', '.join(scope.tags)})",
            judge="rules",
            evidence={"agent_tags": tags, "scope_tags": scope.tags},
        )
    return None


class RuleBasedIntentJudge:
    """The default judge: the goal's intention scope as rules (see the module docstring)."""

    def __call__(self, answer: Answer) -> DriftFinding | None:
        scope = answer.goal.intention_scope
        if scope is None:
            return None
        goal = answer.goal.id
        found = out_of_scope(
            answer.goal,
            action=answer.action,
            agent=answer.agent,
            tags=answer.agent_tags,
            can_do=answer.agent_actions,
            step=answer.step,
        )
        if found is not None:
            return found
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
