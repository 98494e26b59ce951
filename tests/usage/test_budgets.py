"""Usage, prices and budgets: summed per step and task, audited, alerts once, a hard stop before
the next step — with a scripted LLM (a fake chat model) that reports token usage.

Every date is fixed (an injected clock), month ends and a time zone included.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from middleware import Agency, AgentReply
from middleware.agency_config import AgencyConfig
from middleware.audit.record import AuditEventType
from middleware.langchain import wrap_runnable
from middleware.langchain.usage import ModelRateLimits
from middleware.messaging.limits import MemoryBuckets
from middleware.tasks import TaskState
from middleware.testing import ManualClock, ScriptedAgent
from middleware.usage import Period, Usage, UsageRateLimits, UsageSettings, period_key


def records(agency: Agency, kind: AuditEventType) -> list[Any]:
    return [r for _, r in agency.audit.records() if r.event_type == kind.value]


# -- calendar periods ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "zone", "day", "month"),
    [
        (datetime(2026, 1, 31, 23, 59, 59, tzinfo=UTC), "UTC", "2026-01-31", "2026-01"),
        (datetime(2026, 2, 1, 0, 0, 0, tzinfo=UTC), "UTC", "2026-02-01", "2026-02"),
        # 23:30 UTC on January 31st is already February 1st in Shanghai (UTC+8)
        (datetime(2026, 1, 31, 23, 30, tzinfo=UTC), "Asia/Shanghai", "2026-02-01", "2026-02"),
        # and still December 31st in New York on New Year's Day 03:00 UTC
        (datetime(2027, 1, 1, 3, 0, tzinfo=UTC), "America/New_York", "2026-12-31", "2026-12"),
        (datetime(2028, 2, 29, 12, 0, tzinfo=UTC), "Europe/Berlin", "2028-02-29", "2028-02"),
    ],
)
def test_calendar_periods_begin_at_local_midnight(at: datetime, zone: str, day: str, month: str) -> None:
    assert period_key(Period.DAY, at, zone) == day
    assert period_key(Period.MONTH, at, zone) == month
    assert period_key(Period.TOTAL, at, zone) == "total"


def test_bad_settings_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="not an IANA time zone"):
        UsageSettings(timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="needs a limit"):
        UsageSettings.model_validate({"budgets": [{"scope": "user"}]})
    with pytest.raises(ValueError, match="fractions between 0 and 1"):
        UsageSettings.model_validate({"budgets": [{"scope": "user", "limit": 1, "alerts": [80]}]})


# -- usage from agents' replies ----------------------------------------------------------------------

PRICES = {"gpt-test": {"input": 2.0, "output": 8.0}, "cheap-*": {"input": 0.1, "output": 0.2}}


async def test_usage_in_replies_is_priced_summed_per_step_and_task_and_audited() -> None:
    config = AgencyConfig.model_validate({"usage": {"currency": "EUR", "prices": PRICES}})
    agency = Agency(config=config, clock=ManualClock(datetime(2026, 3, 31, 22, 0, tzinfo=UTC)))
    reply = AgentReply(
        output={"ok": True},
        usage=[
            Usage(model="gpt-test", input_tokens=1000, output_tokens=500),
            Usage(model="cheap-mini", input_tokens=10_000),
        ],
    )
    plain = {"ok": True}  # an agent that reports nothing costs nothing
    await agency.register({"name": "a", "can_do": ["one"]}, ScriptedAgent(reply))
    await agency.register({"name": "b", "can_do": ["two"]}, ScriptedAgent(plain))
    await agency.register(
        {"name": "c", "can_do": ["three"]},
        ScriptedAgent(AgentReply(output={}, usage=[Usage(model="mystery", input_tokens=7)])),
    )
    outcome = await agency.submit(
        {
            "text": "do it",
            "user_id": "u1",
            "session_id": "s1",
            "steps": [
                {"name": "s1", "action": "one"},
                {"name": "s2", "action": "two"},
                {"name": "s3", "action": "three"},
            ],
        }
    )
    assert outcome.state is TaskState.COMPLETED
    usage = outcome.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (11_007, 500)
    # 1000 x 2 + 500 x 8 per million = 0.006; 10 000 x 0.1 per million = 0.001; mystery unpriced
    assert usage.cost == pytest.approx(0.007) and usage.currency == "EUR"
    assert set(usage.by_model) == {"gpt-test", "cheap-mini", "mystery"}
    steps = {s.name: s.usage for s in outcome.steps}
    assert steps["s2"] is None and steps["s1"] is not None and steps["s1"].cost == pytest.approx(0.007)
    recorded = records(agency, AuditEventType.USAGE)
    assert [(r.detail["model"], r.outcome) for r in recorded] == [
        ("gpt-test", "priced"),
        ("cheap-mini", "priced"),
        ("mystery", "unpriced"),
    ]
    assert recorded[0].actors.agent == "a@1.0.0" and recorded[0].detail["cost"] == pytest.approx(0.006)
    # the shared sums: per user, agent, model, session, per day (the gateway's 22:00 UTC) and month
    meter = agency.metering.meter  # type: ignore[union-attr]
    from middleware.usage_meter import Counter

    got = await meter.get(
        [
            Counter("user", "u1", "2026-03-31"),
            Counter("user", "u1", "2026-03"),
            Counter("agent", "a", "total"),
            Counter("model", "gpt-test", "2026-03"),
            Counter("session", "s1", "total"),
        ]
    )
    assert [g.tokens for g in got] == [11_507, 11_507, 11_500, 1_500, 11_507]
    assert got[0].cost_micros == 7000


# -- a runaway agent, stopped before its next step -----------------------------------------------------


def chatty_model(n: int, tokens: int = 400) -> GenericFakeChatModel:
    """A scripted LLM: ``n`` answers, each reporting ``tokens`` input and ``tokens // 4`` output tokens."""
    return GenericFakeChatModel(
        messages=iter(
            AIMessage(
                content=f"thinking, round {i}",
                usage_metadata={
                    "input_tokens": tokens,
                    "output_tokens": tokens // 4,
                    "total_tokens": tokens + tokens // 4,
                },
                response_metadata={"model_name": "gpt-test"},
            )
            for i in range(n)
        )
    )


def runaway_task(steps: int) -> dict[str, Any]:
    return {
        "text": "research this forever",
        "user_id": "u_runaway",
        "goal": {
            "id": "GOAL_RESEARCH",
            "description": "research",
            "verification_steps": [{"kind": "regex", "pattern": "round"}],
        },
        "steps": [{"name": f"round{i}", "action": "research"} for i in range(steps)],
    }


@pytest.mark.parametrize("on_exhausted", ["hold", "abort"])
async def test_a_budget_stops_a_runaway_agent_before_its_next_step(on_exhausted: str) -> None:
    clock = ManualClock(datetime(2026, 12, 31, 23, 0, tzinfo=UTC))  # a month end
    config = AgencyConfig.model_validate(
        {
            "usage": {
                "prices": PRICES,
                "timezone": "Europe/Berlin",  # 00:00 on January 1st there: a new day and month
                "budgets": [
                    {
                        "scope": "goal",
                        "name": "GOAL_RESEARCH",
                        "period": "day",
                        "limit_tokens": 1200,
                        "alerts": [0.5],
                        "on_exhausted": on_exhausted,
                    }
                ],
            }
        }
    )
    agency = Agency(config=config, clock=clock)
    model = chatty_model(20)
    agent = wrap_runnable(model, {"name": "researcher", "can_do": ["research"], "slo_latency_ms": 5000})
    await agency.register(agent.contract, agent)

    outcome = await agency.submit(runaway_task(10))

    # 500 tokens a round: after round 3 the goal has spent 1500 >= 1200, round 4 never runs
    ran = [s.name for s in outcome.steps if s.status == "completed"]
    assert ran == ["round0", "round1", "round2"]
    assert (
        outcome.usage is not None
        and outcome.usage.input_tokens == 1200
        and outcome.usage.output_tokens == 300
    )
    assert "budget exhausted: goal 'GOAL_RESEARCH' spent 1500 tokens of 1200 in 2027-01-01" in outcome.reason
    if on_exhausted == "hold":
        assert outcome.state is TaskState.INPUT_REQUIRED
        assert outcome.pending["kind"] == "human_handover" and outcome.pending["step"] == "round3"
        assert outcome.pending["budget"]["spent_tokens"] == 1500
    else:
        assert outcome.state is TaskState.FAILED
    (stop,) = records(agency, AuditEventType.BUDGET_EXCEEDED)
    assert stop.outcome == ("held" if on_exhausted == "hold" else "aborted")
    assert stop.rule == "budget:goal:GOAL_RESEARCH 1200 tokens per day"
    assert stop.detail["step"] == "round3" and stop.detail["spent_tokens"] == 1500
    assert stop.detail["limit_tokens"] == 1200 and stop.actors.agent == "researcher@1.0.0"
    # the alert at 50 %, raised once although two more rounds passed it
    (alert,) = records(agency, AuditEventType.BUDGET_ALERT)
    assert alert.outcome == "50%" and alert.detail["spent_tokens"] == 1000
    # no dispatch after the stop: the agent was called three times
    dispatched = [r.detail["step"] for r in records(agency, AuditEventType.DISPATCH)]
    assert dispatched == ["round0", "round1", "round2"]

    # the next task of the same goal on the same day is stopped before its first step ...
    again = await agency.submit(runaway_task(2))
    assert [s.status for s in again.steps] == ["pending"] and "budget exhausted" in again.reason
    # ... and runs again once the day has turned in Berlin (23:00 UTC is midnight there)
    clock.now += timedelta(days=1)
    fresh = await agency.submit(runaway_task(2))
    assert fresh.state is TaskState.COMPLETED


async def test_a_held_task_is_resumed_by_a_person_once_the_budget_allows() -> None:
    clock = ManualClock(datetime(2026, 4, 30, 12, 0, tzinfo=UTC))
    config = AgencyConfig.model_validate(
        {"usage": {"budgets": [{"scope": "user", "name": "*", "period": "month", "limit_tokens": 900}]}}
    )
    agency = Agency(config=config, clock=clock)
    reply = AgentReply(output={"ok": 1}, usage=[Usage(model="m", input_tokens=500)])
    await agency.register({"name": "r", "can_do": ["research"]}, ScriptedAgent(reply))
    held = await agency.submit({**runaway_task(3), "goal": None, "user_id": "bo"})
    assert held.state is TaskState.INPUT_REQUIRED and held.pending["step"] == "round2"
    # another user has a budget of their own ("*": each user separately)
    other = await agency.submit({**runaway_task(1), "goal": None, "user_id": "cy"})
    assert other.state is TaskState.COMPLETED
    # a retry while the budget is still spent is stopped again, before the agent runs
    again = await agency.resume(held.task_id, decision={"action": "retry", "note": "try"})
    assert (
        again.state is TaskState.INPUT_REQUIRED and len(records(agency, AuditEventType.BUDGET_EXCEEDED)) == 2
    )
    clock.now = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)  # a new month
    done = await agency.resume(held.task_id, decision={"action": "retry", "note": "new month"})
    assert done.state is TaskState.COMPLETED


# -- rate limits per model and per tool -----------------------------------------------------------------


class Seconds:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_model_over_its_rate_limit_fails_the_attempt_before_it_is_called() -> None:
    seconds = Seconds()
    limits = ModelRateLimits(
        UsageRateLimits.model_validate({"model": [{"match": "*FakeChat*", "rate": 0.5, "burst": 2}]}),
        MemoryBuckets(clock=seconds),
    )
    agency = Agency()
    model = chatty_model(10)
    agent = wrap_runnable(model, {"name": "writer", "can_do": ["write"]}, rate_limits=limits)
    await agency.register(agent.contract, agent)
    task = {"text": "write", "constraints": {"action": "write"}}
    assert (await agency.submit(task)).state is TaskState.COMPLETED
    assert (await agency.submit(task)).state is TaskState.COMPLETED
    refused = await agency.submit(task)  # the bucket holds 2: the third call is refused
    assert refused.state is not TaskState.COMPLETED  # no backup: a person decides (the default)
    failure = refused.failures[0]
    assert failure.type.value == "TOOL_UNAVAILABLE" and failure.context["rate_limited"] is True
    assert "model 'GenericFakeChatModel' is over its rate limit (0.5/s, burst 2" in failure.detail
    assert refused.output is None and model.messages is not None
    seconds.now += 2.0  # one token back
    after = await agency.submit(task)
    assert (
        after.state is TaskState.COMPLETED and after.output == "thinking, round 2"
    )  # round 2 was never used


async def test_a_tool_over_its_rate_limit_is_refused_before_it_runs() -> None:
    import asyncio
    import uuid

    from langchain_core.tools import tool

    from middleware.errors import AgentFailure
    from middleware.langchain.usage import ToolLimitHandler

    seconds = Seconds()
    limits = ModelRateLimits(
        UsageRateLimits.model_validate({"tool": [{"match": "web_*", "rate": 1, "burst": 1}]}),
        MemoryBuckets(clock=seconds),
    )
    ran: list[str] = []

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return "found"

    handler = ToolLimitHandler(limits, asyncio.get_running_loop())
    assert await web_search.ainvoke("first", {"callbacks": [handler]}) == "found"
    with pytest.raises(AgentFailure, match=r"tool 'web_search' is over its rate limit") as info:
        await web_search.ainvoke("second", {"callbacks": [handler]})
    assert info.value.context["rate_limited"] is True and info.value.context["retry_after_ms"] == 1000
    assert ran == ["first"]  # refused before it ran
    seconds.now += 1.0
    assert await web_search.ainvoke("third", {"callbacks": [handler], "run_id": uuid.uuid4()}) == "found"
