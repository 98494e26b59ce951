"""The interface of a goal registry: where goals are registered and fetched by id."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .model import GoalAssertion

__all__ = ["GoalStore"]


@runtime_checkable
class GoalStore(Protocol):
    """Registered goals, by id.

    ``put`` of a goal whose id is taken is idempotent when the goal is identical, an
    :class:`~middleware.errors.AlreadyExists` otherwise (unless ``replace``).
    ``get`` of an unknown id raises :class:`~middleware.errors.NotFound`.
    """

    def put(self, goal: GoalAssertion, *, replace: bool = False) -> GoalAssertion: ...

    def get(self, goal_id: str) -> GoalAssertion: ...

    def list(self) -> list[GoalAssertion]: ...

    def remove(self, goal_id: str) -> None: ...
