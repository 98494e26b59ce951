"""The seed's own verification sentences (section 4.3) are checks that check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from middleware.cli import main
from middleware.goals import GoalAssertion, parse_step_sentence, verify_goal

SEED_STEPS = [
    "检查用户是否在保修期内（购机≤12个月）",
    "确认故障类型为屏幕碎裂且非人为损坏",
    "输出更换机型、预计送达时间、是否收取费用",
]


def _months_ago(months: int) -> str:
    now = datetime.now(UTC)
    year, month = divmod(now.month - 1 - months, 12)
    return now.replace(year=now.year + year, month=month + 1, day=min(now.day, 28)).date().isoformat()


def goal() -> GoalAssertion:
    return GoalAssertion(
        id="GOAL_WARRANTY_001",
        description="为用户提供符合保修条款的屏幕更换服务",
        verification_steps=SEED_STEPS,
        timeout_seconds=180,
    )


def reply(**changes):
    out = {
        "reply": "您好，您的PhoneX屏幕更换申请已受理。",
        "model": "PhoneX",
        "estimated_delivery": (datetime.now(UTC) + timedelta(days=2)).date().isoformat(),
        "fee": 0,
        "warranty": {
            "purchase_date": _months_ago(0),
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


def test_the_happy_claim_passes():
    verdict = verify_goal(goal(), reply())
    assert verdict.passed, verdict


@pytest.mark.parametrize(
    ("change", "failed", "why"),
    [
        ({"purchase_date": _months_ago(14)}, SEED_STEPS[0], "14 months ago, more than 12"),
        ({"accidental": True}, SEED_STEPS[1], "not human (accidental) damage"),
        ({"fault_type": "battery_fault"}, SEED_STEPS[1], "fault type is 屏幕碎裂"),
        ({"estimated_delivery": None}, SEED_STEPS[2], "$..estimated_delivery not found"),
        ({"fee": None}, SEED_STEPS[2], "$..fee not found"),
    ],
)
def test_each_check_fails_when_untrue(change, failed, why):
    verdict = verify_goal(goal(), reply(**change))
    assert not verdict.passed
    assert [s.step for s in verdict.failed_steps] == [failed]
    assert why in verdict.failed_steps[0].reason


def test_an_unstated_damage_cause_does_not_pass():
    out = reply()
    del out["warranty"]["accidental"]
    assert not verify_goal(goal(), out).passed


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
