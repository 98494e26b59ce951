"""The core models refuse bad data and name the field and the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from middleware import CapabilityContract, GoalAssertion, InvalidInput, SMFMessage, TaskRequest


def smf(**overrides):
    data = {
        "sender": "research_agent",
        "receiver": "reporting_agent",
        "content": "Revenue grew 12.3% year on year.",
        "metadata": {
            "provenance": {"source": "SEC_FILING_2024_Q2", "reliability_score": 0.92},
            "freshness_ttl": 86400,
            "confidence_score": 0.87,
            "intention_trace": ["GOAL_ANALYSIS_001", "GOAL_REPORT_001"],
        },
    }
    data.update(overrides)
    return data


def fields(exc: InvalidInput) -> set[str]:
    return {p.field for p in exc.problems}


def test_valid_smf_message_gets_ids_and_utc_time():
    msg = SMFMessage.parse(smf())
    assert msg.message_id.startswith("msg_")
    assert msg.trace_id
    assert msg.created_at.tzinfo is not None
    assert not msg.is_stale()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("metadata", "confidence_score"), 1.5, "metadata.confidence_score"),
        (("metadata", "confidence_score"), -0.1, "metadata.confidence_score"),
        (("metadata", "freshness_ttl"), -1, "metadata.freshness_ttl"),
        (("metadata", "provenance", "reliability_score"), 2, "metadata.provenance.reliability_score"),
        (("metadata", "provenance", "source"), "", "metadata.provenance.source"),
        (("metadata", "intention_trace"), ["GOAL_A", " "], "metadata.intention_trace"),
        (("sender",), "", "sender"),
    ],
)
def test_bad_smf_fields_are_named(path, value, field):
    data = smf()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidInput) as info:
        SMFMessage.parse(data)
    assert field in fields(info.value)
    assert field in str(info.value)


def test_smf_missing_metadata_and_unknown_field_are_both_reported():
    data = smf(surprise=1)
    del data["metadata"]
    with pytest.raises(InvalidInput) as info:
        SMFMessage.parse(data)
    assert {"metadata", "surprise"} <= fields(info.value)


def test_smf_naive_timestamp_refused_and_staleness_and_drift_detected():
    with pytest.raises(InvalidInput) as info:
        SMFMessage.parse(smf(created_at="2026-01-01T00:00:00"))
    assert "created_at" in fields(info.value)
    old = SMFMessage.parse(smf(created_at=(datetime.now(UTC) - timedelta(days=2)).isoformat()))
    assert old.is_stale()
    deep = smf()
    deep["metadata"]["intention_trace"] = [f"GOAL_{i}" for i in range(6)]
    assert "depth 6" in SMFMessage.parse(deep).intention_drift()
    cyc = smf()
    cyc["metadata"]["intention_trace"] = ["GOAL_A", "GOAL_B", "GOAL_A"]
    assert "cycle" in SMFMessage.parse(cyc).intention_drift()


def contract(**overrides):
    data = {
        "name": "financial_calculator",
        "version": "1.2.0",
        "tags": ["Finance", " real-time "],
        "slo_latency_ms": 300,
        "can_do": ["compound_interest", "amortization_schedule"],
        "cannot_do": ["stock_prediction"],
        "input_schema": {"type": "object", "properties": {"principal": {"type": "number"}}},
        "output_schema": {"type": "object"},
    }
    data.update(overrides)
    return data


def test_contract_normalises_tags_and_keys_by_name_and_version():
    c = CapabilityContract.parse(contract())
    assert c.tags == ["finance", "real_time"]
    assert c.key == "financial_calculator@1.2.0"


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"cannot_do": ["compound_interest"]}, "cannot_do", "overlap"),
        ({"input_schema": {"type": "not-a-type"}}, "input_schema", "JSON Schema"),
        ({"output_schema": {"properties": 3}}, "output_schema", "JSON Schema"),
        ({"version": "1.2"}, "version", "semantic version"),
        ({"slo_latency_ms": 0}, "slo_latency_ms", "greater than 0"),
        ({"can_do": []}, "can_do", "at least 1"),
        ({"name": "Bad Name!"}, "name", "letter"),
    ],
)
def test_bad_contracts_are_refused_with_the_field(overrides, field, words):
    with pytest.raises(InvalidInput) as info:
        CapabilityContract.parse(contract(**overrides))
    assert field in fields(info.value)
    assert words in str(info.value)


def test_a_schema_seen_before_is_not_checked_again_and_a_bad_one_is_refused_every_time():
    from middleware.contracts import _meta_schema_problem

    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
    CapabilityContract.parse(contract(input_schema=schema))
    hits = _meta_schema_problem.cache_info().hits
    reordered = {"properties": {"n": {"minimum": 0, "type": "integer"}}, "type": "object"}
    CapabilityContract.parse(contract(input_schema=reordered, output_schema=schema))
    assert _meta_schema_problem.cache_info().hits == hits + 2  # the same schema, keys in any order
    for _ in range(2):
        with pytest.raises(InvalidInput, match="JSON Schema"):
            CapabilityContract.parse(contract(input_schema={"type": "object", "minProperties": -1}))
    assert CapabilityContract.parse(contract(input_schema={"maximum": 10**30})).input_schema  # beyond orjson


def test_contract_lists_every_problem_at_once():
    with pytest.raises(InvalidInput) as info:
        CapabilityContract.parse(contract(version="x", slo_latency_ms=-5, input_schema={"type": 7}))
    assert {"version", "slo_latency_ms", "input_schema"} <= fields(info.value)


def test_contract_checks_input_and_output_against_schemas():
    c = CapabilityContract.parse(contract())
    c.check_input({"principal": 100})
    with pytest.raises(InvalidInput) as info:
        c.check_input({"principal": "a lot"})
    assert info.value.reason == "SCHEMA_VIOLATION"
    assert "principal" in fields(info.value)


def goal(**overrides):
    data = {
        "id": "GOAL_FINANCE_001",
        "description": "Compute the schedule",
        "verification_steps": [{"kind": "contains", "value": "total"}],
    }
    data.update(overrides)
    return data


def test_goal_defaults_and_sentences():
    g = GoalAssertion.parse(
        goal(verification_steps=["检查输出是否包含DataController字段", "output contains the total"])
    )
    assert g.timeout_seconds == 300 and g.criticality == "medium"
    assert [s.kind for s in g.verification_steps] == ["contains", "contains"]
    assert g.verification_steps[0].value == "DataController"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 3601}, "timeout_seconds"),
        ({"criticality": "urgent"}, "criticality"),
        ({"id": "goal-1"}, "id"),
        ({"verification_steps": []}, "verification_steps"),
        ({"verification_steps": ["ensure the user is satisfied"]}, "verification_steps"),
        ({"verification_steps": [{"kind": "regex", "pattern": "("}]}, "verification_steps[0].pattern"),
        ({"verification_steps": [{"kind": "teleport"}]}, "verification_steps[0]"),
    ],
)
def test_bad_goals_are_refused_with_the_field(overrides, field):
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse(goal(**overrides))
    assert any(f.startswith(field) for f in fields(info.value)), info.value


def test_task_request_rejects_conflicting_goal_and_duplicate_steps():
    with pytest.raises(InvalidInput) as info:
        TaskRequest.parse({"text": "x", "goal": goal(), "goal_id": "GOAL_OTHER_1"})
    assert "disagree" in str(info.value)
    with pytest.raises(InvalidInput):
        TaskRequest.parse({"text": "x", "steps": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(InvalidInput) as info:
        TaskRequest.parse({"text": ""})
    assert "text" in fields(info.value)
