"""Usage of language models, what it costs, and the budgets that bound it (the settings and values).

An agent reports what it spent in its reply (``AgentReply.usage``: a list of :class:`Usage`,
one per model it called); a wrapped LangChain agent fills it from the models' usage metadata.
The definition prices it (``agency.usage.prices``: per million input and output tokens, per
model) and bounds it (``agency.usage.budgets``: a cost or a token limit per tenant, user, goal
or agent, per calendar day or month in the stated time zone, or in total), with soft alerts
at thresholds and a hard stop before the next step once a budget is spent. What does the
metering is :mod:`middleware.metering`; where the sums live is :mod:`middleware.usage_meter`.

Costs are kept as integer micro-units of the currency (1 USD = 1,000,000) so sums add up
exactly on every replica.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from enum import StrEnum
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from ._model import Model

__all__ = [
    "MICROS",
    "Budget",
    "BudgetScope",
    "ModelPrice",
    "Period",
    "RateLimitRule",
    "Usage",
    "UsageRateLimits",
    "UsageSettings",
    "UsageTotals",
    "period_key",
]

#: Micro-units per unit of the currency.
MICROS = 1_000_000


class Usage(Model):
    """Tokens one model spent for one agent call."""

    model: str = Field(default="", max_length=200, description="The model's name (as priced).")
    input_tokens: int = Field(default=0, ge=0, le=10**12)
    output_tokens: int = Field(default=0, ge=0, le=10**12)


class ModelPrice(Model):
    """What a model costs, per million tokens, in ``usage.currency``."""

    input: float = Field(ge=0, allow_inf_nan=False, description="Per million input tokens.")
    output: float = Field(ge=0, allow_inf_nan=False, description="Per million output tokens.")

    def micros(self, usage: Usage) -> int:
        """The cost of ``usage`` in micro-units (rounded to the nearest)."""
        return round(usage.input_tokens * self.input + usage.output_tokens * self.output)


class BudgetScope(StrEnum):
    TENANT = "tenant"
    USER = "user"
    GOAL = "goal"
    AGENT = "agent"


class Period(StrEnum):
    DAY = "day"
    MONTH = "month"
    TOTAL = "total"


class Budget(Model):
    """A limit on what one tenant, user, goal or agent may spend per period."""

    scope: BudgetScope
    name: str = Field(
        default="*", min_length=1, description="Whose budget: a name, or a pattern (* = each one its own)."
    )
    period: Period = Period.MONTH
    limit: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="Cost limit (currency).")
    limit_tokens: int | None = Field(default=None, gt=0, description="Token limit (input + output).")
    alerts: list[float] = Field(
        default_factory=lambda: [0.8], description="Fractions of the limit at which an alert is raised once."
    )
    on_exhausted: Literal["hold", "abort"] = Field(
        default="hold", description="hold: the task waits for a person; abort: it fails."
    )

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.limit is None and self.limit_tokens is None:
            raise ValueError("a budget needs a limit (cost) or limit_tokens")
        if any(not 0 < a < 1 for a in self.alerts):
            raise ValueError("alerts: fractions between 0 and 1 (0.8 = at 80 % of the limit)")
        return self

    def applies_to(self, name: str) -> bool:
        return bool(name) and fnmatch.fnmatchcase(name, self.name)

    @property
    def label(self) -> str:
        limit = f"{self.limit:g}" if self.limit is not None else f"{self.limit_tokens} tokens"
        return f"{self.scope.value}:{self.name} {limit} per {self.period.value}"


class RateLimitRule(Model):
    """A token bucket for the calls of matching models or tools (``match`` is a pattern)."""

    match: str = Field(min_length=1)
    rate: float = Field(gt=0, allow_inf_nan=False, description="Calls per second, refilled.")
    burst: int = Field(ge=1, description="Calls at once.")


class UsageRateLimits(Model):
    """Rate limits per model and per tool (the first matching rule decides)."""

    model: list[RateLimitRule] = Field(default_factory=list)
    tool: list[RateLimitRule] = Field(default_factory=list)

    def rule(self, kind: Literal["model", "tool"], name: str) -> RateLimitRule | None:
        return next((r for r in getattr(self, kind) if fnmatch.fnmatchcase(name, r.match)), None)


class UsageSettings(Model):
    """``agency.usage``: prices, budgets and rate limits of model usage."""

    currency: str = Field(default="USD", min_length=1, max_length=8)
    timezone: str = Field(default="UTC", description="Where calendar days and months begin (IANA name).")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Model name (or pattern) -> price per million tokens."
    )
    budgets: list[Budget] = Field(default_factory=list)
    rate_limits: UsageRateLimits = Field(default_factory=UsageRateLimits)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{v!r} is not an IANA time zone (e.g. UTC, Europe/Berlin, Asia/Shanghai)"
            ) from None
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.prices or self.budgets)

    def price(self, model: str) -> ModelPrice | None:
        """The price of ``model``: its own entry, else the first pattern matching it."""
        found = self.prices.get(model)
        if found is not None:
            return found
        return next((p for pattern, p in self.prices.items() if fnmatch.fnmatchcase(model, pattern)), None)


class UsageTotals(Model):
    """What a task (or a step) spent: tokens, cost, and per model."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = Field(default=0.0, description="In the currency of ``agency.usage``.")
    currency: str = ""
    by_model: dict[str, dict[str, float]] = Field(default_factory=dict)

    def add(self, usage: Usage, micros: int, *, currency: str) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cost = round(self.cost + micros / MICROS, 6)
        self.currency = currency
        model = self.by_model.setdefault(
            usage.model or "-", {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
        )
        model["input_tokens"] += usage.input_tokens
        model["output_tokens"] += usage.output_tokens
        model["cost"] = round(model["cost"] + micros / MICROS, 6)


def period_key(period: Period, now: datetime, timezone: str) -> str:
    """The calendar period ``now`` falls in, in ``timezone``: ``2026-12-31`` (day), ``2026-12``
    (month), ``total``. A period begins at local midnight of its first day."""
    if period is Period.TOTAL:
        return "total"
    local = now.astimezone(ZoneInfo(timezone))
    return local.strftime("%Y-%m-%d" if period is Period.DAY else "%Y-%m")
