"""Staged verification through Agency.submit: a failure is caught at the stage where it happens."""

from __future__ import annotations

import asyncio

import pytest

from middleware import Agency, FailureType, InvalidInput, TaskState
from middleware.audit.record import AuditEventType
from middleware.testing import ScriptedAgent


async def no_sleep(_: float) -> None:
    return None


PAYMENT_GOAL = {
    "id": "GOAL_PAYMENT_001",
    "description": "Pay the supplier only after KYC and a compliance review.",
    "stages": [
        {
            "name": "kyc",
            "step": "kyc_report",
            "description": "KYC report obtained",
            "verification_steps": ['$.kyc_status equals "verified"', "$.risk_score <= 0.5"],
        },
        {
            "name": "review",
            "step": "compliance",
            "description": "payment compliance reviewed",
            "verification_steps": ["$.compliant is true"],
        },
    ],
    "verification_steps": ["output contains approved"],
    "timeout_seconds": 60,
    "criticality": "high",
}


def contract(name: str, action: str) -> dict:
    return {"name": name, "version": "1.0.0", "can_do": [action], "slo_latency_ms": 1000}


async def payment_agency(kyc_output, review_output=None, final_output=None, **goal_overrides):
    agency = Agency(sleep=no_sleep)
    agents = {
        "kyc": ScriptedAgent(kyc_output, name="kyc"),
        "review": ScriptedAgent(review_output or {"compliant": True}, name="review"),
        "pay": ScriptedAgent(final_output or {"status": "approved"}, name="pay"),
    }
    await agency.register(contract("kyc_agent", "kyc_report"), agents["kyc"])
    await agency.register(contract("compliance_agent", "payment_review"), agents["review"])
    await agency.register(contract("payment_agent", "make_payment"), agents["pay"])
    agency.register_goal({**PAYMENT_GOAL, **goal_overrides})
    return agency, agents


def request(**extra) -> dict:
    return {
        "text": "pay supplier ACME 10,000 EUR",
        "goal_id": "GOAL_PAYMENT_001",
        "steps": [
            {"name": "kyc_report", "action": "kyc_report"},
            {"name": "compliance", "action": "payment_review"},
            {"name": "payment", "action": "make_payment"},
        ],
        **extra,
    }


def verification_records(agency: Agency):
    return [r for _, r in agency.audit.records() if r.event_type == AuditEventType.VERIFICATION.value]


async def test_all_stages_and_the_final_check_pass():
    agency, agents = await payment_agency({"kyc_status": "verified", "risk_score": 0.1})
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.COMPLETED
    assert outcome.failed_stage == ""
    assert [(v.stage, v.passed) for v in outcome.stage_verdicts] == [("kyc", True), ("review", True)]
    assert outcome.goal_verdict.stage == "" and outcome.goal_verdict.passed
    records = verification_records(agency)
    assert [(r.detail["stage"], r.outcome) for r in records] == [
        ("kyc", "passed"),
        ("review", "passed"),
        ("", "passed"),
    ]
    assert records[0].detail["step"] == "kyc_report"
    assert records[0].detail["steps"][1]["expected"] == {"le": 0.5}
    assert records[0].goal_id == "GOAL_PAYMENT_001"
    assert agents["pay"].calls == 1


async def test_a_bad_kyc_report_stops_the_task_at_the_kyc_stage():
    agency, agents = await payment_agency({"kyc_status": "rejected", "risk_score": 0.9})
    outcome = await agency.submit(request())
    assert outcome.failed_stage == "kyc"
    assert outcome.state is TaskState.INPUT_REQUIRED  # high criticality: a human takes over
    assert agents["review"].calls == 0 and agents["pay"].calls == 0  # caught where it happened
    (failure,) = outcome.failures
    assert failure.type is FailureType.GOAL_UNMET
    assert failure.step == "kyc_report" and failure.context["stage"] == "kyc"
    assert "stage kyc of goal GOAL_PAYMENT_001 not met" in failure.detail
    assert outcome.goal_verdict.stage == "kyc" and not outcome.goal_verdict.passed
    steps = outcome.goal_verdict.steps
    assert steps[0].actual == "rejected" and steps[0].expected == "verified"
    assert steps[1].reason == "$.risk_score is 0.9, expected <= 0.5"
    assert outcome.pending["kind"] == "human_handover"
    (record,) = verification_records(agency)
    assert record.outcome == "failed" and record.detail["stage"] == "kyc"
    assert [s["passed"] for s in record.detail["steps"]] == [False, False]


async def test_the_second_stage_fails_after_the_first_passed():
    agency, agents = await payment_agency(
        {"kyc_status": "verified", "risk_score": 0.2}, review_output={"compliant": False}, criticality="low"
    )
    outcome = await agency.submit(request())
    assert outcome.failed_stage == "review"
    assert outcome.state is TaskState.FAILED  # low criticality: abort
    assert [(v.stage, v.passed) for v in outcome.stage_verdicts] == [("kyc", True), ("review", False)]
    assert agents["pay"].calls == 0


async def test_final_verification_still_runs_after_the_stages():
    agency, _ = await payment_agency(
        {"kyc_status": "verified", "risk_score": 0.2}, final_output={"status": "queued"}
    )
    outcome = await agency.submit(request())
    assert outcome.failed_stage == ""
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.goal_verdict.stage == "" and not outcome.goal_verdict.passed


async def test_stage_bound_to_a_step_the_task_lacks_is_refused():
    agency, agents = await payment_agency({"kyc_status": "verified"})
    with pytest.raises(InvalidInput) as info:
        await agency.submit(request(steps=[{"name": "payment", "action": "make_payment"}]))
    assert {p.field for p in info.value.problems} == {"goal.stages[0].step", "goal.stages[1].step"}
    assert agents["pay"].calls == 0


async def test_inline_goal_with_a_stage_on_the_single_main_step():
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("kyc_agent", "kyc_report"), ScriptedAgent({"kyc_status": "pending"}))
    outcome = await agency.submit(
        {
            "text": "kyc please",
            "constraints": {"action": "kyc_report"},
            "goal": {
                "id": "GOAL_KYC_001",
                "description": "kyc",
                "criticality": "low",
                "stages": [
                    {"name": "kyc", "step": "main", "verification_steps": ['字段kyc_status等于"verified"']}
                ],
            },
        }
    )
    assert outcome.failed_stage == "kyc" and outcome.state is TaskState.FAILED


async def test_manual_steps_end_pending_with_a_human_even_for_low_criticality():
    agency, _ = await payment_agency(
        {"kyc_status": "verified", "risk_score": 0.2},
        criticality="low",
        verification_steps=["output contains approved", "manual: the supplier confirmed receipt"],
    )
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.goal_verdict.status == "pending_manual"
    assert outcome.pending["kind"] == "human_handover"
    assert outcome.failures[-1].context["manual_pending"] == ["the supplier confirmed receipt"]


async def test_a_verification_past_the_goal_timeout_is_goal_timeout():
    agency, _ = await payment_agency({"kyc_status": "verified", "risk_score": 0.2}, timeout_seconds=1)
    never = asyncio.Event()

    async def sanctions_api(output):
        await never.wait()

    agency.verifier.checks.register("sanctions", sanctions_api, timeout_seconds=30)
    goal = agency.get_goal("GOAL_PAYMENT_001").model_dump()
    goal["stages"][0]["verification_steps"].append({"kind": "custom", "name": "sanctions"})
    agency.register_goal(goal, replace=True)
    outcome = await agency.submit(request())
    assert [f.type for f in outcome.failures] == [FailureType.GOAL_TIMEOUT]
    assert outcome.state in (TaskState.FAILED, TaskState.INPUT_REQUIRED)
