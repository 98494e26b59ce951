"""The SMF minimum viable set in the pipeline, and the computed reliability score (seed 3.4, 5.2)."""

from __future__ import annotations

import pytest

from middleware import Agency, AgentReply, FailureType, InvalidInput, SMFMessage, TaskState, reliability
from middleware.audit import MemoryAuditLog
from middleware.reliability import ReliabilityConfig, WeightedReliabilityScorer
from middleware.server.settings import AgencyConfig
from middleware.smf import Provenance, freshness_problem
from middleware.testing import ScriptedAgent


async def no_sleep(_: float) -> None:
    return None


def test_the_minimum_viable_set():
    minimal = {
        "sender": "a",
        "receiver": "b",
        "content": "x",
        "metadata": {
            "provenance": {"source": "s", "reliability_score": 0.5},
            "intention_trace": ["GOAL_A_001"],
        },
    }
    message = SMFMessage.parse(minimal)
    assert message.metadata.freshness_ttl is None and message.metadata.confidence_score is None
    assert message.expires_at() is None and not message.is_stale()
    for missing in ("provenance", "intention_trace"):
        bad = {**minimal, "metadata": {k: v for k, v in minimal["metadata"].items() if k != missing}}
        with pytest.raises(InvalidInput) as err:
            SMFMessage.parse(bad)
        assert f"metadata.{missing}" in {p.field for p in err.value.problems}


def test_freshness_problem_names_why():
    meta = SMFMessage.parse(
        {
            "sender": "a",
            "receiver": "b",
            "content": "x",
            "metadata": {
                "provenance": {"source": "s", "reliability_score": 0.5},
                "intention_trace": ["GOAL_A_001"],
                "domain": "Finance",
            },
        }
    ).metadata
    assert freshness_problem(meta) == "required in the time-critical domain 'Finance'"
    assert freshness_problem(meta, time_critical_domains={"medical"}) is None
    assert freshness_problem(meta.model_copy(update={"freshness_ttl": 60})) is None


async def _one_step(contract: dict, reply: AgentReply, *, goal: dict | None = None, config=None):
    agency = Agency(sleep=no_sleep, config=config)
    await agency.register({"name": "a", "can_do": ["act"], **contract}, ScriptedAgent(reply))
    request = {"text": "go", "steps": [{"name": "main", "action": "act"}]}
    if goal:
        request["goal"] = goal
    return await agency.submit(request)


@pytest.mark.parametrize(
    ("contract", "goal", "why"),
    [
        ({"tags": ["logistics"]}, None, "the domain 'logistics' is time-critical"),
        ({"time_critical": True}, None, "contract a@1.0.0 is time-critical"),
        (
            {},
            {
                "id": "GOAL_PAY_001",
                "description": "pay",
                "verification_steps": ["output contains x"],
                "time_critical": True,
            },
            "goal GOAL_PAY_001 is time-critical",
        ),
    ],
)
async def test_a_time_critical_answer_needs_a_ttl(contract, goal, why):
    outcome = await _one_step(contract, AgentReply(output={"x": 1}), goal=goal)
    failure = outcome.failures[0]
    assert failure.type is FailureType.SCHEMA_VIOLATION
    assert "metadata.freshness_ttl" in failure.detail and why in failure.detail
    ok = await _one_step(contract, AgentReply(output="x", freshness_ttl=60), goal=goal)
    assert ok.state is TaskState.COMPLETED


async def test_an_ordinary_answer_needs_no_ttl():
    outcome = await _one_step({"tags": ["faq"]}, AgentReply(output={"x": 1}))
    assert outcome.state is TaskState.COMPLETED


async def test_the_time_critical_domains_are_configurable():
    config = AgencyConfig(time_critical_domains=["faq"])
    outcome = await _one_step({"tags": ["faq"]}, AgentReply(output={"x": 1}), config=config)
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION


def test_the_computed_score_and_its_parts():
    scorer = WeightedReliabilityScorer(
        ReliabilityConfig(authority={"sec_filing": 0.95, "blog:*": 0.4}, default_authority=0.5)
    )
    known = [reliability.Testimony(source="orders_db", output={"price": 100, "sku": "A"})]
    official = scorer.score(
        "sec_filing", output={"price": 100}, age_seconds=0, freshness_ttl=3600, known=known
    )
    assert (official.authority, official.recency, official.consistency) == (0.95, 1.0, 1.0)
    assert official.score == round(0.5 * 0.95 + 0.25 + 0.25, 4)
    blog = scorer.score(
        "blog:techcrunch",
        output={"price": 120, "sku": "A"},
        age_seconds=1800,
        freshness_ttl=3600,
        known=known,
    )
    assert (blog.authority, blog.recency, blog.consistency) == (0.4, 0.5, 0.5)
    assert blog.disagreeing == ["price"] and blog.checked_facts == 2
    assert blog.score == round(0.5 * 0.4 + 0.25 * 0.5 + 0.25 * 0.5, 4)
    stale = scorer.score("x", output="t", age_seconds=99, freshness_ttl=10, known=[], claimed=0.99)
    assert stale.recency == 0 and stale.claimed == 0.99 and stale.authority == 0.5


async def test_the_audit_record_holds_the_computed_score_and_the_claim_beside_it():
    audit = MemoryAuditLog()
    agency = Agency(sleep=no_sleep, audit=audit, config=AgencyConfig(reliability={"authority": {"crm": 0.9}}))
    claims = AgentReply(output={"vip": True}, provenance=Provenance(source="crm", reliability_score=0.2))
    silent = {"vip": False}  # names no source, and contradicts the first answer
    await agency.register({"name": "a", "can_do": ["act"]}, ScriptedAgent(claims))
    await agency.register({"name": "b", "can_do": ["check"]}, ScriptedAgent(silent))
    agency.config.detectors.check_consistency = False  # the score, not the detector, is under test
    outcome = await agency.submit(
        {"text": "go", "steps": [{"name": "one", "action": "act"}, {"name": "two", "action": "check"}]}
    )
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    results = [r.detail for _, r in audit.records() if r.event_type == "agent.result"]
    first, second = results[0]["reliability"], results[1]["reliability"]
    assert first["source"] == "crm" and first["claimed"] == 0.2 and first["authority"] == 0.9
    assert results[0]["message"]["metadata"]["provenance"]["reliability_score"] == first["score"] != 0.2
    # b is scored as itself (not with crm's score) and loses consistency for contradicting it
    assert second["source"] == "b@1.0.0" and second["claimed"] is None
    assert second["consistency"] == 0.0 and second["disagreeing"] == ["vip"]
    assert outcome.steps[1].provenance.source == "b@1.0.0"


def test_the_built_in_scorer_and_judges_implement_their_protocols():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from middleware.drift import IntentJudge, LangChainIntentJudge, RuleBasedIntentJudge
    from middleware.reliability import ReliabilityScorer

    assert isinstance(WeightedReliabilityScorer(), ReliabilityScorer)
    assert isinstance(RuleBasedIntentJudge(), IntentJudge)
    assert isinstance(LangChainIntentJudge(FakeListChatModel(responses=["{}"])), IntentJudge)
