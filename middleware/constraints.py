"""Constraints: what a request requires of the agent that handles it, and how to read them.

:class:`Constraints` is the typed result; a :class:`ConstraintExtractor` turns a request's
text into one. Two extractors ship:

* :class:`RuleBasedExtractor` (the default): configurable vocabularies
  (:class:`Vocabulary`) for actions, tags, regions, time windows, granularities, metrics,
  freshness tolerances, "needs human review" and data residency ("data must not leave
  region X"), in English and Chinese. No model, no network, deterministic.
* :class:`LangChainExtractor`: asks any LangChain chat model for the constraints as JSON,
  validates the answer, and falls back to the rules when the answer is not valid.

The seed's request comes out as::

    帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的
    → action=query_metric time_window=last_24h freshness_tolerance_ms=900000
      region=shanghai metric=refund_rate granularity=hour
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, ValidationError, field_validator

from ._model import Model, trusted
from .contracts import normalise_label, normalise_tag_set
from .errors import InvalidInput
from .versions import checked_range_text

__all__ = [
    "MAX_TEXT_CHARS",
    "ConstraintExtractor",
    "Constraints",
    "LangChainExtractor",
    "RuleBasedExtractor",
    "Vocabulary",
]

log = logging.getLogger("agency.constraints")

_LABEL_FIELDS = ("action", "name", "region", "data_residency", "time_window", "metric", "granularity")


class Constraints(Model):
    """What a request requires of the agent that handles it. Empty/None = no requirement."""

    action: str = Field(default="", description="The action the agent must have in can_do.")
    tags: list[str] = Field(default_factory=list, description="Tags the agent must all carry.")
    name: str = Field(default="", description="Only this capability name.")
    version_range: str = Field(default="", description="Only versions in this range, e.g. '^2.1'.")
    max_latency_ms: int = Field(default=0, ge=0, description="Largest acceptable SLO; 0 = any.")
    region: str = Field(default="", description="The agent must serve this region's data.")
    data_residency: str = Field(default="", description="Data must not leave this region.")
    time_window: str = Field(default="", description="The period asked about, e.g. last_24h.")
    freshness_tolerance_ms: int | None = Field(
        default=None, ge=0, description="Largest acceptable data delay in ms (the agent's max_data_delay_ms)."
    )
    metric: str = Field(default="", description="The metric asked for, e.g. refund_rate.")
    granularity: str = Field(default="", description="The resolution asked for, e.g. hour.")
    needs_human_review: bool = Field(default=False, description="Only agents whose results a human reviews.")
    extras: dict[str, Any] = Field(default_factory=dict, description="Other facts (not used to filter).")

    @field_validator(*_LABEL_FIELDS)
    @classmethod
    def _label(cls, v: str) -> str:
        return normalise_label(v) if v else ""

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return normalise_tag_set(v)

    @field_validator("version_range")
    @classmethod
    def _range(cls, v: str) -> str:
        return checked_range_text(v)

    def merged(self, explicit: Mapping[str, Any]) -> Constraints:
        """These constraints overridden by the ones a client stated (tags are united).

        Keys that are not fields of :class:`Constraints` go into ``extras``.

        Raises:
            InvalidInput: an explicit constraint has the wrong type or value.
        """
        # these are valid: only what the client stated is validated (field by field, as
        # assigned); the whole is validated again only to name every offending field
        merged = self.model_copy()
        extras: dict[str, Any] = {}
        try:
            for key, value in explicit.items():
                if key == "tags":
                    merged.tags = [*merged.tags, *_listed(value)]
                elif key in _SETTABLE:
                    setattr(merged, key, value)
                else:
                    extras[key] = value
        except ValidationError:
            return self._merged_validated(explicit)
        if extras:
            merged.extras = {**self.extras, **extras}
        return merged

    @classmethod
    def stated(cls, explicit: Mapping[str, Any]) -> Constraints:
        """Only the constraints a client stated, validated in one pass: what
        ``Constraints().merged(explicit)`` gives (keys that are not fields go into ``extras``).

        Raises:
            InvalidInput: a stated constraint has the wrong type or value (every one named).
        """
        data: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        for key, value in explicit.items():
            if key == "tags":
                data["tags"] = [*_listed(value)]
            elif key in _SETTABLE:
                data[key] = value
            else:
                extras[key] = value
        data["extras"] = extras
        return cls.parse(data, what="constraints")

    def _merged_validated(self, explicit: Mapping[str, Any]) -> Constraints:
        """:meth:`merged` by validating the whole (InvalidInput names every offending field)."""
        data = self.model_dump()
        for key, value in explicit.items():
            if key == "tags":
                data["tags"] = [*data["tags"], *_listed(value)]
            elif key in _SETTABLE:
                data[key] = value
            else:
                data["extras"][key] = value
        return Constraints.parse(data, what="constraints")

    def described(self) -> str:
        """``action=x region=y ...``: the requirements that are set, for explanations."""
        parts = []
        for key in _FIELDS:
            value = getattr(self, key)
            if key == "extras" or value in ("", [], None, 0, False):
                continue
            if isinstance(value, list):
                value = ",".join(value)
            parts.append(f"{key}={value}")
        return " ".join(parts) or "no constraints"


# the field names, read once: ``model_fields`` is a property that builds a dict on each read
# (pydantic 2.14), and routing reads them for every task
_FIELDS = tuple(Constraints.model_fields)
_SETTABLE = frozenset(_FIELDS) - {"extras"}  # what a stated constraint may set (the rest: extras)


def _listed(tags: Any) -> Any:
    """Stated tags as a sequence (one tag may be stated alone)."""
    return [tags] if isinstance(tags, str) or not isinstance(tags, Sequence) else tags


@runtime_checkable
class ConstraintExtractor(Protocol):
    """Reads a request's text and returns the constraints it implies."""

    async def extract(self, text: str) -> Constraints: ...


# ---------------------------------------------------------------- vocabulary
_METRICS: dict[str, list[str]] = {
    "refund_rate": ["refund rate", "refund ratio", "退款率"],
    "return_rate": ["return rate", "退货率"],
    "conversion_rate": ["conversion rate", "转化率"],
    "gmv": ["gmv", "gross merchandise value", "成交额", "交易额"],
    "order_volume": ["order volume", "number of orders", "订单量", "订单数"],
    "revenue": ["revenue", "营收", "收入"],
}

DEFAULT_VOCABULARY: dict[str, Any] = {
    "actions": {
        "warranty_claim": [
            "replacement",
            "replace",
            "warranty",
            "shattered",
            "broken screen",
            "换新",
            "保修",
            "屏幕碎",
        ],
        "stock_prediction": ["stock price", "predict the stock", "share price", "股价", "预测股票"],
        "compound_interest": ["compound interest", "复利"],
        "amortization_schedule": ["amortization", "mortgage schedule", "还款计划"],
        "order_lookup": ["my order", "order status", "查订单", "订单"],
        # Asking for a metric is asking for a metric query (longest phrase wins, so
        # "订单退款率" is a metric query, not an order lookup).
        "query_metric": [p for phrases in _METRICS.values() for p in phrases],
    },
    "tags": {
        "realtime": ["real-time", "realtime", "right now", "live data", "实时"],
        "near_realtime": ["near-real-time", "near real-time", "near realtime", "准实时", "近实时"],
    },
    "regions": {
        "shanghai": ["shanghai", "上海"],
        "beijing": ["beijing", "北京"],
        "shenzhen": ["shenzhen", "深圳"],
        "guangzhou": ["guangzhou", "广州"],
        "hangzhou": ["hangzhou", "杭州"],
        "china": ["china", "mainland china", "中国", "国内", "境内"],
        "eu": ["eu", "the eu", "europe", "european union", "欧盟", "欧洲"],
        "usa": ["usa", "united states", "美国"],
    },
    "time_windows": {
        "last_24h": ["yesterday", "last 24 hours", "past 24 hours", "last 24h", "昨天", "昨日", "过去24小时"],
        "today": ["today", "今天", "今日"],
        # not "last week"/"上周": "the phone I bought last week" is no time window
        "last_7d": ["past week", "last 7 days", "past 7 days", "最近一周", "过去一周", "过去7天"],
        "last_30d": [
            "last month",
            "past month",
            "last 30 days",
            "past 30 days",
            "上个月",
            "上月",
            "最近一个月",
            "过去30天",
        ],
    },
    "granularities": {
        "minute": [
            "by minute",
            "per minute",
            "to the minute",
            "minute by minute",
            "精确到分钟",
            "按分钟",
            "每分钟",
        ],
        "hour": [
            "hourly",
            "by hour",
            "per hour",
            "by the hour",
            "to the hour",
            "精确到小时",
            "按小时",
            "每小时",
        ],
        "day": ["daily", "by day", "per day", "按天", "按日", "每天", "每日"],
    },
    "metrics": _METRICS,
    "human_review": [
        "human review",
        "manual review",
        "reviewed by a human",
        "human approval",
        "human in the loop",
        "人工复核",
        "人工审核",
        "人工确认",
        "人工审批",
    ],
    "residency_patterns": [
        r"data\s++(?:must|should|may|can)\s*+(?:not|n't)\s++leave\s++(?:the\s++)?(?:region\s++(?:of\s++)?)?{region}",
        r"data\s++(?:must|should)\s++(?:stay|remain|be kept|reside)\s++(?:with)?in\s++{region}",
        r"keep\s++(?:the\s++|all\s++)?data\s++in\s++{region}",
        r"data\s++residency\s++in\s++{region}",
        r"数据\s*+(?:不能|不得|不可以|不可|禁止|不要)\s*+(?:离开|流出|出)\s*+{region}",
        r"数据\s*+(?:(?:必须|只能|需要)\s*+)?(?:留在|保存在|存储在|存放在)\s*+{region}",
    ],
    "residency_home_phrases": [
        "数据不能出境",
        "数据不得出境",
        "数据不出境",
        "不能出境",
        "禁止出境",
        "must not leave the country",
        "no cross-border transfer",
        "no cross border transfer",
    ],
    "home_region": "china",
    "freshness_patterns": [
        r"(?:delay|latency|lag|staleness)\s++(?:is\s++)?(?:of\s++)?"
        r"(?:more than|over|above|exceeds?|greater than)\s*+{n}\s*+{unit}",
        r"(?:delay|latency|lag)\s++(?:of\s++)?(?:under|below|within|less than|at most|up to|no more than)"
        r"\s*+{n}\s*+{unit}",
        r"(?:no|not)\s++(?:more|older)\s++than\s++{n}\s*+{unit}\s++(?:old|stale|late|behind|delayed)",
        r"(?:at most|within|up to)\s++{n}\s*+{unit}\s++(?:old|stale|late|behind|of delay)",
        r"延迟\s*+(?:超过|大于|高于|多于|超出)\s*+{n}\s*+{unit}",
        r"延迟\s*+(?:不超过|不能超过|不得超过|小于|低于|在)\s*+{n}\s*+{unit}",
        r"{n}\s*+{unit}\s*+(?:以内|之内)的数据",
    ],
    "duration_units": {
        "ms": 1,
        "milliseconds": 1,
        "millisecond": 1,
        "毫秒": 1,
        "s": 1000,
        "sec": 1000,
        "secs": 1000,
        "seconds": 1000,
        "second": 1000,
        "秒": 1000,
        "秒钟": 1000,
        "min": 60_000,
        "mins": 60_000,
        "minutes": 60_000,
        "minute": 60_000,
        "分钟": 60_000,
        "h": 3_600_000,
        "hours": 3_600_000,
        "hour": 3_600_000,
        "hrs": 3_600_000,
        "小时": 3_600_000,
        "个小时": 3_600_000,
    },
}


class Vocabulary(Model):
    """What the rule-based extractor looks for. Every mapping is ``label → phrases``.

    Phrases match case-insensitively; ASCII phrases only as whole words. Patterns are
    regular expressions with placeholders: ``{region}`` (any region phrase, captured),
    ``{n}`` (a number in digits or Chinese numerals) and ``{unit}`` (a duration unit).
    """

    actions: dict[str, list[str]] = Field(description="Action → phrases; the longest match wins.")
    tags: dict[str, list[str]] = Field(description="Tag → phrases; every matching tag is required.")
    regions: dict[str, list[str]] = Field(description="Region → phrases; the first mention wins.")
    time_windows: dict[str, list[str]] = Field(description="Window → phrases; the first mention wins.")
    granularities: dict[str, list[str]] = Field(description="Granularity → phrases; first wins.")
    metrics: dict[str, list[str]] = Field(description="Metric → phrases; the first mention wins.")
    human_review: list[str] = Field(description="Phrases meaning 'a human must review the result'.")
    residency_patterns: list[str] = Field(description="'Data must not leave {region}' patterns.")
    residency_home_phrases: list[str] = Field(description="Phrases meaning 'must not leave home_region'.")
    home_region: str = Field(description="The region the home phrases (e.g. 不能出境) refer to.")
    freshness_patterns: list[str] = Field(description="Tolerated data delay, with {n} and {unit}.")
    duration_units: dict[str, int] = Field(description="Unit word → milliseconds.")

    @classmethod
    def default(cls, **overrides: Any) -> Vocabulary:
        """The built-in English + Chinese vocabulary, with whole sections replaced by ``overrides``."""
        return cls.parse({**DEFAULT_VOCABULARY, **overrides}, what="vocabulary")

    def extended(self, **additions: Mapping[str, Sequence[str]] | Sequence[str]) -> Vocabulary:
        """A copy with phrases added to sections (labels merged, lists extended)."""
        data = self.model_dump()
        for section, more in additions.items():
            if section not in data:
                raise InvalidInput.single(section, "not a vocabulary section", what="vocabulary")
            if isinstance(data[section], dict) and isinstance(more, Mapping):
                for label, phrases in more.items():
                    data[section].setdefault(label, [])
                    data[section][label] += list(phrases)
            elif isinstance(data[section], list) and not isinstance(more, (str, Mapping)):
                data[section] += list(more)
            else:
                raise InvalidInput.single(section, "has the wrong shape for this section", what="vocabulary")
        return Vocabulary.parse(data, what="vocabulary")


_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
# Possessive, and only where a number starts: a run of digits is tried once, not once per
# digit (a text of 10,000 digits was quadratic), and never backtracked into (units do not
# start with a digit or a numeral, so nothing is lost).
_NUMERALS = "零〇一二两三四五六七八九十百千"
_NUMBER = rf"(?<![\d.{_NUMERALS}])(?P<n>\d++(?:\.\d++)?+|[{_NUMERALS}]++)"


def _cn_number(text: str) -> float:
    """``15`` or ``十五`` / ``一百二十`` → a number."""
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    total, current = 0, 0
    for ch in text:
        if ch in _CN_DIGITS:
            current = _CN_DIGITS[ch]
        else:
            total += (current or 1) * _CN_UNITS[ch]
            current = 0
    return float(total + current)


def _alternation(phrases: Sequence[str], *, after_number: bool = False) -> str:
    """One regex matching any of ``phrases``, the longest at a spot; ASCII phrases whole words only
    (CJK has no word boundaries)."""
    ordered = sorted(set(phrases), key=len, reverse=True)
    if after_number:  # units: "15min" has no word boundary before the unit
        return "|".join(rf"{re.escape(p)}(?![A-Za-z])" if p.isascii() else re.escape(p) for p in ordered)
    # The word boundaries wrap all ASCII phrases at once, not each one: the engine then
    # rejects a mid-word position once instead of once per phrase (4-8x faster). The
    # other phrases come first: where one of them and an ASCII phrase both match at a
    # spot, it is the longer (it has a non-ASCII character where the ASCII one has ended).
    words = "|".join(re.escape(p) for p in ordered if p.isascii())
    others = "|".join(re.escape(p) for p in ordered if not p.isascii())
    parts = [others] if others else []
    if words:
        parts.append(rf"(?<![A-Za-z0-9_])(?:{words})(?![A-Za-z0-9_])")
    return "|".join(parts)


class _Labelled:
    """One regex over all phrases of a section; the label of each match is looked up."""

    def __init__(self, vocab: Mapping[str, Sequence[str]]) -> None:
        self._label: dict[str, str] = {}
        for label, phrases in vocab.items():
            for p in phrases:
                self._label.setdefault(p.lower(), normalise_label(label))
        alts = _alternation(list(self._label))
        self._re = re.compile(alts, re.IGNORECASE) if alts else None

    def matches(self, text: str) -> list[tuple[str, int, int]]:
        """``(label, start, end)`` of non-overlapping matches, leftmost first, longest at a spot."""
        if self._re is None:
            return []
        return [(self._label[m.group(0).lower()], m.start(), m.end()) for m in self._re.finditer(text)]

    def first(self, text: str) -> str:
        """The label of the leftmost match (the first of :meth:`matches`), or ``""``."""
        m = self._re.search(text) if self._re is not None else None
        return self._label[m.group(0).lower()] if m else ""


#: How much of a request's text the rule-based extractor reads (the rest is ignored).
MAX_TEXT_CHARS = 8_000


class RuleBasedExtractor:
    """Vocabularies → constraints (see :class:`Vocabulary`). English and Chinese by default.

    Args:
        vocabulary: The phrases to look for (default :meth:`Vocabulary.default`).
        actions: Shortcut replacing the action vocabulary.
        tags: Shortcut replacing the tag vocabulary.
        max_text_chars: Only the first this many characters of a text are read (default
            :data:`MAX_TEXT_CHARS`): what a request requires is stated up front, and the
            time one extraction takes stays bounded whatever a client sends.
    """

    def __init__(
        self,
        vocabulary: Vocabulary | Mapping[str, Any] | None = None,
        *,
        actions: Mapping[str, Sequence[str]] | None = None,
        tags: Mapping[str, Sequence[str]] | None = None,
        max_text_chars: int = 0,
    ) -> None:
        if max_text_chars < 0:
            raise InvalidInput.single("max_text_chars", "must be 0 (default) or positive", what="extractor")
        self.max_text_chars = max_text_chars or MAX_TEXT_CHARS
        if vocabulary is None:
            vocab = Vocabulary.default()
        elif isinstance(vocabulary, Vocabulary):
            vocab = vocabulary
        else:
            vocab = Vocabulary.default(**dict(vocabulary))
        if actions is not None or tags is not None:
            data = vocab.model_dump()
            if actions is not None:
                data["actions"] = {k: list(v) for k, v in actions.items()}
            if tags is not None:
                data["tags"] = {k: list(v) for k, v in tags.items()}
            vocab = Vocabulary.parse(data, what="vocabulary")
        self.vocabulary = vocab
        self._actions = _Labelled(vocab.actions)
        self._tags = _Labelled(vocab.tags)
        self._regions = _Labelled(vocab.regions)
        self._windows = _Labelled(vocab.time_windows)
        self._granularities = _Labelled(vocab.granularities)
        self._metrics = _Labelled(vocab.metrics)
        self._review = _Labelled({"yes": vocab.human_review})
        self._home = _Labelled({vocab.home_region: vocab.residency_home_phrases})
        region_alt = f"(?P<region>{self._regions._re.pattern})" if self._regions._re else "(?P<region>(?!))"
        self._residency = [
            re.compile(p.replace("{region}", region_alt), re.IGNORECASE) for p in vocab.residency_patterns
        ]
        self._units = {u.lower(): ms for u, ms in vocab.duration_units.items()}
        unit_alt = f"(?P<unit>{_alternation(list(vocab.duration_units), after_number=True)})"
        self._freshness = [
            re.compile(p.replace("{n}", _NUMBER).replace("{unit}", unit_alt), re.IGNORECASE)
            for p in vocab.freshness_patterns
        ]

    async def extract(self, text: str) -> Constraints:
        return self.extract_sync(text)

    def extract_sync(self, text: str) -> Constraints:
        """The same as :meth:`extract`, for callers without an event loop."""
        text = text[: self.max_text_chars]
        residency, rest = self._residency_of(text)
        best: tuple[int, str] | None = None
        for label, start, end in self._actions.matches(text):
            if best is None or end - start > best[0]:
                best = (end - start, label)
        # labels from the validated vocabulary, normalised when it was read: valid as they are
        return trusted(
            Constraints,
            {
                "action": best[1] if best else "",
                "tags": normalise_tag_set([label for label, _, _ in self._tags.matches(text)]),
                "name": "",
                "version_range": "",
                "max_latency_ms": 0,
                "region": self._regions.first(rest),
                "data_residency": residency,
                "time_window": self._windows.first(text),
                "freshness_tolerance_ms": self._freshness_of(text),
                "metric": self._metrics.first(text),
                "granularity": self._granularities.first(text),
                "needs_human_review": bool(self._review.first(text)),
                "extras": {},
            },
        )

    def _residency_of(self, text: str) -> tuple[str, str]:
        """The residency region, and the text with residency phrases blanked out (so the
        region named in "data must not leave the EU" is not also the region served)."""
        for pattern in self._residency:
            m = pattern.search(text)
            if m:
                region = self._regions.first(m.group("region"))
                return region, text[: m.start()] + " " + text[m.end() :]
        home = self._home.matches(text)
        if home:
            label, start, end = home[0]
            return label, text[:start] + " " + text[end:]
        return "", text

    def _freshness_of(self, text: str) -> int | None:
        for pattern in self._freshness:
            m = pattern.search(text)
            if m:
                return int(_cn_number(m.group("n")) * self._units[m.group("unit").lower()])
        return None


# ------------------------------------------------------------------ LangChain
_ALIASES = {
    # the seed's own prompt uses these names
    "temporal_requirement": "time_window",
    "geo_scope": "region",
    "freshness_tolerance": "freshness_tolerance_ms",
    "residency": "data_residency",
    "human_review": "needs_human_review",
}

DEFAULT_INSTRUCTIONS = """You are a capability-routing parser. Extract the structured constraints \
from the user's request. Answer with ONE JSON object and nothing else. Keys (omit what the request \
does not say):
  "action": the operation wanted, snake_case (e.g. "query_metric", "warranty_claim")
  "tags": list of required capability tags, e.g. ["realtime"]
  "region": region whose data is asked about, lower-case (e.g. "shanghai")
  "data_residency": region the data must not leave, if the request says so
  "time_window": one of "today", "last_24h", "last_7d", "last_30d"
  "freshness_tolerance_ms": largest acceptable data delay in milliseconds (integer)
  "metric": the metric, snake_case (e.g. "refund_rate")
  "granularity": one of "minute", "hour", "day"
  "needs_human_review": true if a human must review the result
Example: 帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的 ->
{"action": "query_metric", "time_window": "last_24h", "freshness_tolerance_ms": 900000, \
"region": "shanghai", "metric": "refund_rate", "granularity": "hour"}"""


class LangChainExtractor:
    """Asks a LangChain chat model for the constraints as JSON; falls back to rules.

    The answer must be one JSON object (a fenced ```json block is accepted) whose keys
    validate as :class:`Constraints` (the seed's names ``temporal_requirement`` and
    ``geo_scope`` are accepted too; unknown keys go to ``extras``). Anything else — no
    JSON, the wrong types, a model error — and the :class:`RuleBasedExtractor` answers
    instead; ``extras["extractor"]`` says which one did (``llm`` or ``rules``) and
    ``extras["llm_error"]`` why the model's answer was not used.

    Args:
        model: Any ``langchain_core`` chat model (``BaseChatModel``), e.g. ``ChatOpenAI``.
        fallback: Used on an invalid answer (default: a :class:`RuleBasedExtractor`).
        instructions: The system prompt (default: :data:`DEFAULT_INSTRUCTIONS`).

    Raises:
        ImportError: ``langchain-core`` is not installed (``pip install
            'agency-middleware[langchain]'``).
    """

    def __init__(
        self,
        model: Any,
        *,
        fallback: ConstraintExtractor | None = None,
        instructions: str = DEFAULT_INSTRUCTIONS,
    ) -> None:
        try:
            from langchain_core import messages
        except ImportError as exc:
            raise ImportError(
                "LangChainExtractor needs langchain-core; install it with "
                "pip install 'agency-middleware[langchain]'"
            ) from exc
        self._messages = messages
        self.model = model
        self.fallback = fallback or RuleBasedExtractor()
        self.instructions = instructions

    async def extract(self, text: str) -> Constraints:
        prompt = [self._messages.SystemMessage(self.instructions), self._messages.HumanMessage(text)]
        try:
            reply = await self.model.ainvoke(prompt)
            constraints = _from_llm(_content_text(reply))
        except InvalidInput as exc:
            return await self._fallback(text, str(exc))
        except Exception as exc:  # a model/transport error: the rules still answer
            return await self._fallback(text, f"{type(exc).__name__}: {exc}")
        constraints.extras = {**constraints.extras, "extractor": "llm"}
        return constraints

    async def _fallback(self, text: str, error: str) -> Constraints:
        log.warning("LLM constraint extraction unusable, using rules: %s", error)
        constraints = await self.fallback.extract(text)
        constraints.extras = {**constraints.extras, "extractor": "rules", "llm_error": error}
        return constraints


def _content_text(reply: Any) -> str:
    content = getattr(reply, "content", reply)
    if isinstance(content, list):  # content blocks
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


def _from_llm(text: str) -> Constraints:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise InvalidInput.single("(root)", "the model's answer contains no JSON object", what="LLM answer")
    try:
        data = json.loads(body[start : end + 1])
    except ValueError as exc:
        raise InvalidInput.single("(root)", f"not valid JSON: {exc}", what="LLM answer") from None
    if not isinstance(data, dict):
        raise InvalidInput.single("(root)", "must be a JSON object", what="LLM answer")
    fields: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key, value in data.items():
        key = _ALIASES.get(str(key), str(key))
        if value is None:
            continue
        if key in _SETTABLE:
            fields[key] = value
        else:
            extras[key] = value
    return Constraints.parse({**fields, "extras": extras}, what="LLM answer")
