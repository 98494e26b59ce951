"""Calendar arithmetic for goal checks: "bought within 12 months" on dates, not on seconds.

A duration of days, months or years is added to a date the way a calendar does it: a
month later is the same day of the next month, or that month's last day when it is
shorter (31 January + 1 month = 28 or 29 February; 29 February + 1 year = 28 February).
A date is *within* N units of today when today is no later than the date plus N units:
bought on 2025-12-01, "≤ 12 months" holds through 2026-12-01 and fails from 2026-12-02;
bought on 2025-11-06, it fails on 2026-12-01 (390 days, 12 months and 25 days).

Days are calendar days in one time zone, the check's (``UTC`` unless it names another
IANA zone): today is the clock's time in that zone, a time with an offset counts as the
day it is in that zone, a plain date or a time without an offset as written.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "UNITS",
    "UNIT_PATTERN",
    "Unit",
    "add_period",
    "age_words",
    "day_of",
    "time_zone",
    "unit_of",
    "within_reason",
]

Unit = Literal["days", "months", "years"]
UNITS: tuple[Unit, ...] = ("days", "months", "years")

#: How sentences name the units (English and Chinese); ``unit_of`` reads a match.
UNIT_PATTERN = r"(?P<unit>个月|個月|months?|天|日|days?|年|years?)"


def unit_of(word: str) -> Unit:
    """The unit a sentence's word names (``个月`` and ``months`` are months ...)."""
    w = word.lower()
    if w in ("天", "日") or w.startswith("day"):
        return "days"
    if w == "年" or w.startswith("year"):
        return "years"
    return "months"


def time_zone(name: str) -> tzinfo:
    """The zone named ``name`` (``UTC`` or an IANA name such as ``Asia/Shanghai``).

    Raises:
        ValueError: no such time zone.
    """
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a time zone (UTC or an IANA name such as Asia/Shanghai)") from None


def add_period(day: date, n: int, unit: Unit) -> date:
    """``day`` plus ``n`` days, months or years, clamped to the last day of a shorter month."""
    if unit == "days":
        return date.fromordinal(day.toordinal() + n)
    months = n * 12 if unit == "years" else n
    year, month = divmod(day.month - 1 + months, 12)
    year, month = day.year + year, month + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def day_of(value: str, zone: tzinfo) -> date:
    """The calendar day an ISO date or date-time names, in ``zone``.

    Raises:
        ValueError: not an ISO date.
    """
    text = value.strip()
    try:
        if len(text) == 10:
            return date.fromisoformat(text)
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO date") from None
    if when.tzinfo is None:
        return when.date()
    return when.astimezone(zone).date()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def age_words(then: date, today: date, unit: Unit) -> str:
    """How long ago ``then`` was, in the unit of the check (``12 months and 25 days``)."""
    if unit == "days":
        return _plural((today - then).days, "day")
    months = (today.year - then.year) * 12 + today.month - then.month
    if add_period(then, months, "months") > today:
        months -= 1
    if unit == "years":
        months -= months % 12
    rest = (today - add_period(then, months, "months")).days
    count = _plural(months // 12 if unit == "years" else months, unit[:-1])
    return count if not rest else f"{count} and {_plural(rest, 'day')}"


def within_reason(value: object, n: int, unit: Unit, *, now: datetime, zone_name: str = "UTC") -> str:
    """Why ``value`` is not a date within ``n`` ``unit`` before ``now`` ('' when it is)."""
    if not isinstance(value, str):
        return f"is {value!r}, not a date"
    zone = time_zone(zone_name)
    try:
        then = day_of(value, zone)
    except ValueError:
        return f"is {value!r}, not an ISO date"
    today = now.astimezone(zone).date()
    where = "UTC" if zone is UTC else zone_name
    if then > today:
        return f"is {value!r}, a date in the future (today is {today.isoformat()} {where})"
    until = add_period(then, n, unit)
    if today <= until:
        return ""
    return (
        f"is {value!r}, {age_words(then, today, unit)} ago, more than {_plural(n, unit[:-1])} "
        f"(covered until {until.isoformat()}; today is {today.isoformat()} {where})"
    )
