"""One end-to-end scenario per failure type: detection, resolution, final state (and audit)."""

from __future__ import annotations

import json
from datetime import timedelta

from middleware import (
    AgencyConfig,
    AgentReply,
    FailurePolicy,
    FailureType,
    GoalAssertion,
    Provenance,
    ResolutionKind,
    TaskState,
    TaskStep,
)
from middleware.audit import MemoryAuditLog
from middleware.detectors import DetectorConfig, PolicyRules
from middleware.smf import utcnow
from middleware.testing import Hang, Raise, ScriptedAgent

from .conftest import audit_records, audit_types, build, contract, task


def kinds(outcome):
    return [r.kind for r in outcome.resolutions]


def types(outcome):
    return [f.type for f in outcome.failures]


async def test_tool_timeout_retries_with_backoff_then_uses_the_backup():
    slow = ScriptedAgent(Hang())
    backup = ScriptedAgent({"answer": 1})
    agency, sleep, _ = await build(
        [(contract("primary", slo_ms=20), slow), (contract("secondary", slo_ms=400), backup)]
    )
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED
    assert out.output == {"answer": 1}
    assert types(out) == [FailureType.TOOL_TIMEOUT] * 3
    assert kinds(out) == [ResolutionKind.RETRY, ResolutionKind.RETRY, ResolutionKind.USE_BACKUP]
    assert slow.calls == 3 and backup.calls == 1
    # exponential: ~100 ms then ~200 ms, each within ±20 % jitter
    assert len(sleep.delays) == 2
    assert 0.08 <= sleep.delays[0] <= 0.12 and 0.16 <= sleep.delays[1] <= 0.24
    seen = audit_types(agency, out.task_id)
    assert seen.count("failure.event") == 3 and seen.count("failure.resolution") == 3
    transitions = [r.detail["to"] for r in audit_records(agency, "task.transition", out.task_id)]
    assert "retrying" in transitions and transitions[-1] == "completed"


async def test_tool_unavailable_switches_to_the_backup_at_once():
    down = ScriptedAgent(Raise(ConnectionRefusedError("connection refused")))
    backup = ScriptedAgent({"answer": 2})
    agency, sleep, _ = await build([(contract("primary", slo_ms=10), down), (contract("secondary"), backup)])
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED and out.output == {"answer": 2}
    assert types(out) == [FailureType.TOOL_UNAVAILABLE]
    assert kinds(out) == [ResolutionKind.USE_BACKUP]
    assert out.resolutions[0].agent == "secondary@1.0.0"
    assert down.calls == 1 and sleep.delays == []


async def test_tool_unavailable_without_backup_hands_over_to_a_human():
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    agency, _, _ = await build([(contract("primary"), down)])
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED
    assert out.a2a_state == "TASK_STATE_INPUT_REQUIRED"
    packet = out.pending
    assert packet["kind"] == "human_handover"
    assert packet["blocking_point"]["failure_type"] == "TOOL_UNAVAILABLE"
    assert packet["blocking_point"]["agent"] == "primary@1.0.0"
    assert packet["suggested_reply"]
    assert packet["state"]["text"] == "please look this up"
    assert "human.handover" in audit_types(agency, out.task_id)


async def test_tool_error_is_retried_within_the_per_type_cap_then_backed_up():
    buggy = ScriptedAgent(Raise(ValueError("bug")))
    backup = ScriptedAgent({"answer": 3})
    config = AgencyConfig(failure_policies={FailureType.TOOL_ERROR: FailurePolicy(max_retries=1)})
    agency, sleep, _ = await build(
        [(contract("primary", slo_ms=10), buggy), (contract("secondary"), backup)], config=config
    )
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED and out.output == {"answer": 3}
    assert types(out) == [FailureType.TOOL_ERROR, FailureType.TOOL_ERROR]
    assert kinds(out) == [ResolutionKind.RETRY, ResolutionKind.USE_BACKUP]
    assert "ValueError: bug" in out.failures[0].detail
    assert buggy.calls == 2 and len(sleep.delays) == 1


async def test_context_ambiguity_asks_a_structured_clarification():
    unsure = ScriptedAgent(AgentReply(output={"answer": "It is probably plan A"}, confidence_score=0.5))
    agency, _, _ = await build([(contract("primary"), unsure)])
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED
    assert types(out) == [FailureType.CONTEXT_AMBIGUITY]
    assert kinds(out) == [ResolutionKind.ASK_CLARIFICATION]
    pending = out.pending
    assert pending["kind"] == "clarification" and pending["question"]
    assert [o["id"] for o in pending["options"]] == ["accept", "retry"]  # never an open question
    assert out.output is None  # the hedged answer is held, not delivered


async def test_context_ambiguity_offers_the_agents_own_candidates_in_chinese():
    unsure = ScriptedAgent(
        AgentReply(
            output={"answer": "可能是以下方案之一", "options": ["方案一", "方案二"]}, confidence_score=0.4
        )
    )
    agency, _, _ = await build([(contract("primary"), unsure)])
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED
    assert [o["label"] for o in out.pending["options"]] == ["方案一", "方案二"]


async def test_hedging_with_high_confidence_is_not_ambiguous():
    sure = ScriptedAgent(AgentReply(output={"answer": "maybe, but I checked: plan A"}, confidence_score=0.9))
    agency, _, _ = await build([(contract("primary"), sure)])
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED and out.failures == []


async def test_policy_violation_is_quarantined_and_never_reaches_anyone():
    secret = "card number 4111-1111-1111-1111"
    leaky = ScriptedAgent({"answer": f"here it is: {secret}"})
    nxt = ScriptedAgent({"reply": "done"})
    config = AgencyConfig(
        detectors=DetectorConfig(policy=PolicyRules(deny_patterns=[r"\b(?:\d{4}-){3}\d{4}\b"]))
    )
    agency, _, alerts = await build(
        [(contract("leaky"), leaky), (contract("replier", "compose"), nxt)], config=config
    )
    request = task(steps=[TaskStep(name="lookup", action="lookup"), TaskStep(name="reply", action="compose")])
    out = await agency.submit(request)
    assert out.state is TaskState.FAILED
    assert types(out) == [FailureType.POLICY_VIOLATION]
    assert kinds(out) == [ResolutionKind.QUARANTINE]
    assert nxt.calls == 0  # the next agent never sees it
    assert secret not in out.model_dump_json()  # nor does the user
    log = agency.audit
    assert isinstance(log, MemoryAuditLog)
    assert all(secret not in r.model_dump_json() for _, r in log.records())  # nor the audit log
    quarantined = audit_records(agency, "failure.quarantine", out.task_id)
    assert len(quarantined) == 1 and len(quarantined[0].detail["output_sha256"]) == 64
    assert [a.kind for a in alerts.alerts] == ["quarantine"]
    assert alerts.alerts[0].rule.startswith("deny_patterns:")


async def test_policy_violation_by_deny_term_and_by_a_pluggable_classifier():
    from middleware.detectors import Detectors, PolicyFinding

    def classifier(text: str) -> PolicyFinding | None:
        return PolicyFinding(rule="toxicity", reason="classifier score 0.97") if "idiot" in text else None

    rude = ScriptedAgent({"answer": "you idiot"})
    agency, _, _ = await build(
        [(contract("rude"), rude)],
        detectors=Detectors(
            DetectorConfig(policy=PolicyRules(deny_terms=["forbidden"])), classifier=classifier
        ),
    )
    out = await agency.submit(task())
    assert out.state is TaskState.FAILED and out.failures[0].context["rule"] == "toxicity"

    banned = ScriptedAgent({"answer": "a FORBIDDEN word"})
    agency, _, _ = await build(
        [(contract("banned"), banned)],
        config=AgencyConfig(detectors=DetectorConfig(policy=PolicyRules(deny_terms=["forbidden"]))),
    )
    out = await agency.submit(task())
    assert out.state is TaskState.FAILED and out.failures[0].context["rule"] == "deny_terms:forbidden"


async def test_data_inconsistency_returns_the_conflict_with_both_sources():
    shop = ScriptedAgent(
        AgentReply(output={"price": 100}, provenance=Provenance(source="shop_db", reliability_score=0.9))
    )
    feed = ScriptedAgent(
        AgentReply(output={"price": 120}, provenance=Provenance(source="partner_feed", reliability_score=0.6))
    )
    agency, _, _ = await build([(contract("shop"), shop), (contract("feed", "quote"), feed)])
    request = task(steps=[TaskStep(name="list", action="lookup"), TaskStep(name="quote", action="quote")])
    out = await agency.submit(request)
    assert out.state is TaskState.INPUT_REQUIRED
    assert types(out) == [FailureType.DATA_INCONSISTENCY]
    assert kinds(out) == [ResolutionKind.RETURN_CONFLICT]
    conflict = out.pending["conflict"]
    assert conflict["fact"] == "price"
    assert [(v["value"], v["source"]) for v in conflict["values"]] == [
        (100, "shop_db"),
        (120, "partner_feed"),
    ]
    assert out.output is None  # never merged silently
    # the user settles it: the chosen value goes on
    done = await agency.resume(out.task_id, answer="value_1")
    assert done.state is TaskState.COMPLETED and done.output == {"price": 100}


async def test_schema_violation_in_an_output_is_retried_once_then_backed_up():
    schema = {"type": "object", "required": ["answer"]}
    sloppy = ScriptedAgent({"wrong": 1})
    backup = ScriptedAgent({"answer": 5})
    agency, _, _ = await build(
        [
            (contract("sloppy", slo_ms=10, output_schema=schema), sloppy),
            (contract("careful", output_schema=schema), backup),
        ]
    )
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED and out.output == {"answer": 5}
    assert types(out) == [FailureType.SCHEMA_VIOLATION] * 2
    assert kinds(out) == [ResolutionKind.RETRY, ResolutionKind.USE_BACKUP]
    assert "answer" in out.failures[0].detail


async def test_schema_violation_in_the_input_aborts():
    strict = ScriptedAgent({"answer": 1})
    agency, _, _ = await build(
        [(contract("strict", input_schema={"type": "object", "required": ["order_id"]}), strict)]
    )
    out = await agency.submit(task())
    assert out.state is TaskState.FAILED
    assert types(out) == [FailureType.SCHEMA_VIOLATION] and kinds(out) == [ResolutionKind.ABORT]
    assert out.failures[0].context["direction"] == "input"
    assert strict.calls == 0


def _goal(criticality: str = "high") -> GoalAssertion:
    return GoalAssertion(
        id="GOAL_TRACKING_001",
        description="the reply gives a tracking number",
        verification_steps=[{"kind": "contains", "value": "tracking"}],
        criticality=criticality,
    )


async def test_goal_unmet_escalates_to_a_human_with_a_handover_packet():
    agent = ScriptedAgent({"reply": "your parcel is on its way"})
    agency, _, _ = await build([(contract("replier"), agent)])
    out = await agency.submit(task(goal=_goal()))
    assert out.state is TaskState.INPUT_REQUIRED
    assert types(out) == [FailureType.GOAL_UNMET]
    assert kinds(out) == [ResolutionKind.ESCALATE_TO_HUMAN]
    assert out.goal_verdict is not None and not out.goal_verdict.passed
    packet = out.pending
    assert packet["kind"] == "human_handover"
    steps = packet["completed_steps"]
    assert steps[0]["name"] == "main" and steps[0]["status"] == "completed"
    assert steps[0]["started_at"] and steps[0]["finished_at"]
    assert packet["blocking_point"]["failure_type"] == "GOAL_UNMET"
    assert packet["state"]["outputs"]["main"] == {"reply": "your parcel is on its way"}
    assert packet["suggested_reply"]


async def test_goal_unmet_on_a_low_criticality_goal_fails():
    agent = ScriptedAgent({"reply": "nothing useful"})
    agency, _, _ = await build([(contract("replier"), agent)])
    out = await agency.submit(task(goal=_goal("low")))
    assert out.state is TaskState.FAILED and kinds(out) == [ResolutionKind.ABORT]


async def test_goal_timeout_escalates_with_the_state_reached():
    slow = ScriptedAgent(Hang())
    agency, _, _ = await build([(contract("slow", slo_ms=60_000), slow)])
    goal = _goal().model_copy(update={"timeout_seconds": 1})
    out = await agency.submit(task(goal=goal))
    assert out.state is TaskState.INPUT_REQUIRED
    assert types(out) == [FailureType.GOAL_TIMEOUT]
    assert out.pending["blocking_point"]["failure_type"] == "GOAL_TIMEOUT"


async def test_capability_mismatch_is_rejected_before_any_agent_runs():
    agent = ScriptedAgent({"answer": 1})
    agency, _, _ = await build(
        [(contract("calc", "compound_interest", cannot_do=["stock_prediction"]), agent)]
    )
    out = await agency.submit(task("predict the stock price", action="stock_prediction"))
    assert out.state is TaskState.REJECTED and out.a2a_state == "TASK_STATE_REJECTED"
    assert types(out) == [FailureType.CAPABILITY_MISMATCH] and kinds(out) == [ResolutionKind.ABORT]
    assert "cannot do stock_prediction" in out.reason
    assert agent.calls == 0


async def test_stale_data_is_retried_for_fresh_data():
    old = AgentReply(output={"rate": 7.1}, freshness_ttl=60, created_at=utcnow() - timedelta(hours=1))
    fresh = AgentReply(output={"rate": 7.2}, freshness_ttl=60)
    agent = ScriptedAgent(old, fresh)
    agency, _, _ = await build([(contract("rates"), agent)])
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED and out.output == {"rate": 7.2}
    assert types(out) == [FailureType.STALE_DATA] and kinds(out) == [ResolutionKind.RETRY]
    assert out.failures[0].context["freshness_ttl"] == 60


async def test_intent_drift_cycle_or_depth_escalates():
    cyc = ScriptedAgent(AgentReply(output={"a": 1}, intention_trace=["GOAL_A", "GOAL_B", "GOAL_A"]))
    agency, _, _ = await build([(contract("drifter"), cyc)])
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED
    assert types(out) == [FailureType.INTENT_DRIFT] and "cycle" in out.failures[0].detail
    assert out.pending["kind"] == "human_handover"

    deep = ScriptedAgent(AgentReply(output={"a": 1}, intention_trace=[f"GOAL_{i}" for i in range(6)]))
    agency, _, _ = await build([(contract("deep"), deep)])
    out = await agency.submit(task())
    assert types(out) == [FailureType.INTENT_DRIFT] and "depth 6" in out.failures[0].detail


async def test_every_failure_resolution_and_transition_is_audited():
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    agency, _, _ = await build([(contract("primary"), down)])
    out = await agency.submit(task())
    failures = audit_records(agency, "failure.event", out.task_id)
    resolutions = audit_records(agency, "failure.resolution", out.task_id)
    assert [r.detail["type"] for r in failures] == [f.type.value for f in out.failures]
    assert [r.detail["kind"] for r in resolutions] == [r.kind.value for r in out.resolutions]
    transitions = [
        (r.detail["from"], r.detail["to"]) for r in audit_records(agency, "task.transition", out.task_id)
    ]
    assert transitions == [
        ("submitted", "routing"),
        ("routing", "dispatched"),
        ("dispatched", "input_required"),
    ]
    stored = await agency.get_task(out.task_id)
    assert json.loads(stored.model_dump_json())["state"] == "input_required"


async def test_a_configured_backup_agent_is_preferred_over_the_routers_next():
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    next_best = ScriptedAgent({"by": "next_best"})
    standby = ScriptedAgent({"by": "standby"})
    config = AgencyConfig(
        failure_policies={FailureType.TOOL_UNAVAILABLE: FailurePolicy(backup_agent="standby@1.0.0")}
    )
    agency, _, _ = await build(
        [
            (contract("primary", slo_ms=10), down),
            (contract("next_best", slo_ms=100), next_best),
            (contract("standby", slo_ms=900), standby),
        ],
        config=config,
    )
    out = await agency.submit(task())
    assert out.routing[0]["fallbacks"][0] == "next_best@1.0.0"
    assert out.output == {"by": "standby"} and next_best.calls == 0
