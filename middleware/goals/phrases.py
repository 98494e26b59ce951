"""Domain phrases: business sentences (the seed's own, section 4.3) turned into checks.

The general grammar (:mod:`.sentences`) speaks of outputs and fields. A goal written
by a business user speaks of the business: "检查用户是否在保修期内（购机≤12个月）".
This module knows a small vocabulary of such phrases and the output fields they are
about, and turns three sentence shapes into structured steps:

* **purchase age** – ``…购机≤N个月…`` (also ``N天``, ``N年``) / ``purchased within N months``
  (days, years) / ``bought no more than N months ago``: every ``purchase_date`` in the output
  (at any depth) is at most N calendar months (days, years) before today (``json_path``
  ``$..purchase_date`` ``within_months`` N; :mod:`.dates` says how a calendar counts);
* **fault type** – ``(确认)故障类型为X(且非人为损坏)`` / ``fault type is X (and not
  accidental/human damage)``: every ``fault_type`` is X (its code or its Chinese name),
  and, with the second half, every ``accidental`` flag is ``false`` (it must be stated);
* **what the reply gives** – ``输出A、B、C`` / ``reply gives A, B and C``: each named
  item is a field present somewhere in the output (``更换机型`` -> ``model``,
  ``预计送达时间`` -> ``estimated_delivery``, ``是否收取费用`` -> ``fee`` ...). Only
  when every item is a known term; otherwise the sentence is left to the grammar.

:data:`FIELD_TERMS` and :data:`FAULT_TERMS` are the vocabulary; extend them to teach
the grammar more of your domain.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from .dates import UNIT_PATTERN, unit_of
from .steps import AllOfStep, JsonPathStep

__all__ = ["FAULT_TERMS", "FIELD_TERMS", "parse_phrase"]

#: Words for an output field -> the field's name (found at any depth: ``$..name``).
FIELD_TERMS: dict[str, str] = {
    "更换机型": "model",
    "机型": "model",
    "型号": "model",
    "设备型号": "model",
    "model": "model",
    "replacement model": "model",
    "预计送达时间": "estimated_delivery",
    "预计到达时间": "estimated_delivery",
    "送达时间": "estimated_delivery",
    "预计送达日期": "estimated_delivery",
    "delivery estimate": "estimated_delivery",
    "estimated delivery": "estimated_delivery",
    "expected delivery": "estimated_delivery",
    "是否收取费用": "fee",
    "收取费用": "fee",
    "费用": "fee",
    "fee": "fee",
    "运单号": "tracking_number",
    "快递单号": "tracking_number",
    "tracking number": "tracking_number",
}

#: A fault's names -> the values ``fault_type`` may hold for it (its code first).
FAULT_TERMS: dict[str, list[str]] = {
    "屏幕碎裂": ["screen_shattered", "屏幕碎裂"],
    "屏幕破碎": ["screen_shattered", "屏幕碎裂"],
    "碎屏": ["screen_shattered", "屏幕碎裂"],
    "screen shattered": ["screen_shattered", "屏幕碎裂"],
    "shattered screen": ["screen_shattered", "屏幕碎裂"],
    "screen_shattered": ["screen_shattered", "屏幕碎裂"],
    "电池故障": ["battery_fault", "电池故障"],
    "battery fault": ["battery_fault", "电池故障"],
}

_PURCHASE = re.compile(
    r"(?:购机|购买|买机|purchased?|bought)\s*(?:时间|日期)?\s*(?:(?:≤|<=|不超过|不超过了|within|no\s+more\s+than)\s*)"
    r"(?P<n>\d+)\s*" + UNIT_PATTERN,
    re.I,
)
_FAULT = re.compile(
    r"^(?:确认|检查|验证|confirm\s+(?:that\s+)?|check\s+(?:that\s+)?)?(?:the\s+)?(?:故障类型|fault\s+type)\s*"
    r"(?:为|是|is)\s*(?P<fault>.+?)\s*(?P<neg>(?:且|并且|,|，|and)\s*(?:非人为损坏|不是人为损坏|非意外损坏|"
    r"not\s+(?:accidental|human)\s+damage))?$",
    re.I,
)
_GIVES = re.compile(
    r"^(?:(?:检查|确认)?(?:输出|回复|答复)(?:中)?(?:给出|包含|提供)?"
    r"|(?:the\s+)?(?:output|reply|answer)\s+(?:gives|states|provides|includes))\s*(?P<items>.+)$",
    re.I,
)
_SPLIT = re.compile(r"\s*(?:、|,|，|;|；|\band\b|及|和|以及)\s*", re.I)


def _field_step(term: str) -> JsonPathStep | None:
    name = FIELD_TERMS.get(term.strip().lower())
    if name is None:
        return None
    return JsonPathStep(path=f"$..{name}", op="exists", description=f"gives {term.strip()} ({name})")


def parse_phrase(text: str, description: str) -> BaseModel | None:
    """The check a domain sentence states, or ``None`` when it is not one of the shapes above."""
    m = _PURCHASE.search(text)
    if m:
        unit = unit_of(m.group("unit"))
        return JsonPathStep(
            path="$..purchase_date", op=f"within_{unit}", value=int(m.group("n")), description=description
        )
    m = _FAULT.match(text)
    if m:
        fault = m.group("fault").strip().strip("“”\"'「」")
        values = FAULT_TERMS.get(fault.lower(), [fault])
        checks: list[BaseModel] = [
            JsonPathStep(
                path="$..fault_type", op="one_of", value=values, description=f"fault type is {fault}"
            )
        ]
        if m.group("neg"):
            checks.append(
                JsonPathStep(
                    path="$..accidental",
                    op="equals",
                    value=False,
                    description="not human (accidental) damage",
                )
            )
        return AllOfStep(steps=checks, description=description)
    m = _GIVES.match(text)
    if m:
        items = [i for i in _SPLIT.split(m.group("items")) if i.strip()]
        steps = [_field_step(i) for i in items]
        if not items or any(s is None for s in steps):
            return None
        return AllOfStep(steps=steps, description=description)
    return None
