"""Short English and Chinese sentences turned into structured verification steps.

The grammar covers the common cases only; anything else is refused with a clear
error, unless it is marked manual (``manual: ...``, ``[manual] ...``, ``人工: ...``,
``【人工】...``), which makes it a :class:`~middleware.goals.steps.ManualStep`.

Subjects: ``output`` (also reply / response / answer; 输出 / 回复 / 结果 / 答复), a JSON
path (``$.a.b``), or a field (``field a.b`` / ``字段a.b`` / ``a.b字段``, meaning
``$.a.b``). Values are JSON when they parse as JSON (``3``, ``true``, ``"x"``), else
text; surrounding quotes (``"" '' “” 「」 《》``) are removed.

English::

    output contains X                 output does not contain X
    output matches /REGEX/            output has at most|at least N characters
    $.a equals V  | $.a is V | $.a == V    $.a exists | $.a does not exist
    $.a is one of V1, V2 or V3        $.a > V | >= | < | <= | is greater than V ...
    $.a is between A and B            $.items has at least|at most N items
    $.a is within N days|months|years (a date: calendar arithmetic, see .dates)
    every item of $.items has field F     every item of $.items: <sentence about $>

Chinese::

    (检查)输出(是否)包含X(字段)         输出不包含X
    输出匹配正则 /REGEX/                输出不超过N个字符 | 输出至少N个字符
    字段X等于Y | 字段X为Y | $.a 等于 3    字段X存在 | 字段X不存在
    字段X是A、B或C之一                  $.a 大于 V | 大于等于 | 小于 | 小于等于 | 不超过 ...
    $.a 在 A 和 B 之间                  $.items 至少有N项 | 最多有N项
    字段a在N天内 | $.a 在N个月以内 | $.a 不超过N年
    $.items 的每一项都有F字段           $.items 的每一项: <关于 $ 的句子>

Business sentences the grammar does not cover (the seed's own section 4.3, e.g.
``检查用户是否在保修期内（购机≤12个月）``) are tried last against the domain phrases of
:mod:`.phrases`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from pydantic import BaseModel, ValidationError

from .dates import UNIT_PATTERN, unit_of
from .phrases import parse_phrase
from .steps import (
    ContainsStep,
    EveryItemStep,
    JsonPathStep,
    LengthStep,
    ManualStep,
    NotContainsStep,
    RegexStep,
)

__all__ = ["MAX_SENTENCE_LENGTH", "SentenceError", "coerce_step", "parse_step_sentence"]

MAX_SENTENCE_LENGTH = 2000
_MAX_DEPTH = 3


class SentenceError(ValueError):
    """A sentence that is not a check a machine can perform."""


_HINT = (
    "write a structured step (kind: contains | not_contains | regex | json_path | json_schema | "
    "length | every_item | custom), or mark it manual ('manual: ...' / '人工: ...')"
)

_MANUAL = re.compile(
    r"^\s*(?:manual\s*[:\-]|\[manual\]|\(manual\)|人工(?:核查|确认|检查|审核)?\s*[:\-]|【人工[^】]*】|\[人工\])\s*(?P<rest>.*)$",
    re.I | re.S,
)
_OPEN_Q = "\"'“‘「『《`"
_CLOSE_Q = "\"'”’」』》`"

_SUBJECT_EN = r"(?:the\s+)?(?:output|reply|response|answer|result)"
_SUBJECT_ZH = r"(?:输出|回复|结果|答复|回答)(?:内容)?(?:中|里)?"
_CHECK_ZH = r"(?:检查|验证|确认|校验)?"
_CHECK_EN = r"(?:(?:check|verify|ensure|assert)\s+(?:that\s+|whether\s+|if\s+)?)?"

_NUM = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_PATH = r"\$(?:[^\s，。,:：=<>≥≤!]*)"
_FIELD_NAME = r"[A-Za-z_\u00c0-\uffff][\w.\-\[\]\*]*"


def _strip(text: str) -> str:
    text = text.strip().rstrip("。.!！;；").strip()
    return text


def _unquote(text: str) -> tuple[str, bool]:
    t = text.strip()
    if len(t) >= 2 and t[0] in _OPEN_Q and t[-1] in _CLOSE_Q:
        inner = t[1:-1]
        if t[0] not in inner and t[-1] not in inner:  # "'a' and 'b'" is not one quoted value
            return inner, True
    return t, False


def _value(text: str) -> Any:
    raw, quoted = _unquote(text)
    if quoted:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        low = raw.lower()
        if low in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[low]
        return raw


def _field_path(name: str) -> str:
    name, _ = _unquote(name)
    if name.startswith("$"):
        return name
    if re.fullmatch(
        r"[A-Za-z_\u00c0-\uffff][\w\u00c0-\uffff-]*(?:\.[A-Za-z_\u00c0-\uffff][\w\u00c0-\uffff-]*)*", name
    ):
        return "$." + name
    escaped = name.replace("\\", "\\\\").replace("'", "\\'")
    return f"$['{escaped}']"


def _list_values(text: str) -> list[Any]:
    raw = text.strip()
    if raw.startswith("["):
        try:
            parsed = json.loads(raw)
            if isinstance(parsed, list):
                return parsed
        except ValueError:
            pass
    parts = re.split(r"\s*(?:,|，|、|/|\bor\b|或者|或)\s*", raw)
    return [_value(p) for p in parts if p.strip()]


def _contains_value(text: str) -> str:
    value, quoted = _unquote(text)
    if not quoted:
        value = re.sub(r"^(?:the|a|an)\s+", "", value, flags=re.I)
        value = re.sub(r"\s*(?:字段|field)$", "", value, flags=re.I)
        value, _ = _unquote(value)
    if not value.strip():
        raise SentenceError("the text to look for is empty")
    return value


# --------------------------------------------------------------------------- patterns
_OUTPUT_RULES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            rf"^{_CHECK_EN}{_SUBJECT_EN}\s+(?:does\s+not|doesn't|must\s+not|should\s+not|may\s+not|"
            rf"does\s+never|never)\s+(?:contain|include|mention)s?\s+(?P<v>.+)$",
            re.I | re.S,
        ),
        "not_contains",
    ),
    (
        re.compile(
            rf"^{_CHECK_EN}{_SUBJECT_EN}\s+(?:must\s+|should\s+|does\s+)?(?:contains?|includes?|mentions?)\s+(?P<v>.+)$",
            re.I | re.S,
        ),
        "contains",
    ),
    (
        re.compile(
            rf"^{_CHECK_EN}{_SUBJECT_EN}\s+(?:must\s+|should\s+)?match(?:es)?\s+(?:the\s+)?(?:regex|pattern|regular\s+expression)?\s*/(?P<v>.+)/(?P<f>i?)$",
            re.I | re.S,
        ),
        "regex",
    ),
    (
        re.compile(
            rf"^{_CHECK_ZH}{_SUBJECT_ZH}(?:是否)?(?:不|不得|不能|不应|不应该|不应当|不可|未|没有|禁止)(?:包含|含有|包括|提到|出现)(?P<v>.+)$",
            re.S,
        ),
        "not_contains",
    ),
    (
        re.compile(
            rf"^{_CHECK_ZH}{_SUBJECT_ZH}(?:是否)?(?:必须|应|应该|应当|需要|需)?(?:包含|含有|包括|提到|出现)(?:了)?(?P<v>.+)$",
            re.S,
        ),
        "contains",
    ),
    (
        re.compile(
            rf"^{_CHECK_ZH}{_SUBJECT_ZH}(?:是否)?(?:匹配|符合)(?:正则(?:表达式)?)?\s*/(?P<v>.+)/(?P<f>i?)$",
            re.S,
        ),
        "regex",
    ),
]

_LENGTH_EN = re.compile(
    rf"^{_CHECK_EN}(?P<subj>{_SUBJECT_EN}|{_PATH}|(?:the\s+)?field\s+{_FIELD_NAME})\s+(?:is|has|must\s+be|must\s+have|should\s+be|should\s+have)\s+"
    r"(?:(?P<cmp>at\s+most|no\s+more\s+than|up\s+to|at\s+least|no\s+fewer\s+than|no\s+less\s+than)\s+(?P<n>\d+)"
    r"|between\s+(?P<lo>\d+)\s+and\s+(?P<hi>\d+))\s+(?:characters?|chars?|items?|elements?|entries|keys?|fields?)"
    r"(?:\s+long)?$",
    re.I,
)
_LENGTH_ZH = re.compile(
    rf"^{_CHECK_ZH}(?P<subj>{_SUBJECT_ZH}|{_PATH}\s*|字段\s*{_FIELD_NAME}\s*)(?:的)?(?:长度)?(?:是否)?\s*"
    r"(?:(?P<cmp>不超过|最多|至多|不多于|至少|不少于|最少)(?:有)?\s*(?P<n>\d+)"
    r"|(?:在|介于)\s*(?P<lo>\d+)\s*(?:和|与|到|至|-)\s*(?P<hi>\d+)\s*(?:之间)?)\s*(?:个)?(?:字符|字|项|个元素|元素|条|个字段|个键)$"
)

_COMPARE_WORDS = {
    # English
    ">": "gt",
    ">=": "ge",
    "<": "lt",
    "<=": "le",
    "≥": "ge",
    "≤": "le",
    "==": "equals",
    "=": "equals",
    "is greater than or equal to": "ge",
    "is less than or equal to": "le",
    "is greater than": "gt",
    "is more than": "gt",
    "is above": "gt",
    "is at least": "ge",
    "is no less than": "ge",
    "is less than": "lt",
    "is below": "lt",
    "is under": "lt",
    "is at most": "le",
    "is no more than": "le",
    "is equal to": "equals",
    "equals": "equals",
    "must equal": "equals",
    "must be": "equals",
    "should be": "equals",
    "is": "equals",
    # Chinese
    "大于等于": "ge",
    "大于或等于": "ge",
    "不小于": "ge",
    "不低于": "ge",
    "至少为": "ge",
    "至少是": "ge",
    "至少": "ge",
    "小于等于": "le",
    "小于或等于": "le",
    "不大于": "le",
    "不高于": "le",
    "不超过": "le",
    "至多为": "le",
    "最多为": "le",
    "至多": "le",
    "最多": "le",
    "大于": "gt",
    "高于": "gt",
    "超过": "gt",
    "小于": "lt",
    "低于": "lt",
    "等于": "equals",
    "应为": "equals",
    "应该是": "equals",
    "为": "equals",
    "是": "equals",
}
_CMP_ALT = "|".join(re.escape(w) for w in sorted(_COMPARE_WORDS, key=len, reverse=True))

_SUBJECT_FIELD = (
    rf"(?P<subj>{_PATH}|(?:the\s+)?field\s+(?P<f1>[\"'“]?{_FIELD_NAME}[\"'”]?)"
    rf"|字段\s*(?P<f2>[\"'“「]?{_FIELD_NAME}?[\"'”」]?)|(?P<f3>[\"'“「]?{_FIELD_NAME}?[\"'”」]?)\s*字段)"
)
_PREFIX = rf"^(?:{_CHECK_EN}|{_CHECK_ZH})"
_OF = r"(?:\s*的值|\s*的取值|\s+value)?\s*(?:是否)?\s*"

_EXISTS = re.compile(
    rf"{_PREFIX}{_SUBJECT_FIELD}{_OF}(?P<op>exists|is\s+present|is\s+set|must\s+exist|存在|不为空|"
    rf"does\s+not\s+exist|doesn't\s+exist|is\s+absent|is\s+missing|is\s+not\s+present|must\s+not\s+exist|不存在|缺失)$",
    re.I,
)
_ONE_OF = re.compile(
    rf"{_PREFIX}{_SUBJECT_FIELD}{_OF}(?:(?:is|must\s+be|should\s+be)\s+(?:one\s+of|in|any\s+of)\s+(?P<v1>.+)"
    rf"|(?:是|为|属于|在)\s*(?P<v2>.+?)\s*(?:之一|中的一个|其中之一|中的一项)|属于\s*(?P<v3>\[.+\]))$",
    re.I | re.S,
)
_BETWEEN = re.compile(
    rf"{_PREFIX}{_SUBJECT_FIELD}{_OF}(?:is\s+between\s+(?P<a1>{_NUM})\s+and\s+(?P<b1>{_NUM})"
    rf"|(?:在|介于)\s*(?P<a2>{_NUM})\s*(?:和|与|到|至|-|~)\s*(?P<b2>{_NUM})\s*(?:之间)?)$",
    re.I,
)
_WITHIN = re.compile(
    rf"{_PREFIX}{_SUBJECT_FIELD}{_OF}(?:is\s+within|within|is\s+at\s+most|is\s+no\s+more\s+than|<=|≤|不超过|在)"
    rf"\s*(?P<n>\d+)\s*{UNIT_PATTERN}\s*(?:old|ago|以内|之内|内)?$",
    re.I,
)
_COMPARE = re.compile(rf"{_PREFIX}{_SUBJECT_FIELD}{_OF}(?P<op>{_CMP_ALT})\s*(?P<v>.+)$", re.I | re.S)

_EVERY_EN = re.compile(
    rf"^{_CHECK_EN}(?:every|each|all)\s+(?:items?|elements?|entr(?:y|ies))\s+(?:of|in)\s+(?P<path>{_PATH})\s*[:,]?\s*(?P<rest>.+)$",
    re.I | re.S,
)
_EVERY_ZH = re.compile(
    rf"^{_CHECK_ZH}(?P<path>{_PATH})\s*(?:中|里)?的?(?:每一项|每项|每个元素|每一个元素|每个|所有项|所有元素)\s*[:：,，]?\s*(?:都|均)?(?P<rest>.+)$",
    re.S,
)
_ITEM_HAS_FIELD = re.compile(
    r"^(?:(?:has|have|contains?)\s+(?:a\s+|an\s+|the\s+)?(?:field|key)\s+(?P<f1>\S+)"
    r"|(?:有|包含|含有|具有)\s*(?P<f2>\S+?)\s*字段)$",
    re.I,
)
_ITEM_CONTAINS = re.compile(
    r"^(?:(?:contains?|includes?|mentions?)\s+(?P<v1>.+)|(?:包含|含有|包括)(?P<v2>.+))$", re.I
)
_ITEM_NOT_CONTAINS = re.compile(
    r"^(?:(?:does\s+not|doesn't|must\s+not)\s+(?:contain|include|mention)\s+(?P<v1>.+)|(?:不包含|不含有|不得包含)(?P<v2>.+))$",
    re.I,
)


def parse_step_sentence(sentence: str) -> BaseModel:
    """Turn a short English or Chinese sentence into a structured step.

    Args:
        sentence: e.g. ``"output contains the tracking number"``, ``"字段fee等于0"``,
            ``"$.a.b equals 3"`` or ``"manual: ensure the user is satisfied"``.

    Returns:
        The structured step (its ``description`` is the sentence).

    Raises:
        SentenceError: the sentence is not a check a machine can perform (and is not
            marked manual); the message says why and what to write instead.
    """
    if not isinstance(sentence, str):
        raise SentenceError(f"a step sentence must be text, got {type(sentence).__name__}")
    if len(sentence) > MAX_SENTENCE_LENGTH:
        raise SentenceError(f"a step sentence is limited to {MAX_SENTENCE_LENGTH} characters")
    original = sentence.strip()
    if not original:
        raise SentenceError("empty step sentence")
    text = _strip(unicodedata.normalize("NFKC", original).replace("\u3000", " "))
    manual = _MANUAL.match(text)
    if manual:
        rest = manual.group("rest").strip()
        if not rest:
            raise SentenceError("a manual step needs a description of what a person must check")
        return ManualStep(description=rest)
    try:
        step = _parse(text, original, 0)
    except SentenceError:
        raise
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise SentenceError(f"cannot turn {original!r} into a check: {msg}") from None
    except (ValueError, re.error, RecursionError) as exc:
        raise SentenceError(f"cannot turn {original!r} into a check: {exc}") from None
    if step is None:
        step = parse_phrase(text, original)  # the business's own sentences (seed section 4.3)
    if step is None:
        raise SentenceError(f"cannot turn {original!r} into a machine check; {_HINT}")
    return step


def _parse(text: str, description: str, depth: int) -> BaseModel | None:
    for pattern, kind in _OUTPUT_RULES:
        m = pattern.match(text)
        if not m:
            continue
        if kind == "regex":
            return RegexStep(pattern=m.group("v"), ignore_case=bool(m.group("f")), description=description)
        value = _contains_value(m.group("v"))
        if kind == "contains":
            return ContainsStep(value=value, description=description)
        return NotContainsStep(value=value, description=description)

    m = _LENGTH_EN.match(text) or _LENGTH_ZH.match(text)
    if m:
        return _length(m, description)

    m = _EVERY_EN.match(text) or _EVERY_ZH.match(text)
    if m:
        if depth >= _MAX_DEPTH:
            raise SentenceError(f"every-item checks nest at most {_MAX_DEPTH} deep")
        inner = _item_step(_strip(m.group("rest")), depth + 1)
        if inner is None:
            raise SentenceError(
                f"cannot turn {m.group('rest')!r} (what every item of {m.group('path')} must satisfy) "
                f"into a check; {_HINT}"
            )
        return EveryItemStep(path=m.group("path"), step=inner, description=description)

    m = _EXISTS.match(text)
    if m:
        op = m.group("op").lower()
        negative = op.startswith(
            ("does", "doesn", "is absent", "is missing", "is not", "must not", "不", "缺")
        )
        return JsonPathStep(
            path=_subject(m), op="not_exists" if negative else "exists", description=description
        )

    m = _WITHIN.match(text)
    if m:
        unit = unit_of(m.group("unit"))
        return JsonPathStep(
            path=_subject(m), op=f"within_{unit}", value=int(m.group("n")), description=description
        )

    m = _BETWEEN.match(text)
    if m:
        lo = json.loads(m.group("a1") or m.group("a2"))
        hi = json.loads(m.group("b1") or m.group("b2"))
        return JsonPathStep(path=_subject(m), op="between", value=[lo, hi], description=description)

    m = _ONE_OF.match(text)
    if m:
        values = _list_values(m.group("v1") or m.group("v2") or m.group("v3"))
        return JsonPathStep(path=_subject(m), op="one_of", value=values, description=description)

    m = _COMPARE.match(text)
    if m:
        op = _COMPARE_WORDS[m.group("op").lower() if m.group("op").isascii() else m.group("op")]
        raw = m.group("v").strip()
        if not raw:
            return None
        value = _value(raw)
        if op != "equals" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SentenceError(f"cannot compare {m.group('subj')} with {raw!r}: a number is needed")
        return JsonPathStep(path=_subject(m), op=op, value=value, description=description)
    return None


def _subject(m: re.Match[str]) -> str:
    for group in ("f1", "f2", "f3"):
        name = m.groupdict().get(group)
        if name:
            return _field_path(name)
    subj = m.group("subj").strip()
    if subj.startswith("$"):
        return subj
    raise SentenceError(f"cannot tell which field {subj!r} names")


def _length(m: re.Match[str], description: str) -> LengthStep:
    subj = m.group("subj").strip()
    path: str | None = None
    if subj.startswith("$"):
        path = subj
    elif subj.lower().startswith(("field", "the field")):
        path = _field_path(subj.split()[-1])
    elif subj.startswith("字段"):
        path = _field_path(subj[2:].strip())
    if m.group("lo") is not None:
        return LengthStep(path=path, min=int(m.group("lo")), max=int(m.group("hi")), description=description)
    n = int(m.group("n"))
    cmp = m.group("cmp").lower()
    if cmp.startswith(("at least", "no fewer", "no less")) or cmp in ("至少", "不少于", "最少"):
        return LengthStep(path=path, min=n, description=description)
    return LengthStep(path=path, max=n, description=description)


def _item_step(rest: str, depth: int) -> BaseModel | None:
    m = _ITEM_HAS_FIELD.match(rest)
    if m:
        name = m.group("f1") or m.group("f2")
        return JsonPathStep(path=_field_path(name), op="exists", description=f"has field {name}")
    m = _ITEM_NOT_CONTAINS.match(rest)
    if m:
        value = _contains_value(m.group("v1") or m.group("v2"))
        return NotContainsStep(value=value, description=rest)
    m = _ITEM_CONTAINS.match(rest)
    if m:
        value = _contains_value(m.group("v1") or m.group("v2"))
        return ContainsStep(value=value, description=rest)
    return _parse(rest, rest, depth)


def coerce_step(value: Any) -> Any:
    """Turn what a user wrote for a step into something the step union validates.

    A string is a sentence; ``{"sentence": "...", "manual": true}`` is a sentence too
    (manual when marked). Anything else is returned unchanged for normal validation.

    Raises:
        SentenceError: for a sentence that is not a machine check and not manual.
    """
    if isinstance(value, str):
        return parse_step_sentence(value)
    if isinstance(value, dict) and "sentence" in value and "kind" not in value:
        extra = set(value) - {"sentence", "manual", "description"}
        if extra:
            raise SentenceError(f"unknown keys next to 'sentence': {', '.join(sorted(extra))}")
        sentence = value["sentence"]
        if not isinstance(sentence, str):
            raise SentenceError("sentence must be text")
        if value.get("manual") is True:
            if not sentence.strip():
                raise SentenceError("a manual step needs a description of what a person must check")
            return ManualStep(description=value.get("description") or sentence.strip())
        step = parse_step_sentence(sentence)
        if value.get("description") and hasattr(step, "description"):
            step = step.model_copy(update={"description": value["description"]})
        return step
    return value
