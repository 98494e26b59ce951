"""Constraint extraction: the rule-based extractor (English, Chinese, configurable) and the
LangChain extractor with its fallback to the rules."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from middleware.constraints import Constraints, LangChainExtractor, RuleBasedExtractor, Vocabulary
from middleware.contracts import normalise_label
from middleware.errors import InvalidInput

SEED = "帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的"


async def test_the_seed_request_comes_out_right() -> None:
    c = await RuleBasedExtractor().extract(SEED)
    assert c.time_window == "last_24h"
    assert c.freshness_tolerance_ms == 900_000
    assert c.region == "shanghai"
    assert c.metric == "refund_rate"
    assert c.granularity == "hour"
    assert c.action == "query_metric"  # the metric beats the shorter "订单" (order lookup)
    assert c.data_residency == "" and not c.needs_human_review and c.tags == []


async def test_the_same_request_in_english() -> None:
    c = await RuleBasedExtractor().extract(
        "Get me yesterday's refund rate for the Shanghai region, hourly; if the data delay is over "
        "15 minutes use the day before."
    )
    assert (c.action, c.time_window, c.region, c.metric, c.granularity) == (
        "query_metric",
        "last_24h",
        "shanghai",
        "refund_rate",
        "hour",
    )
    assert c.freshness_tolerance_ms == 900_000


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("refund rate, data delay under 30 seconds", 30_000),
        ("refund rate with latency of at most 2 hours", 7_200_000),
        ("refund rate, no more than 500ms old", 500),
        ("refund rate, lag over 5min is too much", 300_000),
        ("退款率，数据延迟不超过十五分钟", 900_000),
        ("退款率，延迟超过两小时就不要了", 7_200_000),
        ("退款率，要30秒以内的数据", 30_000),
        ("refund rate for shanghai", None),
    ],
)
async def test_freshness_tolerances_in_both_languages(text: str, expected_ms: int | None) -> None:
    assert (await RuleBasedExtractor().extract(text)).freshness_tolerance_ms == expected_ms


@pytest.mark.parametrize(
    ("text", "residency", "region"),
    [
        ("refund rate for shanghai, data must not leave the EU", "eu", "shanghai"),
        ("conversion rate; the data must stay in China", "china", ""),
        ("查询北京的转化率，数据不能出境", "china", "beijing"),
        ("查询转化率，数据不能离开上海", "shanghai", ""),
        ("conversion rate in beijing", "", "beijing"),
    ],
)
async def test_data_residency_is_not_mistaken_for_the_region_served(
    text: str, residency: str, region: str
) -> None:
    c = await RuleBasedExtractor().extract(text)
    assert (c.data_residency, c.region) == (residency, region)


@pytest.mark.parametrize(
    "text", ["refund rate, needs human review", "退款率，需要人工复核", "GMV report with manual review"]
)
async def test_needs_human_review(text: str) -> None:
    assert (await RuleBasedExtractor().extract(text)).needs_human_review is True


async def test_tags_match_the_longest_phrase_so_near_realtime_is_not_realtime() -> None:
    extractor = RuleBasedExtractor()
    assert (await extractor.extract("实时订单监控")).tags == ["realtime"]
    assert (await extractor.extract("近实时报表")).tags == ["near_realtime"]
    assert (await extractor.extract("a near-real-time report")).tags == ["near_realtime"]
    assert (await extractor.extract("a real-time feed")).tags == ["realtime"]


async def test_ascii_phrases_match_whole_words_only() -> None:
    c = await RuleBasedExtractor().extract("Please replay the usual figures from Europeans")
    assert c.action == ""  # "replay" is not "replace"
    assert c.region == ""  # "Europeans" is not "europe"


_VOCAB = Vocabulary.default()
_PIECES = sorted(
    {p for section in (_VOCAB.actions, _VOCAB.tags, _VOCAB.metrics) for ps in section.values() for p in ps}
)


def _by_definition(section: dict[str, list[str]], text: str) -> list[tuple[str, int]]:
    """(label, length) of each match, leftmost first: every phrase its own alternative, the
    longest first, ASCII ones as whole words."""
    label = {p.lower(): normalise_label(lab) for lab, ps in section.items() for p in ps}
    one = [
        rf"(?<![A-Za-z0-9_]){re.escape(p)}(?![A-Za-z0-9_])" if p.isascii() else re.escape(p)
        for p in sorted(label, key=len, reverse=True)
    ]
    found = re.finditer("|".join(one), text, re.IGNORECASE)
    return [(label[m.group(0).lower()], len(m.group(0))) for m in found]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_PIECES),
            st.sampled_from(_PIECES).map(str.upper),
            st.sampled_from([" ", "-", "_", "x", "9", "的", "，", "s", "ing"]),
        ),
        max_size=12,
    )
)
def test_phrases_match_as_defined_longest_whole_word_at_each_spot(parts: list[str]) -> None:
    text = "".join(parts)
    c = RuleBasedExtractor().extract_sync(text)
    actions = _by_definition(_VOCAB.actions, text)
    metrics = _by_definition(_VOCAB.metrics, text)
    longest = max((n for _, n in actions), default=0)
    assert c.action == next((a for a, n in actions if n == longest), "")  # the leftmost longest
    assert c.tags == sorted({t for t, _ in _by_definition(_VOCAB.tags, text)})
    assert c.metric == (metrics[0][0] if metrics else "")


_TEXTS = [
    SEED,
    "Get me yesterday's refund rate for the Shanghai region, hourly, real-time, data must stay in the EU",
    "需要人工审核：北京的近实时订单量，数据不能出境，延迟不超过2小时",
    "",
    "nothing to see",
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*_PIECES, *_TEXTS, " ", "-", "9", "的"]), max_size=8))
def test_extraction_builds_the_constraints_validation_would(parts: list[str]) -> None:
    """The extractor builds its constraints without validating them again (its labels come
    from the validated vocabulary): they are what validation makes of them."""
    c = RuleBasedExtractor().extract_sync("".join(parts))
    validated = Constraints.model_validate(c.model_dump())
    assert c == validated and c.model_dump_json() == validated.model_dump_json()


_STATED = st.dictionaries(
    st.sampled_from(["action", "tags", "region", "max_latency_ms", "version_range", "priority", "extras"]),
    st.one_of(
        st.sampled_from(["Query Metric", "Real Time", "^2.1", ">>1", "", "near-realtime"]),
        st.integers(min_value=-2, max_value=5000),
        st.none(),
        st.lists(st.sampled_from(["Real Time", "audit", " "]), max_size=3),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_TEXTS), _STATED)
def test_merging_validates_only_what_was_stated_and_gives_what_whole_validation_gives(
    text: str, stated: dict[str, object]
) -> None:
    base = RuleBasedExtractor().extract_sync(text)
    try:
        expected = base._merged_validated(stated)
    except InvalidInput as exc:
        with pytest.raises(InvalidInput) as err:
            base.merged(stated)
        assert err.value.problems == exc.problems  # every offending field named, as before
        return
    merged = base.merged(stated)
    assert merged == expected and merged.model_dump_json() == expected.model_dump_json()
    assert merged is not base and base == RuleBasedExtractor().extract_sync(text)  # base unchanged


async def test_a_longer_phrase_wins_over_the_ascii_word_it_starts_with() -> None:
    extractor = RuleBasedExtractor(actions={"gmv": ["GMV"], "gmv_total": ["GMV总额"]}, tags={})
    assert (await extractor.extract("查一下GMV总额")).action == "gmv_total"
    assert (await extractor.extract("查一下GMV的变化")).action == "gmv"


async def test_vocabularies_are_configurable() -> None:
    vocab = Vocabulary.default().extended(
        regions={"chengdu": ["chengdu", "成都"]},
        actions={"inventory_check": ["库存", "stock level"]},
        time_windows={"last_90d": ["last quarter", "上季度"]},
    )
    c = await RuleBasedExtractor(vocab).extract("成都上季度的库存")
    assert (c.region, c.action, c.time_window) == ("chengdu", "inventory_check", "last_90d")
    only = RuleBasedExtractor(actions={"greet": ["hello"]}, tags={})
    assert (await only.extract("hello, real-time refund rate")).model_dump(
        include={"action", "tags", "metric"}
    ) == {"action": "greet", "tags": [], "metric": "refund_rate"}
    with pytest.raises(InvalidInput) as err:
        Vocabulary.default().extended(colours={"red": ["red"]})
    assert err.value.field == "colours"


async def test_explicit_constraints_override_and_are_validated() -> None:
    base = await RuleBasedExtractor().extract(SEED)
    merged = base.merged({"region": "Beijing", "tags": ["Real Time"], "priority": "high"})
    assert merged.region == "beijing" and merged.tags == ["real_time"]
    assert merged.extras == {"priority": "high"} and merged.metric == "refund_rate"
    with pytest.raises(InvalidInput) as err:
        base.merged({"freshness_tolerance_ms": "soon", "version_range": ">>1"})
    assert {p.field for p in err.value.problems} == {"freshness_tolerance_ms", "version_range"}


# ---------------------------------------------------------------- LangChain
async def test_langchain_extractor_uses_a_valid_json_answer() -> None:
    model = FakeListChatModel(
        responses=[
            '```json\n{"temporal_requirement": "last_24h", "freshness_tolerance_ms": 900000, '
            '"geo_scope": "Shanghai", "metric": "refund_rate", "action": "query_metric", "note": "x"}\n```'
        ]
    )
    c = await LangChainExtractor(model).extract(SEED)
    assert (c.time_window, c.freshness_tolerance_ms, c.region, c.metric) == (
        "last_24h",
        900_000,
        "shanghai",
        "refund_rate",
    )
    assert c.granularity == ""  # what the model said, not the rules
    assert c.extras == {"note": "x", "extractor": "llm"}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I think they want the refund rate.", "no JSON object"),
        ('{"region": "shanghai", "freshness_tolerance_ms": "fifteen minutes"}', "freshness_tolerance_ms"),
        ('{"region": shanghai}', "not valid JSON"),
        ('["region", "shanghai"]', "no JSON object"),
        ('{"tags": "realtime!!", "needs_human_review": "maybe"}', "needs_human_review"),
    ],
)
async def test_langchain_extractor_falls_back_to_the_rules_on_an_invalid_answer(
    answer: str, why: str
) -> None:
    c = await LangChainExtractor(FakeListChatModel(responses=[answer])).extract(SEED)
    expected = await RuleBasedExtractor().extract(SEED)
    assert c.model_dump(exclude={"extras"}) == expected.model_dump(exclude={"extras"})
    assert c.extras["extractor"] == "rules"
    assert why in c.extras["llm_error"]


async def test_langchain_extractor_falls_back_when_the_model_fails() -> None:
    class Broken(FakeListChatModel):
        async def ainvoke(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise ConnectionError("model endpoint down")

    c = await LangChainExtractor(Broken(responses=["{}"])).extract(SEED)
    assert c.region == "shanghai" and "model endpoint down" in c.extras["llm_error"]


async def test_langchain_extractor_sends_the_instructions_and_the_request() -> None:
    seen: list[object] = []

    class Recording(FakeListChatModel):
        async def ainvoke(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def, override]
            seen.extend(messages)
            return await super().ainvoke(messages, *args, **kwargs)

    await LangChainExtractor(Recording(responses=['{"action": "x"}'])).extract("hello there")
    assert "JSON" in seen[0].content and seen[1].content == "hello there"  # type: ignore[attr-defined]


def test_langchain_extractor_names_the_extra_when_langchain_is_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(ImportError, match=r"agency-middleware\[langchain\]"):
        LangChainExtractor(object())


def test_constraints_described_lists_only_what_is_set() -> None:
    c = Constraints(action="query_metric", region="shanghai", freshness_tolerance_ms=900_000)
    assert c.described() == "action=query_metric region=shanghai freshness_tolerance_ms=900000"
    assert Constraints().described() == "no constraints"
