"""The seed's own verification sentences (section 4.3) are checks that check."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from middleware.cli import main
from middleware.demo import months_before
from middleware.goals import GoalAssertion, parse_step_sentence, verify_goal

SEED_STEPS = [
    "检查用户是否在保修期内（购机≤12个月）",
    "确认故障类型为屏幕碎裂且非人为损坏",
    "输出更换机型、预计送达时间、是否收取费用",
]


#: The checks run as on these days (month ends, a leap day, the year's end and start).
DAYS = [
    date(2026, 1, 31),
    date(2026, 2, 28),
    date(2026, 3, 31),
    date(2026, 12, 31),
    date(2027, 1, 1),
    date(2028, 2, 29),
    date(2026, 6, 15),
]
TODAY = DAYS[-1]


def _clock(day: date):
    return lambda: datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


def _months_ago(months: int, today: date = TODAY) -> str:
    return months_before(today, months).isoformat()


def goal() -> GoalAssertion:
    return GoalAssertion(
        id="GOAL_WARRANTY_001",
        description="为用户提供符合保修条款的屏幕更换服务",
        verification_steps=SEED_STEPS,
        timeout_seconds=180,
    )


def reply(today: date = TODAY, **changes):
    out = {
        "reply": "您好，您的PhoneX屏幕更换申请已受理。",
        "model": "PhoneX",
        "estimated_delivery": (today + timedelta(days=2)).isoformat(),
        "fee": 0,
        "warranty": {
            "purchase_date": (today - timedelta(days=7)).isoformat(),
            "fault_type": "screen_shattered",
            "accidental": False,
            "in_warranty": True,
        },
    }
    for key, value in changes.items():
        if key in out["warranty"]:
            out["warranty"][key] = value
        elif value is None:
            del out[key]
        else:
            out[key] = value
    return out


def test_each_seed_sentence_is_a_machine_check():
    kinds = [parse_step_sentence(s).kind for s in SEED_STEPS]
    assert kinds == ["json_path", "all_of", "all_of"]


@pytest.mark.parametrize("today", DAYS, ids=str)
def test_the_happy_claim_passes(today):
    verdict = verify_goal(goal(), reply(today), clock=_clock(today))
    assert verdict.passed, verdict


@pytest.mark.parametrize("today", DAYS, ids=str)
def test_a_purchase_14_months_ago_is_out_of_warranty_on_every_day(today):
    verdict = verify_goal(goal(), reply(today, purchase_date=_months_ago(14, today)), clock=_clock(today))
    assert [s.step for s in verdict.failed_steps] == [SEED_STEPS[0]]
    reason = verdict.failed_steps[0].reason
    assert "14 months" in reason and "ago, more than 12 months (covered until" in reason


@pytest.mark.parametrize(
    ("change", "failed", "why"),
    [
        ({"purchase_date": _months_ago(14)}, SEED_STEPS[0], "ago, more than 12 months"),
        ({"accidental": True}, SEED_STEPS[1], "not human (accidental) damage"),
        ({"fault_type": "battery_fault"}, SEED_STEPS[1], "fault type is 屏幕碎裂"),
        ({"estimated_delivery": None}, SEED_STEPS[2], "$..estimated_delivery not found"),
        ({"fee": None}, SEED_STEPS[2], "$..fee not found"),
    ],
)
def test_each_check_fails_when_untrue(change, failed, why):
    verdict = verify_goal(goal(), reply(**change), clock=_clock(TODAY))
    assert not verdict.passed
    assert [s.step for s in verdict.failed_steps] == [failed]
    assert why in verdict.failed_steps[0].reason


def test_an_unstated_damage_cause_does_not_pass():
    out = reply()
    del out["warranty"]["accidental"]
    assert not verify_goal(goal(), out, clock=_clock(TODAY)).passed


def test_goal_lint_accepts_the_seed_sentences(tmp_path, capsys):
    path = tmp_path / "goal.json"
    path.write_text(goal().model_dump_json(), encoding="utf-8")
    # the sentences as written, not their structured form
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    data["verification_steps"] = SEED_STEPS
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert main(["goal", "lint", str(path)]) == 0
    assert "goal is valid and machine-checkable" in capsys.readouterr().out
