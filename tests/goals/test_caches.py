"""Compiled forms are caches: they never change equality, and copies never share them wrongly."""

from __future__ import annotations

from middleware import CapabilityContract
from middleware.goals import GoalAssertion, verify_goal


def test_verifying_a_goal_does_not_change_its_equality():
    data = {"id": "GOAL_EQ_001", "description": "d", "verification_steps": ["output contains x", "$.a == 1"]}
    used, fresh = GoalAssertion.parse(data), GoalAssertion.parse(data)
    verify_goal(used, {"a": 1})
    assert used == fresh


def test_a_copied_step_with_another_description_gets_its_own_label():
    goal = GoalAssertion.parse({"id": "GOAL_EQ_001", "description": "d", "verification_steps": ["$.a == 1"]})
    assert verify_goal(goal, {"a": 1}).steps[0].step == "$.a == 1"
    renamed = goal.verification_steps[0].model_copy(update={"description": "a is one"})
    other = goal.model_copy(update={"verification_steps": [renamed]})
    assert verify_goal(other, {"a": 1}).steps[0].step == "a is one"
    assert verify_goal(goal, {"a": 1}).steps[0].step == "$.a == 1"


def test_checking_data_does_not_change_a_contracts_equality():
    spec = {"name": "c", "can_do": ["x"], "output_schema": {"type": "object"}}
    used, fresh = CapabilityContract.parse(spec), CapabilityContract.parse(spec)
    used.check_output({})
    assert used == fresh
