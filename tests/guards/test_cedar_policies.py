"""Cedar policies at routing, dispatch, approval and export: a denial is a typed refusal
naming the policy, and every decision is in the audit log with the policy's id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from middleware import Agency, AgencyConfig, FailureType, MemoryAuditLog, TaskState
from middleware.access import Principal, acting_as
from middleware.errors import InvalidInput
from middleware.guards import GuardConfig
from middleware.guards.cedar_policy import CedarPolicyEngine
from middleware.guards.policy import PolicyDenied, PolicyGate, PolicyRequest, PolicySubject

POLICIES = """
@id("refunds-need-finance")
forbid(principal, action == Action::"dispatch", resource)
when { resource.can_do.contains("issue_refund") && !principal.roles.contains("finance") };

@id("no-personal-data-offshore")
forbid(principal, action == Action::"dispatch", resource)
when { resource.tags.contains("offshore") && context.data_classes.contains("phone") };

@id("fast-shipper-retired")
forbid(principal, action == Action::"route", resource)
when { resource.name == "fast_shipper" };

@id("only-auditors-export")
forbid(principal, action == Action::"export", resource)
unless { principal.roles.contains("auditor") };
"""


def gate() -> PolicyGate:
    return PolicyGate(CedarPolicyEngine(POLICIES, default="allow"))


def records(agency: Agency, task_id: str, kind: str) -> list[Any]:
    return [r for _, r in agency.audit.records() if r.task_id == task_id and r.event_type == kind]


async def test_a_cedar_policy_denies_a_dispatch_with_the_policy_id_in_the_audit_log() -> None:
    agency = Agency(policy=gate())
    called: list[Any] = []
    await agency.register(
        {"name": "refunder", "can_do": ["issue_refund"], "slo_latency_ms": 5000},
        lambda request: called.append(request) or {"refunded": True},
    )
    outcome = await agency.submit({"text": "refund order A-1", "constraints": {"action": "issue_refund"}})
    assert called == [] and outcome.state is TaskState.FAILED
    failure = outcome.failures[0]
    assert failure.type is FailureType.POLICY_VIOLATION
    assert "refunds-need-finance" in failure.detail and failure.context["policy"] == "refunds-need-finance"
    [decision] = [d for d in records(agency, outcome.task_id, "policy.decision") if d.outcome == "deny"]
    assert decision.rule == "policy:refunds-need-finance"
    assert decision.detail["request"]["action"] == "dispatch"
    assert decision.detail["request"]["resource"]["id"] == "refunder@1.0.0"
    assert records(agency, outcome.task_id, "agent.dispatch") == []  # nothing was sent

    # the same dispatch for a caller whose role the policy names goes through, audited as allowed
    with acting_as(Principal(name="fin", role="admin")):
        allowed = Agency(
            policy=PolicyGate(CedarPolicyEngine(POLICIES.replace('"finance"', '"admin"'), default="allow"))
        )
        await allowed.register(
            {"name": "refunder", "can_do": ["issue_refund"], "slo_latency_ms": 5000},
            lambda r: {"refunded": True},
        )
        done = await allowed.submit({"text": "refund order A-1", "constraints": {"action": "issue_refund"}})
    assert done.state is TaskState.COMPLETED
    assert {d.outcome for d in records(allowed, done.task_id, "policy.decision")} == {"allow"}


async def test_the_data_classes_in_the_input_are_in_the_policy_context() -> None:
    config = AgencyConfig(guards=GuardConfig.model_validate({"personal_data": {"enabled": True}}))
    agency = Agency(config=config, policy=gate())
    await agency.register(
        {"name": "callcentre", "can_do": ["call_back"], "tags": ["offshore"], "slo_latency_ms": 5000},
        lambda request: {"ok": True},
    )
    with_phone = await agency.submit(
        {"text": "please call me back on 13812345678", "constraints": {"action": "call_back"}}
    )
    assert with_phone.state is TaskState.FAILED
    assert with_phone.failures[0].context["policy"] == "no-personal-data-offshore"
    [denied] = [d for d in records(agency, with_phone.task_id, "policy.decision") if d.outcome == "deny"]
    assert denied.detail["request"]["context"]["data_classes"] == ["phone"]
    without = await agency.submit({"text": "please call me back", "constraints": {"action": "call_back"}})
    assert without.state is TaskState.COMPLETED


async def test_routing_leaves_out_an_agent_a_policy_forbids() -> None:
    agency = Agency(policy=gate())
    await agency.register(
        {"name": "fast_shipper", "can_do": ["ship"], "slo_latency_ms": 100}, lambda r: {"by": "fast"}
    )
    await agency.register(
        {"name": "slow_shipper", "can_do": ["ship"], "slo_latency_ms": 4000}, lambda r: {"by": "slow"}
    )
    outcome = await agency.submit({"text": "ship it", "constraints": {"action": "ship"}})
    assert outcome.state is TaskState.COMPLETED and outcome.output == {"by": "slow"}
    routed = [(d.actors.agent, d.outcome) for d in records(agency, outcome.task_id, "policy.decision")][:2]
    assert routed == [("fast_shipper@1.0.0", "deny"), ("slow_shipper@1.0.0", "allow")]

    alone = Agency(policy=gate())
    await alone.register(
        {"name": "fast_shipper", "can_do": ["ship"], "slo_latency_ms": 100}, lambda r: {"by": "fast"}
    )
    refused = await alone.submit({"text": "ship it", "constraints": {"action": "ship"}})
    assert refused.state is TaskState.REJECTED and "fast-shipper-retired" in refused.reason


async def test_approval_and_export_denials_are_typed_refusals_naming_the_policy() -> None:
    engine = CedarPolicyEngine(
        POLICIES + '@id("no-self-service") forbid(principal == Person::"mallory", action, resource);',
        default="allow",
    )
    policy = PolicyGate(engine)
    log = MemoryAuditLog()
    with acting_as(Principal(name="siem", role="client")), pytest.raises(PolicyDenied) as denied:
        await policy.export(log, node="n1", what={"trace_id": ""})
    assert denied.value.policy == "only-auditors-export" and denied.value.reason == "POLICY_DENIED"
    with acting_as(Principal(name="alice", role="auditor")):
        await policy.export(log, node="n1", what={})
    assert [(r.outcome, r.rule) for _, r in log.records()] == [
        ("deny", "policy:only-auditors-export"),
        ("allow", "policy:default"),
    ]
    decision = engine.decide(
        PolicyRequest(
            principal=PolicySubject(type="Person", id="mallory", attrs={"roles": ["approver"]}),
            action="approve",
            resource=PolicySubject(type="Agent", id="refunder@1.0.0"),
        )
    )
    assert not decision.allowed and decision.policies == ["no-self-service"]


def test_bad_cedar_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cedar"
    bad.write_text("forbid(principal, action")
    with pytest.raises(InvalidInput) as err:
        CedarPolicyEngine.from_file(bad)
    assert str(bad) in str(err.value) and "not valid Cedar" in str(err.value)
    from middleware.server.definition import AgencyDefinition

    with pytest.raises(InvalidInput) as err:
        AgencyDefinition.parse({"policies": {"cedar": str(bad)}})
    assert "policies.cedar" in str(err.value)
    assert AgencyDefinition.parse({}).policies.gate() is None


def test_a_policy_that_cannot_be_evaluated_denies_naming_itself() -> None:
    """Cedar skips a policy it cannot evaluate; a broken forbid must not let a request through."""
    engine = CedarPolicyEngine(
        '@id("typo") forbid(principal, action, resource) when { resource.colour == "red" };', default="allow"
    )
    decision = engine.decide(
        PolicyRequest(
            principal=PolicySubject(type="Caller", id="bob"),
            action="dispatch",
            resource=PolicySubject(type="Agent", id="a@1.0.0", attrs={"name": "a"}),
        )
    )
    assert not decision.allowed and decision.policies == ["typo"] and "colour" in decision.errors[0]


async def test_the_tenant_of_a_request_is_the_principals() -> None:
    engine = CedarPolicyEngine(
        '@id("acme-only") forbid(principal, action, resource) unless { principal.tenant == "acme" };',
        default="allow",
    )
    agency = Agency(policy=PolicyGate(engine))
    await agency.register({"name": "x", "can_do": ["x"], "slo_latency_ms": 5000}, lambda r: {"ok": 1})
    ours = await agency.submit({"text": "x", "constraints": {"action": "x", "tenant": "acme"}})
    theirs = await agency.submit({"text": "x", "constraints": {"action": "x", "tenant": "globex"}})
    assert ours.state is TaskState.COMPLETED
    assert theirs.state is TaskState.REJECTED and "policy 'acme-only' forbids routing" in theirs.reason
