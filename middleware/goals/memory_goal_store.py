"""Goals kept in process memory (the default :class:`GoalStore`)."""

from __future__ import annotations

from ..errors import AlreadyExists, NotFound
from .model import GoalAssertion

__all__ = ["MemoryGoalStore"]


class MemoryGoalStore:
    """A :class:`~middleware.goals.GoalStore` in a dict."""

    def __init__(self) -> None:
        self._goals: dict[str, GoalAssertion] = {}

    def put(self, goal: GoalAssertion, *, replace: bool = False) -> GoalAssertion:
        """Register ``goal``.

        Raises:
            AlreadyExists: another goal with this id is registered and ``replace`` is false.
        """
        current = self._goals.get(goal.id)
        if current is not None and not replace and current.model_dump() != goal.model_dump():
            raise AlreadyExists(
                f"goal {goal.id} is already registered with other content; pass replace=true to update it"
            )
        self._goals[goal.id] = goal
        return goal

    def get(self, goal_id: str) -> GoalAssertion:
        try:
            return self._goals[goal_id]
        except KeyError:
            raise NotFound(f"no goal {goal_id!r} is registered") from None

    def list(self) -> list[GoalAssertion]:
        return [self._goals[k] for k in sorted(self._goals)]

    def remove(self, goal_id: str) -> None:
        self._goals.pop(goal_id, None)

    def __contains__(self, goal_id: object) -> bool:
        return goal_id in self._goals

    def __len__(self) -> int:
        return len(self._goals)
