"""The goal registry: Protocol conformance, idempotent registration, conflicts, not found."""

from __future__ import annotations

import pytest

from middleware import GoalAssertion, NotFound
from middleware.errors import AlreadyExists
from middleware.goals import GoalStore, MemoryGoalStore

GOAL = GoalAssertion(id="GOAL_STORE_001", description="d", verification_steps=["output contains ok"])


def test_memory_store_conforms_and_behaves():
    store = MemoryGoalStore()
    assert isinstance(store, GoalStore)
    store.put(GOAL)
    store.put(GoalAssertion.parse(GOAL.model_dump()))  # the same goal again: fine
    changed = GOAL.model_copy(update={"timeout_seconds": 10})
    with pytest.raises(AlreadyExists):
        store.put(changed)
    store.put(changed, replace=True)
    assert store.get("GOAL_STORE_001").timeout_seconds == 10
    assert [g.id for g in store.list()] == ["GOAL_STORE_001"]
    store.remove("GOAL_STORE_001")
    with pytest.raises(NotFound):
        store.get("GOAL_STORE_001")


def test_agency_uses_an_injected_store():
    from middleware import Agency

    store = MemoryGoalStore()
    agency = Agency(goals=store)
    agency.register_goal(GOAL.model_dump())
    assert store.get("GOAL_STORE_001") == GOAL
    assert agency.get_goal("GOAL_STORE_001") is store.get("GOAL_STORE_001")


def test_goals_package_exports_are_importable():
    import middleware.goals as goals

    assert len(goals.__all__) == len(set(goals.__all__))
    assert all(getattr(goals, name) is not None for name in goals.__all__)
