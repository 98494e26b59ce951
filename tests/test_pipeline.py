"""The governance pipeline end to end, in process."""

from __future__ import annotations

import pytest

from middleware import Agency, AgentReply, FailureType, InvalidInput, NotFound, ResolutionKind, TaskState
from middleware.audit import FileAuditLog
from middleware.demo import refused_request, warranty_request
from middleware.errors import AuditCorrupted
from middleware.testing import Hang, Raise, ScriptedAgent


async def no_sleep(_: float) -> None:
    return None


def contract(name: str, action: str, slo: int = 100, **extra):
    return {"name": name, "version": "1.0.0", "can_do": [action], "slo_latency_ms": slo, **extra}


async def test_reference_scenario_completes_with_retry_then_backup(demo_agency):
    outcome = await demo_agency.submit(warranty_request())
    assert outcome.state is TaskState.COMPLETED
    assert outcome.a2a_state == "TASK_STATE_COMPLETED"
    assert [s.agent for s in outcome.steps] == [
        "greeting_agent@1.0.0",
        "order_agent@1.0.0",
        "warranty_agent@2.1.0",
        "express_shipper@1.0.0",
        "reply_agent@1.0.0",
    ]
    assert [f.type for f in outcome.failures] == [FailureType.TOOL_TIMEOUT] * 3
    assert [r.kind for r in outcome.resolutions] == [
        ResolutionKind.RETRY,
        ResolutionKind.RETRY,
        ResolutionKind.USE_BACKUP,
    ]
    assert outcome.resolutions[-1].agent == "express_shipper@1.0.0"
    # the seed's three sentences: two at the eligibility stage, one on the reply
    assert outcome.goal_id == "GOAL_WARRANTY_001"  # anchored by greeting_agent, not the client
    assert [v.passed for v in outcome.stage_verdicts] == [True]
    assert len(outcome.stage_verdicts[0].steps) == 2
    assert outcome.goal_verdict is not None and outcome.goal_verdict.passed
    assert len(outcome.goal_verdict.steps) == 1
    assert "EXP123456" in outcome.output["reply"]
    assert outcome.routing[2]["chosen"] == "warranty_agent@2.1.0"
    # the shipper was called once per attempt, and never again after the switch
    shipper = demo_agency.agents.get("replacement_shipper@1.0.0")
    assert shipper.calls == 3


async def test_refused_request_runs_no_agent_and_says_why(demo_agency):
    outcome = await demo_agency.submit(refused_request())
    assert outcome.state is TaskState.REJECTED
    assert "financial_calculator@1.0.0: contract says it cannot do stock_prediction" in outcome.reason
    assert outcome.failures[0].type is FailureType.CAPABILITY_MISMATCH
    assert outcome.steps == []
    assert demo_agency.agents.get("financial_calculator@1.0.0").calls == 0


async def test_route_dry_run_explains_and_dispatches_nothing(demo_agency):
    decision = await demo_agency.route("my screen is shattered, I want a replacement")
    assert decision.chosen == "warranty_agent@2.1.0"
    assert "chose warranty_agent@2.1.0" in decision.explanation
    assert demo_agency.agents.get("warranty_agent@2.1.0").calls == 0
    refused = await demo_agency.route("predict the stock price")
    assert refused.refused
    assert refused.rejected[0].constraint == "cannot_do"


async def test_sync_agent_and_agent_reply_metadata_are_honoured():
    agency = Agency(sleep=no_sleep)

    def sync_agent(request):
        return AgentReply(output={"answer": 42}, confidence_score=0.5)

    await agency.register(contract("calc", "compute"), sync_agent)
    outcome = await agency.submit({"text": "please compute", "constraints": {"action": "compute"}})
    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == {"answer": 42}
    assert outcome.steps[0].confidence_score == 0.5


async def test_input_schema_violation_aborts_before_the_agent_runs():
    agency = Agency(sleep=no_sleep)
    agent = ScriptedAgent({"ok": True})
    schema = {"type": "object", "required": ["order_id"]}
    await agency.register(contract("orders", "order_lookup", input_schema=schema), agent)
    outcome = await agency.submit({"text": "where is my order", "constraints": {"action": "order_lookup"}})
    assert outcome.state is TaskState.FAILED
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert "order_id" in outcome.failures[0].detail
    assert agent.calls == 0


async def test_output_schema_violation_retries_then_uses_backup():
    agency = Agency(sleep=no_sleep)
    bad = ScriptedAgent({"total": "lots"})
    good = ScriptedAgent({"total": 3})
    schema = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
    await agency.register(contract("a_fast", "count", slo=50, output_schema=schema), bad)
    await agency.register(contract("b_slow", "count", slo=500, output_schema=schema), good)
    outcome = await agency.submit({"text": "count", "constraints": {"action": "count"}})
    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == {"total": 3}
    assert [f.type for f in outcome.failures] == [FailureType.SCHEMA_VIOLATION] * 2
    assert outcome.resolutions[-1].kind is ResolutionKind.USE_BACKUP


async def test_agent_error_is_a_typed_failure_not_a_crash():
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("flaky", "work"), ScriptedAgent(Raise(RuntimeError("db down")), {"ok": 1}))
    outcome = await agency.submit({"text": "work", "constraints": {"action": "work"}})
    assert outcome.state is TaskState.COMPLETED
    assert outcome.failures[0].type is FailureType.TOOL_ERROR
    assert "db down" in outcome.failures[0].detail


async def test_timeouts_with_no_backup_escalate_to_a_human_with_a_handover_packet():
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("slow", "work", slo=20), ScriptedAgent(Hang()))
    outcome = await agency.submit({"text": "work", "constraints": {"action": "work"}, "user_id": "u1"})
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.a2a_state == "TASK_STATE_INPUT_REQUIRED"
    assert outcome.resolutions[-1].kind is ResolutionKind.ESCALATE_TO_HUMAN
    packet = outcome.pending
    assert packet["kind"] == "human_handover"
    assert packet["failure"]["type"] == "TOOL_TIMEOUT"
    assert packet["state"]["text"] == "work"
    assert packet["suggested_reply"]


async def test_unmet_goal_is_a_goal_unmet_failure_with_the_failed_step():
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("writer", "write"), ScriptedAgent("a reply without the number"))
    goal = {
        "id": "GOAL_REPLY_001",
        "description": "reply carries a tracking number",
        "verification_steps": [{"kind": "regex", "pattern": r"[A-Z]{3}\d{6}"}],
        "criticality": "low",
    }
    outcome = await agency.submit({"text": "write", "goal": goal, "constraints": {"action": "write"}})
    assert outcome.state is TaskState.FAILED
    assert outcome.goal_verdict is not None and not outcome.goal_verdict.passed
    assert outcome.failures[-1].type is FailureType.GOAL_UNMET
    assert outcome.output == "a reply without the number"


async def test_goal_timeout_becomes_a_goal_timeout_failure():
    agency = Agency(sleep=no_sleep)
    # deadline (10 s SLO) is longer than the goal's 1 s timeout
    await agency.register(contract("slow", "work", slo=10_000), ScriptedAgent(Hang()))
    goal = {
        "id": "GOAL_FAST_001",
        "description": "fast",
        "verification_steps": ["output contains ok"],
        "timeout_seconds": 1,
    }
    outcome = await agency.submit({"text": "work", "goal": goal, "constraints": {"action": "work"}})
    assert outcome.failures[-1].type is FailureType.GOAL_TIMEOUT
    assert outcome.state is TaskState.INPUT_REQUIRED


async def test_invalid_request_is_refused_and_audited(demo_agency):
    with pytest.raises(InvalidInput) as info:
        await demo_agency.submit({"text": "hi", "confidence_score": 3})
    assert info.value.field == "confidence_score"
    last = list(demo_agency.audit.records())[-1][1]
    assert last.event_type == "message.rejected"
    assert "confidence_score" in last.detail["problems"][0]
    with pytest.raises(NotFound):
        await demo_agency.submit({"text": "hi", "goal_id": "GOAL_NOPE_001"})


async def test_every_step_is_audited_to_a_hash_chained_file(tmp_path):
    from middleware.demo import build_demo_agency

    audit = FileAuditLog(tmp_path)
    agency = await build_demo_agency(Agency(audit=audit, sleep=no_sleep))
    outcome = await agency.submit(warranty_request())
    await agency.close()
    records = [r for _, r in FileAuditLog(tmp_path).records() if r.trace_id == outcome.trace_id]
    kinds = [r.event_type for r in records]
    for expected in [
        "task.submitted",
        "message.accepted",
        "goal.anchored",
        "routing.decision",
        "agent.dispatch",
        "failure.event",
        "failure.resolution",
        "task.transition",
        "agent.result",
        "goal.verification",
        "task.completed",
    ]:
        assert expected in kinds, expected
    assert records[-1].outcome == "completed"
    assert outcome.audit_index == max(
        i for i, r in FileAuditLog(tmp_path).records() if r.trace_id == outcome.trace_id
    )
    assert all(r.actors.user == "u_789" for r in records)
    # greeting_agent anchors the goal in the first step: every record from then on carries it
    anchored = kinds.index("goal.anchored")
    assert all(r.goal_id == "GOAL_WARRANTY_001" for r in records[anchored:])
    assert not any(r.goal_id for r in records[:anchored])

    # tampering with one byte is caught when the log is reopened
    path = tmp_path / "audit.jsonl"
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"u_789"', b'"u_780"', 1))
    with pytest.raises(AuditCorrupted) as info:
        FileAuditLog(tmp_path)
    assert "audit.jsonl:" in str(info.value)


async def test_torn_tail_of_the_simple_audit_file_is_cut_and_kept_aside(tmp_path):
    from middleware.audit import AuditRecord

    log = FileAuditLog(tmp_path)
    await log.append(AuditRecord(event_type="x"))
    await log.close()
    torn = tmp_path / "audit.jsonl"
    torn.write_bytes(torn.read_bytes() + b'{"crc":1,"hash"')
    log = FileAuditLog(tmp_path)
    assert (tmp_path / "audit.jsonl.broken").read_bytes() == b'{"crc":1,"hash"'
    assert await log.append(AuditRecord(event_type="y")) == 2
    await log.close()


async def test_an_embedded_agency_refuses_a_remote_contract_it_has_no_way_to_call():
    # The core knows no transport: without an injected remote factory, a contract served at an
    # endpoint is refused at registration, naming the agent and the way to inject one.
    from middleware import FailedPrecondition

    agency = Agency(sleep=no_sleep)
    with pytest.raises(FailedPrecondition) as info:
        await agency.register(contract("far_agent", "answer_faq", endpoint="127.0.0.1:1"))
    assert "far_agent@1.0.0" in str(info.value) and "remote_factory" in str(info.value)
    assert "far_agent@1.0.0" not in [e.key for e in await agency.catalog.all()]
    # with an in-process callable the endpoint is only information
    await agency.register(contract("near_agent", "answer_faq", endpoint="127.0.0.1:1"), ScriptedAgent("hi"))
    await agency.close()


async def test_a_remote_contract_from_a_shared_catalog_is_tool_unavailable_without_a_factory():
    # Another replica registered it (here: straight into the catalog); this agency cannot call it.
    from middleware.contracts import CapabilityContract

    agency = Agency(sleep=no_sleep)
    agency.failures.policy.max_retries = 0
    far = CapabilityContract.parse(contract("far_agent", "answer_faq", endpoint="127.0.0.1:1"))
    await agency.catalog.register(far)
    outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.failures[0].type is FailureType.TOOL_UNAVAILABLE
    assert "far_agent@1.0.0" in outcome.failures[0].detail
    assert "no remote factory" in outcome.failures[0].detail
    await agency.close()
