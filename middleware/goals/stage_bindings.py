"""Plans against goals: whether a task's steps can satisfy its goal's stages.

A goal's stages are bound to task steps by name (``eligibility`` checks what step
``warranty`` returns). A plan without one of those steps can never pass the goal: the
stage would never be verified. Such a task is the client's mistake, refused before any
agent is blamed for it: :func:`check_stage_bindings` raises ``InvalidInput`` naming each stage and
the step it is missing — at submit when the goal is known, and as soon as an intake agent
anchors one mid-task (``Agency`` ends the task ``rejected`` and the submit fails with it).

Kept apart from the verifier so that whatever builds plans (a client, a goal that owns its
plan) checks them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidInput, Problem
from .model import GoalAssertion

__all__ = ["check_stage_bindings", "stage_binding_problems"]


def stage_binding_problems(
    goal: GoalAssertion, step_names: Sequence[str], *, anchored_by: str = ""
) -> list[Problem]:
    """One problem per stage of ``goal`` bound to a step ``step_names`` does not have.

    Args:
        goal: The goal whose stages the plan must satisfy.
        step_names: The plan's steps, in order (a task without steps has one, ``main``).
        anchored_by: The agent that anchored the goal mid-task, if one did (named in the reason).
    """
    by = f", anchored by {anchored_by}," if anchored_by else ""
    steps = ", ".join(step_names) or "none"
    return [
        Problem(
            f"goal.stages[{i}].step",
            f"stage {stage.name!r} of goal {goal.id}{by} is bound to step {stage.step!r}, which the "
            f"task does not have (steps: {steps}); add a step named {stage.step!r} or anchor another goal",
        )
        for i, stage in enumerate(goal.stages)
        if stage.step not in step_names
    ]


def check_stage_bindings(goal: GoalAssertion, step_names: Sequence[str], *, anchored_by: str = "") -> None:
    """Raise :class:`InvalidInput` (``what``: task request) naming every stage whose step is missing.

    Raises:
        InvalidInput: one problem per stage bound to a missing step (field ``goal.stages[i].step``).
    """
    problems = stage_binding_problems(goal, step_names, anchored_by=anchored_by)
    if problems:
        raise InvalidInput(problems, what="task request")
