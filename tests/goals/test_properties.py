"""Property tests: no input crashes the sentence parser, the goal model or the verifier."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middleware import InvalidInput
from middleware.goals import GoalAssertion, SentenceError, parse_step_sentence, verify_goal

WORDS = st.sampled_from(
    [
        "output",
        "contains",
        "does not contain",
        "matches",
        "/",
        "$.a",
        "$.a.b",
        "$.items",
        "[*]",
        "equals",
        "is",
        "one of",
        "between",
        "and",
        ">",
        ">=",
        "<",
        "<=",
        "==",
        "3",
        "-1.5",
        "true",
        "null",
        '"x"',
        "field",
        "字段",
        "输出",
        "包含",
        "不包含",
        "等于",
        "为",
        "大于",
        "小于",
        "之间",
        "在",
        "每一项",
        "都有",
        "every item of",
        "has field",
        "manual:",
        "人工：",
        "检查",
        "是否",
        "字符",
        "至少",
        "项",
        "(",
        ")",
        "at most",
        "characters",
        "、",
        "或",
        "之一",
        "\u3000",
        "ｆｕｌｌ",
        "。",
        "\n",
    ]
)
SENTENCES = st.one_of(
    st.text(max_size=80), st.lists(WORDS, max_size=8).map(" ".join), st.lists(WORDS, max_size=8).map("".join)
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(SENTENCES)
def test_parser_only_ever_answers_a_step_or_a_sentence_error(sentence):
    try:
        step = parse_step_sentence(sentence)
    except SentenceError as exc:
        assert str(exc)
        return
    assert step.kind
    # whatever it parsed validates as a goal and verifies without raising
    goal = GoalAssertion.parse({"id": "GOAL_PROP_001", "description": "d", "verification_steps": [step]})
    verify_goal(goal, {"a": {"b": 3}, "items": [1, "x", None]})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=15,
)
STEPS = st.one_of(
    SENTENCES,
    st.dictionaries(
        st.sampled_from(
            [
                "kind",
                "value",
                "pattern",
                "path",
                "op",
                "equals",
                "gt",
                "between",
                "min",
                "max",
                "step",
                "schema",
                "literal",
                "name",
            ]
        ),
        st.one_of(
            st.sampled_from(
                [
                    "contains",
                    "regex",
                    "json_path",
                    "length",
                    "every_item",
                    "json_schema",
                    "custom",
                    "manual",
                    "bogus",
                ]
            ),
            st.sampled_from(["$.a", "$.items[*]", "(", ".*", "$..", "$['a']"]),
            json_values,
        ),
        max_size=5,
    ),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    steps=st.lists(STEPS, max_size=4),
    extra=st.dictionaries(
        st.sampled_from(["timeout_seconds", "criticality", "stages", "id"]), json_values, max_size=2
    ),
)
def test_goal_model_refuses_with_problems_or_accepts(steps, extra):
    data = {"id": "GOAL_PROP_001", "description": "d", "verification_steps": steps, **extra}
    try:
        goal = GoalAssertion.parse(data)
    except InvalidInput as exc:
        assert exc.problems and all(p.reason for p in exc.problems)
        return
    assert GoalAssertion.parse(goal.model_dump_json()) == goal


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(output=json_values)
def test_verifier_never_raises_on_any_output(output):
    goal = GoalAssertion.parse(
        {
            "id": "GOAL_PROP_001",
            "description": "d",
            "verification_steps": [
                "output contains x",
                "output does not contain y",
                {"kind": "regex", "pattern": "a+b?"},
                "$.a exists",
                "$.a.b >= 1",
                {"kind": "json_path", "path": "$[*]", "one_of": [1, "x"]},
                {"kind": "length", "max": 3},
                {"kind": "json_schema", "schema": {"type": "object"}},
                "every item of $.items: $.a exists",
                "manual: check it",
            ],
        }
    )
    verdict = verify_goal(goal, output)
    assert len(verdict.steps) == 10 and not verdict.passed
    verdict.model_dump_json()


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    document=json_values,
    meta=st.dictionaries(
        st.sampled_from(["provenance", "freshness_ttl", "confidence_score", "intention_trace"]),
        json_values,
        max_size=4,
    ),
)
def test_smf_checker_and_goal_linter_never_raise(document, meta):
    from middleware.goals.lint import lint_goals
    from middleware.smf_check import check_smf_message, messages_in

    message = {"sender": "a", "receiver": "b", "content": document, "metadata": meta}
    for item in [document, message, *messages_in(document)]:
        findings = check_smf_message(item, expect_goals=["GOAL_X_001"])
        assert findings and all(f.message for f in findings)
    findings = lint_goals([("doc", document), ("goal", {"id": "GOAL_P_001", "description": "d", **meta})])
    assert all(f.severity in ("ok", "warning", "error") for f in findings)
