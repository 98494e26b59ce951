"""The sentence parser, English and Chinese, including what it must refuse."""

from __future__ import annotations

import pytest

from middleware import InvalidInput
from middleware.goals import GoalAssertion, SentenceError, parse_step_sentence, verify_goal


def parsed(sentence: str) -> dict:
    step = parse_step_sentence(sentence)
    assert step.description  # the sentence is kept for the verdict
    return step.model_dump(exclude={"description"}, exclude_none=True, exclude_defaults=True) | {
        "kind": step.kind
    }


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        # the seed's and the examples
        ("检查输出是否包含DataController字段", {"kind": "contains", "value": "DataController"}),
        ("output contains the tracking number", {"kind": "contains", "value": "tracking number"}),
        ("$.a.b equals 3", {"kind": "json_path", "path": "$.a.b", "op": "equals", "value": 3}),
        ('字段status等于"ok"', {"kind": "json_path", "path": "$.status", "op": "equals", "value": "ok"}),
        ("输出不包含“身份证号”", {"kind": "not_contains", "value": "身份证号"}),
        # English
        ("The output must contain 'EXP'", {"kind": "contains", "value": "EXP"}),
        ("reply mentions the refund policy.", {"kind": "contains", "value": "refund policy"}),
        ("output does not contain password", {"kind": "not_contains", "value": "password"}),
        ("the response must not include 'SSN'", {"kind": "not_contains", "value": "SSN"}),
        ("output matches /[A-Z]{3}\\d{6}/", {"kind": "regex", "pattern": "[A-Z]{3}\\d{6}"}),
        ("output matches /exp/i", {"kind": "regex", "pattern": "exp", "ignore_case": True}),
        ("$.fee == 0", {"kind": "json_path", "path": "$.fee", "op": "equals", "value": 0}),
        ("$.paid is true", {"kind": "json_path", "path": "$.paid", "op": "equals", "value": True}),
        (
            "field warranty.fault_type is screen",
            {"kind": "json_path", "path": "$.warranty.fault_type", "op": "equals", "value": "screen"},
        ),
        ("$.a exists", {"kind": "json_path", "path": "$.a"}),
        ("$.a does not exist", {"kind": "json_path", "path": "$.a", "op": "not_exists"}),
        ("$.total >= 10", {"kind": "json_path", "path": "$.total", "op": "ge", "value": 10}),
        ("$.total is greater than 10", {"kind": "json_path", "path": "$.total", "op": "gt", "value": 10}),
        ("$.total is at most 99.5", {"kind": "json_path", "path": "$.total", "op": "le", "value": 99.5}),
        ("$.total < 5", {"kind": "json_path", "path": "$.total", "op": "lt", "value": 5}),
        (
            "$.total is between 1 and 5",
            {"kind": "json_path", "path": "$.total", "op": "between", "value": [1, 5]},
        ),
        (
            '$.status is one of "ok", "done" or "new"',
            {"kind": "json_path", "path": "$.status", "op": "one_of", "value": ["ok", "done", "new"]},
        ),
        ("output is at most 500 characters", {"kind": "length", "max": 500}),
        ("$.items has at least 1 item", {"kind": "length", "path": "$.items", "min": 1}),
        ("$.items has between 1 and 3 items", {"kind": "length", "path": "$.items", "min": 1, "max": 3}),
        # Chinese
        ("输出包含退款单号", {"kind": "contains", "value": "退款单号"}),
        ("检查回复中是否不包含密码", {"kind": "not_contains", "value": "密码"}),
        ("输出匹配正则 /EXP\\d+/", {"kind": "regex", "pattern": "EXP\\d+"}),
        ("字段 fee 为 0", {"kind": "json_path", "path": "$.fee", "op": "equals", "value": 0}),
        ("字段a不存在", {"kind": "json_path", "path": "$.a", "op": "not_exists"}),
        ("DataController字段存在", {"kind": "json_path", "path": "$.DataController"}),
        ("字段fee大于0", {"kind": "json_path", "path": "$.fee", "op": "gt", "value": 0}),
        ("$.fee 不超过 100", {"kind": "json_path", "path": "$.fee", "op": "le", "value": 100}),
        ("$.score 大于等于 0.7", {"kind": "json_path", "path": "$.score", "op": "ge", "value": 0.7}),
        ("$.x 在 1 和 5 之间", {"kind": "json_path", "path": "$.x", "op": "between", "value": [1, 5]}),
        (
            "字段status是ok、done之一",
            {"kind": "json_path", "path": "$.status", "op": "one_of", "value": ["ok", "done"]},
        ),
        ("输出不超过500个字符", {"kind": "length", "max": 500}),
        ("$.items 至少有1项", {"kind": "length", "path": "$.items", "min": 1}),
        # full-width punctuation and digits are normalised (NFKC)
        ("字段fee等于０。", {"kind": "json_path", "path": "$.fee", "op": "equals", "value": 0}),
    ],
)
def test_sentences_become_structured_steps(sentence, expected):
    assert parsed(sentence) == expected


def test_every_item_sentences_in_both_languages():
    en = parse_step_sentence("every item of $.sources has field license")
    zh = parse_step_sentence("$.sources 的每一项都有license字段")
    for step in (en, zh):
        assert step.kind == "every_item" and step.path == "$.sources"
        assert step.step.kind == "json_path" and step.step.path == "$.license" and step.step.op == "exists"
    nested = parse_step_sentence("every item of $.items: $.price > 0")
    assert nested.step.op == "gt" and nested.step.value == 0


@pytest.mark.parametrize(
    "sentence",
    [
        "ensure the user is satisfied",
        "确保用户满意",
        "验证所有外部数据源均有合法授权声明",  # the seed's second step needs a custom check
        "make it good",
        "",
        "   ",
        "output",
        "$.x < abc",  # a comparison needs a number
        "output matches /(unclosed/",
        "字段",
        "x" * 5000,
    ],
)
def test_sentences_that_are_not_checks_are_refused(sentence):
    with pytest.raises(SentenceError) as info:
        parse_step_sentence(sentence)
    assert str(info.value)


def test_refusal_says_what_to_write_instead():
    with pytest.raises(SentenceError) as info:
        parse_step_sentence("ensure the user is satisfied")
    assert "manual" in str(info.value) and "structured step" in str(info.value)


@pytest.mark.parametrize(
    "sentence",
    [
        "manual: ensure the user is satisfied",
        "[manual] ensure the user is satisfied",
        "人工：确保用户满意",
        "【人工】确保用户满意",
    ],
)
def test_marked_manual_sentences_become_manual_steps(sentence):
    step = parse_step_sentence(sentence)
    assert step.kind == "manual"
    assert "满意" in step.description or "satisfied" in step.description


def test_manual_flag_on_a_sentence_object():
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_CS_001",
            "description": "d",
            "verification_steps": [
                {"sentence": "确保用户满意", "manual": True},
                {"sentence": "输出包含订单号"},
            ],
        }
    )
    assert [s.kind for s in goal.verification_steps] == ["manual", "contains"]
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse(
            {"id": "GOAL_CS_001", "description": "d", "verification_steps": [{"sentence": "确保用户满意"}]}
        )
    assert info.value.problems[0].field == "verification_steps[0]"


def test_registration_refuses_an_uncheckable_sentence_naming_it():
    with pytest.raises(InvalidInput) as info:
        GoalAssertion.parse(
            {
                "id": "GOAL_REPORT_001",
                "description": "GDPR report",
                "verification_steps": [
                    "检查输出是否包含DataController字段",
                    "验证所有外部数据源均有合法授权声明",
                ],
                "timeout_seconds": 120,
                "criticality": "high",
            }
        )
    (problem,) = info.value.problems
    assert problem.field == "verification_steps[1]"
    assert "验证所有外部数据源均有合法授权声明" in problem.reason


def test_parsed_sentences_verify_outputs():
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_REPORT_001",
            "description": "GDPR report",
            "verification_steps": [
                "检查输出是否包含DataController字段",
                "字段version等于2",
                "output does not contain TODO",
            ],
        }
    )
    assert verify_goal(goal, {"DataController": "ACME", "version": 2}).passed
    verdict = verify_goal(goal, {"Controller": "ACME", "version": 3, "x": "todo"})
    assert [s.passed for s in verdict.steps] == [False, False, False]
    assert verdict.steps[0].step == "检查输出是否包含DataController字段"


def test_two_quoted_values_are_not_mangled_into_one():
    assert parse_step_sentence("output contains 'a' and 'b'").value == "'a' and 'b'"
