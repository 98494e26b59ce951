"""The plan model: a goal's steps as a small DAG, checked when it is written and against contracts."""

from __future__ import annotations

import pytest

from middleware import CapabilityContract, GoalAssertion, InvalidInput
from middleware.demo import CONTRACTS, WARRANTY_GOAL
from middleware.plans import Plan, check_plan


def plan(*steps: dict) -> Plan:
    return Plan.parse({"steps": list(steps)})


def refused(data: dict, what: type = Plan) -> str:
    with pytest.raises(InvalidInput) as caught:
        what.parse(data)
    return str(caught.value)


def test_steps_written_in_order_wait_for_the_one_before():
    p = plan({"name": "a", "action": "x"}, {"name": "b", "action": "y"}, {"name": "c", "action": "z"})
    assert [s.after for s in p.steps] == [[], ["a"], ["b"]]
    assert p.branches() == []


def test_after_makes_branches_and_a_join():
    p = plan(
        {"name": "start", "action": "x"},
        {"name": "left", "action": "y", "after": ["start"]},
        {"name": "right", "action": "z", "after": ["start"]},
        {"name": "join", "action": "w", "after": ["left", "right"]},
    )
    assert p.branches() == [["left", "right"]]
    assert p.ancestors()["join"] == {"start", "left", "right"}
    assert p.descendants("left") == ["join"]


def test_the_normalised_plan_reads_back_the_same():
    p = plan(
        {"name": "a", "action": "x", "input": {"u": "task.user_id", "v": ["context.v", "request.v"]}},
        {
            "name": "b",
            "action": "y",
            "input": {"a": "steps.a.out", "k": {"value": 3}, "o": {"from": "context.o", "optional": True}},
        },
    )
    dumped = p.model_dump(mode="json")
    assert Plan.parse(dumped) == p
    assert dumped["steps"][1]["input"]["o"] == {"refs": ["context.o"], "value": None, "optional": True}


@pytest.mark.parametrize(
    ("steps", "why"),
    [
        ([{"name": "a", "action": "x"}, {"name": "a", "action": "y"}], "'a' is also steps[0]"),
        (
            [{"name": "a", "action": "x", "after": ["b"]}, {"name": "b", "action": "y"}],
            "'b' is no earlier step",
        ),
        ([{"name": "a", "action": "x", "after": ["a"]}], "'a' is itself"),
        (
            [{"name": "a", "action": "x"}, {"name": "b", "action": "y", "after": []}],
            "'a' leads nowhere; every step must lead to the last",
        ),
        (
            [
                {"name": "a", "action": "x"},
                {"name": "b", "action": "y", "after": []},
                {"name": "c", "action": "z", "after": ["b"], "input": {"v": "steps.a.v"}},
            ],
            "reads step 'a', which 'c' does not wait for",
        ),
        ([{"name": "a", "action": "x", "input": {"v": "somewhere.v"}}], "a reference starts with one of"),
        ([{"name": "a", "action": "x", "input": {"v": "task.password"}}], "task.<field> reads one of"),
        ([{"name": "a", "action": "x", "input": {"v": {"refs": ["context.v"], "value": 1}}}], "not both"),
        (
            [
                {"name": "a", "action": "x", "on_failure": "continue"},
                {"name": "b", "action": "y", "input": {"v": "steps.a.v"}},
            ],
            "only reads steps that may be skipped",
        ),
        ([{"name": "a", "action": "x", "on_failure": "continue"}], "the last step's output is the task's"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_saying_why(steps, why):
    assert why in refused({"steps": steps})


def test_a_goal_binds_its_stages_to_its_plan_and_keeps_it_in_scope():
    base = WARRANTY_GOAL.model_dump(mode="json")
    base["stages"][0]["step"] = "shipment"
    assert "stage 'eligibility' is bound to step 'shipment', which the plan does not have" in refused(
        base, GoalAssertion
    )
    base = WARRANTY_GOAL.model_dump(mode="json")
    base["plan"]["steps"][0]["action"] = "quote_freight"
    assert "quote_freight is outside the goal's intention_scope.actions" in refused(base, GoalAssertion)
    assert GoalAssertion.parse(WARRANTY_GOAL.model_dump(mode="json")) == WARRANTY_GOAL


def test_the_warranty_plan_fits_the_demo_contracts():
    assert check_plan(WARRANTY_GOAL.plan, CONTRACTS) == []


def contract(
    name: str, can: list[str], *, required: list[str] = (), cannot: list[str] = ()
) -> CapabilityContract:
    return CapabilityContract(
        name=name,
        can_do=can,
        cannot_do=list(cannot),
        input_schema={"type": "object", "required": list(required)} if required else {},
    )


def test_a_plan_is_held_against_every_contract_that_could_run_a_step():
    p = plan(
        {"name": "fetch", "action": "fetch", "input": {"id": "request.id"}},
        {"name": "pay", "action": "pay", "input": {"id": {"from": "request.id", "optional": True}}},
        {"name": "predict", "action": "predict"},
        {"name": "ghost", "action": "haunt"},
    )
    contracts = [
        contract("fetcher", ["fetch"], required=["id", "token"]),
        contract("payer", ["pay"], required=["id"]),
        contract("calc", ["add"], cannot=["predict"]),
    ]
    found = {str(x) for x in check_plan(p, contracts, max_steps=3, scope_actions=["fetch", "pay"])}
    assert found == {
        "plan.steps: 4 steps, more than limits.max_steps_per_task (3)",
        "plan.steps[0].input.token: fetcher@1.0.0 requires 'token'; the step's input does not map it",
        "plan.steps[1].input.id: payer@1.0.0 requires 'id'; it cannot be optional",
        "plan.steps[2].action: predict is outside the goal's intention scope",
        "plan.steps[2].action: the contracts of calc@1.0.0 say they cannot do predict",
        "plan.steps[3].action: haunt is outside the goal's intention scope",
        "plan.steps[3].action: no live contract can do haunt",
    }
    # at registration a worker may register later: an action nobody offers yet is no problem, but
    # one a contract refuses is
    lenient = {str(x) for x in check_plan(p, contracts, require_contracts=False)}
    assert "plan.steps[3].action: no live contract can do haunt" not in lenient
    assert "plan.steps[2].action: the contracts of calc@1.0.0 say they cannot do predict" in lenient
