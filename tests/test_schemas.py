"""Compiled contract schemas: same answers as jsonschema, clear messages, cached per contract."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from middleware import CapabilityContract
from middleware.contracts import check_against_schema
from middleware.errors import ContractViolation
from middleware.schemas import CompiledSchema, compile_schema

SCHEMAS = [
    {
        "type": "object",
        "required": ["id", "amount"],
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{3}$"},
            "amount": {"type": "number", "minimum": 0, "exclusiveMaximum": 1000},
            "qty": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
            "status": {"enum": ["new", "paid", None, 1]},
            "meta": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": {"type": "boolean"}},
            },
        },
    },
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "string", "minLength": 2}]},
    {"type": "object", "dependentRequired": {"a": ["b"]}, "unevaluatedProperties": {"type": "integer"}},
    {"$defs": {"pos": {"type": "number", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "email"},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}]},
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 2000)
    | st.floats(-10, 2000, allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["ABC123", "2026-11-29", "2026-13-40", "a@b.c", "new", "paid"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "amount", "qty", "tags", "status", "meta", "a", "b", "c"]),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=60, deadline=None)
@given(data=json_values)
def test_fast_path_agrees_with_jsonschema(schema, data):
    cls = jsonschema.validators.validator_for(schema)
    expected = cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(data)
    compiled = compile_schema(schema)
    assert compiled.is_valid(data) is expected
    if expected:
        compiled.check(data, what="x")
    else:
        with pytest.raises(ContractViolation):
            compiled.check(data, what="x")


def test_violations_are_named_by_path():
    with pytest.raises(ContractViolation) as info:
        check_against_schema(SCHEMAS[0], {"id": "abc", "amount": -1, "meta": {"z": 1}}, what="output of x")
    problems = {p.field: p.reason for p in info.value.problems}
    assert "does not match" in problems["id"]
    assert "less than the minimum of 0" in problems["amount"]
    assert "Additional properties are not allowed ('z' was unexpected)" in problems["meta"]
    assert str(info.value).startswith("invalid output of x:")


def test_contract_keeps_its_compiled_schema_and_recompiles_on_change():
    contract = CapabilityContract(name="c", can_do=["x"], output_schema={"type": "object", "required": ["a"]})
    first = contract.compiled_schema("output")
    assert contract.compiled_schema("output") is first
    contract.check_output({"a": 1})
    with pytest.raises(ContractViolation) as info:
        contract.check_output({})
    assert (
        info.value.problems[0].field == "(root)"
        and "'a' is a required property" in info.value.problems[0].reason
    )
    assert "output of c@1.0.0" in str(info.value)
    contract.output_schema = {"type": "object", "required": ["b"]}
    assert contract.compiled_schema("output") is not first
    contract.check_output({"b": 1})


def test_remote_references_are_never_fetched():
    schema = {"$ref": "https://example.invalid/schema.json"}
    compiled = CompiledSchema(schema)
    assert compiled._fast is None  # the native validator refused it offline; jsonschema decides
