"""Patterns and schemas from outside are refused at registration when they cannot run in
linear time or are too large (issue 14, items 2 and 3), each refusal naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from middleware.contracts import CapabilityContract
from middleware.errors import InvalidInput
from middleware.goals import GoalAssertion
from middleware.schema_guard import SchemaLimits, check_schema_bounds, schema_limits, set_schema_limits
from middleware.schemas import CompiledSchema
from middleware.server.grpc_api.convert import contract_from_pb, contract_to_pb
from middleware.server.settings import schema_limits_from_env


def contract(schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": "mallory", "version": "1.0.0", "can_do": ["x"], "input_schema": schema}


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "string", "pattern": "(a)\\1"}, "$.pattern"),
        ({"properties": {"code": {"pattern": "(?=a)a"}}}, "$.properties.code.pattern"),
        ({"patternProperties": {"^(?!x)": {"type": "integer"}}}, "$.patternProperties.^(?!x)"),
    ],
)
def test_schema_patterns_re2_cannot_run_are_refused_naming_the_field(
    schema: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        CapabilityContract.parse(contract(schema))
    assert info.value.field == "input_schema"
    assert where in str(info.value) and "RE2" in str(info.value)


def test_goal_regex_steps_re2_cannot_run_are_refused_naming_the_field() -> None:
    goal = {
        "id": "GOAL_BACKREF_1",
        "description": "backreference",
        "verification_steps": [{"kind": "regex", "pattern": "(ab)\\1"}],
    }
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse(goal)
    assert info.value.field == "verification_steps[0].pattern" and "RE2" in str(info.value)


def test_backtracking_patterns_re2_accepts_run_in_linear_time() -> None:
    """``^(a|aa)+$`` on 60 a's and a '!' took minutes with ``re``; RE2 and the native
    validator's linear engine answer at once (no timing: it would not return otherwise)."""
    schema = CompiledSchema(
        {"type": "object", "properties": {"c": {"type": "string", "pattern": "^(a|aa)+$"}}}
    )
    assert not schema.is_valid({"c": "a" * 60 + "!"})
    assert schema.problems({"c": "a" * 60 + "!"})[0].field == "c"
    assert schema.is_valid({"c": "a" * 60})


def test_schema_size_node_and_depth_caps_name_the_field() -> None:
    before = schema_limits()
    set_schema_limits(SchemaLimits(max_bytes=2_000, max_nodes=50, max_depth=5))
    try:
        with pytest.raises(InvalidInput, match="more than 50 nodes"):
            check_schema_bounds({"properties": {f"p{i}": {} for i in range(60)}}, field="input_schema")
        deep: dict[str, Any] = {}
        node = deep
        for _ in range(10):
            node["items"] = {}
            node = node["items"]
        with pytest.raises(InvalidInput, match="deeper than 5 levels") as info:
            check_schema_bounds(deep, field="input_schema")
        assert info.value.field == "input_schema"
        with pytest.raises(InvalidInput, match="larger than the 2000 bytes"):
            check_schema_bounds({"description": "x" * 3_000}, field="input_schema")
        pb = contract_to_pb(CapabilityContract.parse(contract({})))
        pb.input_schema_json = json.dumps({"description": "x" * 3_000})
        with pytest.raises(InvalidInput) as info:
            contract_from_pb(pb)
        assert info.value.field == "contract.input_schema_json" and "AGENCY_MAX_SCHEMA_BYTES" in str(
            info.value
        )
    finally:
        set_schema_limits(before)


def test_schema_limits_come_from_the_environment() -> None:
    limits = schema_limits_from_env({"AGENCY_MAX_SCHEMA_NODES": "100"})
    assert limits.max_nodes == 100 and limits.max_bytes == SchemaLimits().max_bytes
    with pytest.raises(InvalidInput) as info:
        schema_limits_from_env({"AGENCY_MAX_SCHEMA_BYTES": "lots"})
    assert info.value.field == "AGENCY_MAX_SCHEMA_BYTES"
