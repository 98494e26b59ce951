"""Every step kind, passing and failing, with expected vs actual and the reason."""

from __future__ import annotations

import pytest

from middleware import InvalidInput
from middleware.goals import GoalAssertion, verify_goal

ORDER = {
    "status": "shipped",
    "tracking_number": "EXP123456",
    "fee": 0,
    "total": 129.5,
    "paid": True,
    "items": [{"sku": "A1", "price": 10}, {"sku": "B2", "price": 20}],
    "note": "Ｆｕｌｌｗｉｄｔｈ ＴＥＸＴ and Straße",
    "tags": [],
}


def check(step, output=ORDER):
    goal = GoalAssertion.parse({"id": "GOAL_TEST_001", "description": "d", "verification_steps": [step]})
    verdict = verify_goal(goal, output)
    assert verdict.goal_id == "GOAL_TEST_001"
    assert verdict.duration_ms >= 0
    assert len(verdict.steps) == 1
    return verdict.steps[0]


@pytest.mark.parametrize(
    ("step", "passes"),
    [
        ({"kind": "contains", "value": "exp123456"}, True),  # case-insensitive by default
        ({"kind": "contains", "value": "exp123456", "case_sensitive": True}, False),
        ({"kind": "contains", "value": "fullwidth text"}, True),  # NFKC: full-width letters
        ({"kind": "contains", "value": "STRASSE"}, True),  # casefold: ß ~ ss
        ({"kind": "contains", "value": "refund"}, False),
        ({"kind": "contains", "value": "A1", "path": "$.items[0]"}, True),
        ({"kind": "contains", "value": "B2", "path": "$.items[0]"}, False),
        ({"kind": "contains", "value": "x", "path": "$.missing"}, False),
        ({"kind": "not_contains", "value": "password"}, True),
        ({"kind": "not_contains", "value": "SHIPPED"}, False),
    ],
)
def test_contains_and_not_contains(step, passes):
    v = check(step)
    assert v.passed is passes
    assert v.status == ("passed" if passes else "failed")
    assert v.kind == step["kind"]
    assert v.expected.endswith(repr(step["value"]))
    assert (v.reason == "") is passes


def test_contains_on_plain_text_output():
    assert check({"kind": "contains", "value": "tracking number"}, "Your tracking number is X").passed
    v = check({"kind": "contains", "value": "tracking number"}, "Your parcel left")
    assert not v.passed and v.actual == "not found" and "'tracking number' not found" in v.reason


@pytest.mark.parametrize(
    ("step", "passes", "actual"),
    [
        ({"kind": "regex", "pattern": r"[A-Z]{3}\d{6}"}, True, "EXP123456"),
        ({"kind": "regex", "pattern": r"^\d+$"}, False, None),
        ({"kind": "regex", "pattern": "exp1", "ignore_case": True}, True, "EXP1"),
        # literal: the user's text is escaped, "." is a dot, not "any character"
        ({"kind": "regex", "pattern": "129.5", "literal": True}, True, "129.5"),
        ({"kind": "regex", "pattern": "129x5", "literal": True}, False, None),
        ({"kind": "regex", "pattern": "(unbalanced", "literal": True}, False, None),
        ({"kind": "regex", "pattern": "^shipped$", "path": "$.status"}, True, "shipped"),
    ],
)
def test_regex(step, passes, actual):
    v = check(step)
    assert v.passed is passes and v.actual == actual
    if not passes:
        assert v.reason == "no match in output"


def test_literal_regex_would_mismatch_without_escaping():
    assert check({"kind": "regex", "pattern": "1.9", "literal": False}, "129").passed
    assert not check({"kind": "regex", "pattern": "1.9", "literal": True}, "129").passed


@pytest.mark.parametrize(
    ("step", "passes", "reason"),
    [
        ({"kind": "json_path", "path": "$.status"}, True, ""),
        ({"kind": "json_path", "path": "$.nope"}, False, "$.nope not found"),
        ({"kind": "json_path", "path": "$.nope", "exists": False}, True, ""),
        ({"kind": "json_path", "path": "$.fee", "op": "not_exists"}, False, "$.fee is present"),
        ({"kind": "json_path", "path": "$.status", "equals": "shipped"}, True, ""),
        (
            {"kind": "json_path", "path": "$.status", "equals": "lost"},
            False,
            "$.status is 'shipped', expected 'lost'",
        ),
        ({"kind": "json_path", "path": "$.paid", "equals": 1}, False, "expected 1"),  # true is not 1
        ({"kind": "json_path", "path": "$.fee", "equals": 0.0}, True, ""),  # 0 == 0.0
        ({"kind": "json_path", "path": "$.items[1]", "equals": {"sku": "B2", "price": 20}}, True, ""),
        ({"kind": "json_path", "path": "$.status", "one_of": ["shipped", "delivered"]}, True, ""),
        ({"kind": "json_path", "path": "$.status", "one_of": ["lost"]}, False, "not one of ['lost']"),
        ({"kind": "json_path", "path": "$.total", "gt": 100}, True, ""),
        ({"kind": "json_path", "path": "$.total", "gt": 129.5}, False, "expected > 129.5"),
        ({"kind": "json_path", "path": "$.total", "ge": 129.5}, True, ""),
        ({"kind": "json_path", "path": "$.total", "lt": 100}, False, "expected < 100"),
        ({"kind": "json_path", "path": "$.fee", "le": 0}, True, ""),
        ({"kind": "json_path", "path": "$.fee", "le": -1}, False, "expected <= -1"),
        ({"kind": "json_path", "path": "$.total", "between": [100, 200]}, True, ""),
        ({"kind": "json_path", "path": "$.total", "between": [0, 100]}, False, "expected between [0, 100]"),
        ({"kind": "json_path", "path": "$.status", "gt": 1}, False, "not a number"),
        ({"kind": "json_path", "path": "$.paid", "ge": 0}, False, "not a number"),  # booleans are not numbers
        ({"kind": "json_path", "path": "$.items[*].price", "gt": 5}, True, ""),
        ({"kind": "json_path", "path": "$.items[*].price", "gt": 15}, False, "is 10"),
    ],
)
def test_json_path_ops(step, passes, reason):
    v = check(step)
    assert v.passed is passes, v
    assert reason in v.reason
    if not passes:
        assert v.reason


def test_json_path_verdict_reports_expected_and_actual():
    v = check({"kind": "json_path", "path": "$.total", "between": [0, 100]})
    assert v.expected == {"between": [0, 100]} and v.actual == 129.5


@pytest.mark.parametrize(
    ("step", "passes"),
    [
        ({"kind": "json_schema", "schema": {"type": "object", "required": ["status", "fee"]}}, True),
        ({"kind": "json_schema", "schema": {"type": "object", "required": ["refund_id"]}}, False),
        ({"kind": "json_schema", "path": "$.items", "schema": {"type": "array", "minItems": 2}}, True),
        ({"kind": "json_schema", "path": "$.items", "schema": {"type": "array", "maxItems": 1}}, False),
    ],
)
def test_json_schema(step, passes):
    v = check(step)
    assert v.passed is passes
    if not passes:
        assert v.actual == "invalid" and v.reason


def test_json_schema_failure_names_the_field():
    v = check({"kind": "json_schema", "schema": {"properties": {"fee": {"type": "string"}}}})
    assert "fee" in v.reason and "not of type 'string'" in v.reason


@pytest.mark.parametrize(
    ("step", "output", "passes", "actual"),
    [
        ({"kind": "length", "max": 10}, "short", True, 5),
        ({"kind": "length", "max": 3}, "short", False, 5),
        ({"kind": "length", "min": 6}, "short", False, 5),
        ({"kind": "length", "path": "$.items", "min": 1, "max": 2}, ORDER, True, 2),
        ({"kind": "length", "path": "$.tags", "min": 1}, ORDER, False, 0),
        ({"kind": "length", "path": "$.items[0]", "max": 1}, ORDER, False, 2),  # object: its keys
        ({"kind": "length", "path": "$.fee", "max": 1}, ORDER, False, 0),  # a number has no length
    ],
)
def test_length(step, output, passes, actual):
    v = check(step, output)
    assert v.passed is passes and v.actual == actual


def test_length_of_non_sized_value_says_why():
    assert "int has no length" in check({"kind": "length", "path": "$.fee", "max": 1}).reason


@pytest.mark.parametrize(
    ("step", "passes", "reason"),
    [
        ({"kind": "every_item", "path": "$.items", "step": {"kind": "json_path", "path": "$.sku"}}, True, ""),
        (
            {
                "kind": "every_item",
                "path": "$.items",
                "step": {"kind": "json_path", "path": "$.price", "gt": 15},
            },
            False,
            "item 0: $.price is 10, expected > 15",
        ),
        ({"kind": "every_item", "path": "$.items", "step": "$.price > 0"}, True, ""),  # a nested sentence
        ({"kind": "every_item", "path": "$.tags", "step": {"kind": "contains", "value": "x"}}, True, ""),
        (
            {
                "kind": "every_item",
                "path": "$.tags",
                "allow_empty": False,
                "step": {"kind": "contains", "value": "x"},
            },
            False,
            "$.tags is empty",
        ),
        ({"kind": "every_item", "path": "$.status", "step": "$.a exists"}, False, "str, not a list"),
        ({"kind": "every_item", "path": "$.none", "step": "$.a exists"}, False, "$.none not found"),
    ],
)
def test_every_item(step, passes, reason):
    v = check(step)
    assert v.passed is passes
    assert reason in v.reason


def test_manual_step_never_passes_and_is_pending():
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_TEST_001",
            "description": "d",
            "verification_steps": [
                "output contains shipped",
                {"kind": "manual", "description": "user is happy"},
            ],
        }
    )
    verdict = verify_goal(goal, ORDER)
    assert not verdict.passed and verdict.status == "pending_manual"
    assert [s.status for s in verdict.steps] == ["passed", "manual"]
    assert verdict.manual_steps[0].expected == "user is happy"
    assert verdict.failed_steps == []


def test_a_failed_machine_step_beats_a_manual_one():
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_TEST_001",
            "description": "d",
            "verification_steps": ["output contains refund", "manual: x"],
        }
    )
    assert verify_goal(goal, ORDER).status == "failed"


@pytest.mark.parametrize(
    ("step", "field", "reason"),
    [
        ({"kind": "regex", "pattern": "("}, "verification_steps[0].pattern", "regex does not compile"),
        ({"kind": "json_path", "path": "a.b"}, "verification_steps[0].path", "must start with '$'"),
        ({"kind": "json_path", "path": "$.a", "gt": "x"}, "verification_steps[0]", "gt needs a number"),
        ({"kind": "json_path", "path": "$.a", "between": [5, 1]}, "verification_steps[0]", "above high"),
        (
            {"kind": "json_path", "path": "$.a", "equals": 1, "gt": 0},
            "verification_steps[0]",
            "one op per step",
        ),
        ({"kind": "json_path", "path": "$.a", "one_of": []}, "verification_steps[0]", "non-empty list"),
        (
            {"kind": "json_schema", "schema": {"type": "nope"}},
            "verification_steps[0].schema",
            "not a valid JSON",
        ),
        ({"kind": "length"}, "verification_steps[0]", "give min, max or both"),
        ({"kind": "length", "min": 3, "max": 1}, "verification_steps[0]", "min 3 is above max 1"),
        ({"kind": "custom", "name": "bad name"}, "verification_steps[0].name", "check names"),
        ({"kind": "manual", "description": ""}, "verification_steps[0].description", "at least 1"),
        ({"kind": "teleport"}, "verification_steps[0]", "does not match any of the expected tags"),
        ({"kind": "contains", "value": "x", "colour": "red"}, "verification_steps[0].colour", "Extra inputs"),
        (
            {"kind": "every_item", "path": "$.a", "step": "manual: look"},
            "verification_steps[0]",
            "cannot be applied to every item",
        ),
    ],
)
def test_bad_steps_are_refused_naming_field_and_reason(step, field, reason):
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse({"id": "GOAL_TEST_001", "description": "d", "verification_steps": [step]})
    problems = {p.field: p.reason for p in info.value.problems}
    assert field in problems, problems
    assert reason in problems[field], problems


def test_every_problem_of_a_goal_is_named_at_once():
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse(
            {
                "id": "bad id",
                "description": "",
                "verification_steps": [
                    "确保用户满意",
                    {"kind": "regex", "pattern": "["},
                    "output contains ok",
                    "ensure the user is satisfied",
                ],
                "timeout_seconds": 0,
                "criticality": "urgent",
            }
        )
    fields = {p.field for p in info.value.problems}
    assert {
        "id",
        "description",
        "verification_steps[0]",
        "verification_steps[1].pattern",
        "verification_steps[3]",
        "timeout_seconds",
        "criticality",
    } <= fields
    assert "verification_steps[2]" not in fields


def test_step_objects_round_trip_through_json():
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_TEST_001",
            "description": "d",
            "verification_steps": [
                {"kind": "json_path", "path": "$.fee", "equals": None},
                {"kind": "json_schema", "schema": {"type": "object"}},
                "every item of $.items has field sku",
                "字段fee等于0",
            ],
        }
    )
    again = GoalAssertion.parse(goal.model_dump_json())
    assert again == goal
    assert again.verification_steps[0].op == "equals" and again.verification_steps[0].value is None
    first = verify_goal(again, {"fee": None}).steps[0]
    assert first.passed and first.step == "$.fee equals None"
    assert not verify_goal(again, {"fee": 0, "items": []}).steps[0].passed
