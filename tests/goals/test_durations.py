"""Durations in goal sentences are calendar arithmetic on dates (issue 27, second item).

"≤ 12 months" holds while today is no later than the date plus 12 calendar months (the
month's last day when the month is shorter); days and years likewise. Dates are compared
in the step's time zone (UTC unless the step names another). Every test reads a fixed clock.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware.errors import InvalidInput
from middleware.goals import GoalAssertion, JsonPathStep, SentenceError, Verifier, parse_step_sentence
from middleware.goals.dates import add_period

WARRANTY = "检查用户是否在保修期内（购机≤12个月）"


def at(day: str, hour: int = 12) -> Verifier:
    d = date.fromisoformat(day)
    now = datetime(d.year, d.month, d.day, hour, tzinfo=UTC)
    return Verifier(clock=lambda: now)


def goal(*steps: object) -> GoalAssertion:
    return GoalAssertion(id="GOAL_DATES_001", description="dates", verification_steps=list(steps))


def passes(verifier: Verifier, step: object, output: object) -> bool:
    return verifier.verify_sync(goal(step), output).passed


@pytest.mark.parametrize("days_old", [366, 370, 380, 390])
def test_a_purchase_366_to_390_days_old_is_not_within_12_months(days_old):
    verifier = at("2026-12-01")
    bought = (date(2026, 12, 1) - timedelta(days=days_old)).isoformat()
    verdict = verifier.verify_sync(goal(WARRANTY), {"order": {"purchase_date": bought}})
    assert not verdict.passed, bought
    if days_old == 390:
        assert bought == "2025-11-06"
        assert verdict.steps[0].reason == (
            "$..purchase_date is '2025-11-06', 12 months and 25 days ago, more than 12 months "
            "(covered until 2026-11-06; today is 2026-12-01 UTC)"
        )


def test_the_last_covered_day_is_the_date_plus_12_calendar_months():
    verifier = at("2026-12-01")
    assert passes(verifier, WARRANTY, {"purchase_date": "2025-12-01"})  # 365 days: the last day
    assert not passes(verifier, WARRANTY, {"purchase_date": "2025-11-30"})  # 366 days
    assert passes(verifier, WARRANTY, {"purchase_date": "2026-12-01"})  # bought today
    verdict = verifier.verify_sync(goal(WARRANTY), {"purchase_date": "2026-12-02"})
    assert not verdict.passed and "a date in the future" in verdict.steps[0].reason


@pytest.mark.parametrize(
    ("bought", "today", "within"),
    [
        # month ends: the 31st plus one month is the last day of a shorter month
        ("2026-01-31", "2026-02-28", True),
        ("2026-01-31", "2026-03-01", False),
        ("2026-03-31", "2026-04-30", True),
        ("2026-03-31", "2026-05-01", False),
        # leap years: 29 February plus a year (or 12 months) is 28 February
        ("2028-02-29", "2029-02-28", True),
        ("2028-02-29", "2029-03-01", False),
        ("2027-02-28", "2028-02-28", True),
        ("2027-02-28", "2028-02-29", False),
        # the turn of the year
        ("2025-12-31", "2026-12-31", True),
        ("2025-12-31", "2027-01-01", False),
    ],
)
def test_month_ends_and_leap_years(bought, today, within):
    months = 1 if bought[5:7] in ("01", "03") else 12
    verifier = at(today)
    assert passes(verifier, f"$.d is within {months} months", {"d": bought}) is within
    if months == 12:
        assert passes(verifier, "$.d is within 1 year", {"d": bought}) is within
        assert passes(verifier, "字段d在1年内", {"d": bought}) is within


@pytest.mark.parametrize(
    ("sentence", "op", "n"),
    [
        ("检查用户是否在保修期内（购机≤12个月）", "within_months", 12),
        ("购机不超过30天", "within_days", 30),
        ("购机≤1年", "within_years", 1),
        ("purchased within 90 days", "within_days", 90),
        ("purchased within 2 years", "within_years", 2),
        ("bought no more than 6 months ago", "within_months", 6),
        ("$.paid_at is within 14 days", "within_days", 14),
        ("$.paid_at is at most 3 months old", "within_months", 3),
        ("field paid_at is within 1 year", "within_years", 1),
        ("字段paid_at在30天内", "within_days", 30),
        ("$.paid_at 在6个月以内", "within_months", 6),
        ("$.paid_at ≤ 2年", "within_years", 2),
    ],
)
def test_durations_in_english_and_chinese_sentences(sentence, op, n):
    step = parse_step_sentence(sentence)
    assert isinstance(step, JsonPathStep) and (step.op, step.value) == (op, n)


def test_days_and_years_at_their_boundaries():
    verifier = at("2026-12-01")
    assert passes(verifier, "购机不超过30天", {"purchase_date": "2026-11-01"})  # 30 days
    assert not passes(verifier, "购机不超过30天", {"purchase_date": "2026-10-31"})  # 31 days
    assert passes(verifier, "购机≤1年", {"purchase_date": "2025-12-01"})
    verdict = verifier.verify_sync(goal("购机≤1年"), {"purchase_date": "2025-11-30"})
    assert verdict.steps[0].reason.startswith("$..purchase_date is '2025-11-30', 1 year and 1 day ago")


def test_the_time_zone_decides_which_day_it_is():
    """Dates are compared in the step's time zone: UTC by default, stated by the step otherwise.
    At 20:00 UTC on 1 December it is already 2 December in Shanghai."""
    late = datetime(2026, 12, 1, 20, tzinfo=UTC)
    verifier = Verifier(clock=lambda: late)
    utc = JsonPathStep(path="$.d", op="within_months", value=12)
    shanghai = JsonPathStep(path="$.d", op="within_months", value=12, timezone="Asia/Shanghai")
    assert passes(verifier, utc, {"d": "2025-12-01"})
    verdict = verifier.verify_sync(goal(shanghai), {"d": "2025-12-01"})
    assert not verdict.passed and "today is 2026-12-02 Asia/Shanghai" in verdict.steps[0].reason
    # a time with an offset is the day it is in the step's zone (01:00 in Shanghai is 17:00 UTC before)
    assert passes(verifier, shanghai, {"d": "2025-12-02T01:00:00+08:00"})
    assert passes(verifier, utc, {"d": "2025-11-30T23:00:00-01:00"})  # 1 December 00:00 in UTC
    assert not passes(verifier, utc, {"d": "2025-11-30T23:30:00+00:00"})


def test_bad_durations_are_refused_when_the_goal_is_read():
    with pytest.raises(InvalidInput, match="whole number"):
        GoalAssertion.parse(
            {
                "id": "GOAL_X_001",
                "description": "x",
                "verification_steps": [{"kind": "json_path", "path": "$.d", "within_months": 1.5}],
            }
        )
    with pytest.raises(InvalidInput, match="time zone"):
        GoalAssertion.parse(
            {
                "id": "GOAL_X_001",
                "description": "x",
                "verification_steps": [
                    {"kind": "json_path", "path": "$.d", "within_days": 3, "timezone": "Mars/Olympus"}
                ],
            }
        )
    with pytest.raises(InvalidInput, match="timezone"):
        GoalAssertion.parse(
            {
                "id": "GOAL_X_001",
                "description": "x",
                "verification_steps": [
                    {"kind": "json_path", "path": "$.d", "equals": 3, "timezone": "Asia/Shanghai"}
                ],
            }
        )
    with pytest.raises(SentenceError):
        parse_step_sentence("$.d is within 0 days")


def test_a_value_that_is_no_date_fails_with_why():
    verdict = at("2026-12-01").verify_sync(goal(WARRANTY), {"purchase_date": "last week"})
    assert not verdict.passed and "not an ISO date" in verdict.steps[0].reason


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 12, 31)), st.integers(0, 600))
def test_adding_months_is_calendar_arithmetic(day, months):
    later = add_period(day, months, "months")
    assert (later.year * 12 + later.month) - (day.year * 12 + day.month) == months
    assert later.day == day.day or (later.day < day.day and (later + timedelta(days=1)).day == 1)
    assert add_period(day, months // 12, "years") == add_period(day, (months // 12) * 12, "months")


async def test_the_warranty_case_sends_a_390_day_old_purchase_to_a_person():
    """End to end: the order system says 2025-11-06, today is 2026-12-01: the eligibility stage
    fails, nothing ships, and the demo's own warranty agent agrees it is out of warranty."""
    from middleware import Agency, FailureType, TaskState
    from middleware.agents import AgentReply
    from middleware.demo import build_demo_agency, demo_config, warranty_request
    from middleware.smf import Provenance
    from middleware.testing import ScriptedAgent

    async def no_sleep(_: float) -> None:
        return None

    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    agency = await build_demo_agency(Agency(config=demo_config(), sleep=no_sleep, clock=lambda: now))
    order = AgentReply(
        output={
            "order_id": "ORD-1",
            "user_id": "u_789",
            "device_model": "PhoneX",
            "purchase_date": "2025-11-06",
        },
        provenance=Provenance(source="orders_db", reliability_score=0.99),
    )
    agency.agents.add("order_agent@1.0.0", ScriptedAgent(order))
    request = warranty_request().model_copy(update={"text": "我的手机屏幕碎了，要换新"})  # no date said
    outcome = await agency.submit(request)
    assert outcome.state is TaskState.INPUT_REQUIRED and outcome.failed_stage == "eligibility"
    assert outcome.failures[-1].type is FailureType.GOAL_UNMET
    assert "12 months and 25 days ago, more than 12 months" in outcome.reason
    warranty = outcome.steps[2].output
    assert warranty["in_warranty"] is False and warranty["coverage_end"] == "2026-11-06"
    assert agency.agents.get("express_shipper@1.0.0").calls == 0
    await agency.close()
