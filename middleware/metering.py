"""Metering: what each step's model calls spent, summed everywhere, and budgets enforced.

:class:`Metering` is given to the pipeline when ``agency.usage`` prices or bounds anything:

* :meth:`Metering.record`, with the ``usage`` of an agent's reply (at once, before the answer
  is checked: tokens spent on an answer that is then refused were spent all the same):
  prices each entry (``agency.usage.prices``; an unpriced model costs 0 and says so), adds it
  to the step's and the task's totals (the outcome's ``usage``), audits it (``usage.recorded``:
  step, model, tokens, cost, tenant), adds it to the shared sums of the task's tenant, user,
  goal, agent, model (per day, month and in total, in the stated time zone) and session, and
  raises each budget's alerts the first time a threshold is crossed in a period
  (``budget.alert``, once per period however many replicas see it);
* :meth:`Metering.check`, before every attempt of every step (the first, a retry, a backup):
  a budget of the task's tenant, user, goal or the chosen agent that is spent stops the task
  there — :class:`BudgetStop`, audited by the pipeline as ``budget.exceeded`` with the budget
  and the spend, the task held for a person (``on_exhausted: hold``) or failed (``abort``).

The stop comes before the next step, not inside one: a step's own model calls are what its
agent reports when it answers (bound a loop inside one step with the per-model rate limits).
Replicas share the sums (Redis), so one task's spending on one gateway stops the next step of
another task on any gateway; two steps answering at once may both pass a check a moment
before either is summed, so a budget can be overshot by the steps in flight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .audit.record import AuditEventType
from .errors import BudgetExhausted
from .tasks import TaskRecord
from .tenancy import split_key
from .usage import MICROS, Budget, BudgetScope, Period, Usage, UsageSettings, UsageTotals, period_key
from .usage_meter import Counter, MemoryUsageMeter, Spend, UsageMeter

__all__ = ["BudgetStop", "Metering"]

Audit = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class BudgetStop:
    """A spent budget that stops a task before its next step."""

    budget: Budget
    counter: Counter
    spend: Spend
    currency: str

    def detail(self) -> dict[str, Any]:
        b = self.budget
        return {
            "budget": b.label,
            "scope": b.scope.value,
            "name": self.counter.name,
            "period": self.counter.period,
            "limit": b.limit,
            "limit_tokens": b.limit_tokens,
            "spent": round(self.spend.cost_micros / MICROS, 6),
            "spent_tokens": self.spend.tokens,
            "currency": self.currency,
            "on_exhausted": b.on_exhausted,
        }

    def error(self) -> BudgetExhausted:
        d = self.detail()
        spent = (
            f"{d['spent']:g} {self.currency} of {self.budget.limit:g}"
            if self.budget.limit is not None and self.spend.cost_micros >= self.budget.limit * MICROS
            else f"{d['spent_tokens']} tokens of {self.budget.limit_tokens}"
        )
        return BudgetExhausted(
            f"budget exhausted: {self.counter.scope} {self.counter.name!r} spent {spent} "
            f"in {self.counter.period} ({self.budget.label})",
            details=d,
        )


def _agent_name(key: str) -> str:
    return split_key(key)[1]


class Metering:
    """Prices, sums and bounds model usage (see the module docstring).

    Args:
        settings: ``agency.usage``.
        meter: Where the sums live (default: this process; Redis for replicas).
        clock: The current time (calendar periods are taken from it in ``settings.timezone``).
    """

    def __init__(
        self,
        settings: UsageSettings,
        *,
        meter: UsageMeter | None = None,
        clock: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self.meter: UsageMeter = meter if meter is not None else MemoryUsageMeter()
        self._clock = clock

    def _entities(self, run: TaskRecord, agent: str) -> list[tuple[BudgetScope, str]]:
        out: list[tuple[BudgetScope, str]] = []
        if run.tenant:
            out.append((BudgetScope.TENANT, run.tenant))
        if run.request.user_id:
            out.append((BudgetScope.USER, run.request.user_id))
        if run.goal is not None:
            out.append((BudgetScope.GOAL, run.goal.id))
        if agent:
            out.append((BudgetScope.AGENT, _agent_name(agent)))
        return out

    def _periods(self, now: datetime) -> list[str]:
        zone = self.settings.timezone
        return [period_key(p, now, zone) for p in (Period.DAY, Period.MONTH, Period.TOTAL)]

    def _counters(self, run: TaskRecord, agent: str, model: str, now: datetime) -> list[Counter]:
        periods = self._periods(now)
        named = [(s.value, n) for s, n in self._entities(run, agent)] + [("model", model or "-")]
        counters = [Counter(scope, name, period) for scope, name in named for period in periods]
        if run.request.session_id:
            counters.append(Counter("session", run.request.session_id, "total"))
        return counters

    async def record(
        self, run: TaskRecord, *, step: str, agent: str, usage: Sequence[Usage], audit: Audit
    ) -> None:
        """Price, sum, audit and check the alerts of one reply's ``usage``."""
        if not usage:
            return
        now = self._clock()
        currency = self.settings.currency
        record = run.step_record(step)
        for entry in usage:
            price = self.settings.price(entry.model)
            micros = price.micros(entry) if price is not None else 0
            if run.usage is None:
                run.usage = UsageTotals(currency=currency)
            run.usage.add(entry, micros, currency=currency)
            if record is not None:
                if record.usage is None:
                    record.usage = UsageTotals(currency=currency)
                record.usage.add(entry, micros, currency=currency)
            counters = self._counters(run, agent, entry.model, now)
            sums = await self.meter.add(
                counters,
                input_tokens=entry.input_tokens,
                output_tokens=entry.output_tokens,
                cost_micros=micros,
            )
            await audit(
                run,
                AuditEventType.USAGE,
                "priced" if price is not None else "unpriced",
                {
                    "step": step,
                    "model": entry.model or "-",
                    "input_tokens": entry.input_tokens,
                    "output_tokens": entry.output_tokens,
                    "cost": round(micros / MICROS, 6),
                    "currency": currency,
                    "tenant": run.tenant,
                },
                agent=agent,
                barrier=False,
            )
            await self._alerts(run, step, agent, dict(zip(counters, sums, strict=True)), audit)

    async def _alerts(
        self, run: TaskRecord, step: str, agent: str, sums: dict[Counter, Spend], audit: Audit
    ) -> None:
        for index, budget, counter in self._applicable(run, agent, self._clock()):
            spend = sums.get(counter)
            if spend is None:
                continue
            used = _fraction(budget, spend)
            for threshold in sorted(budget.alerts):
                if used >= threshold and await self.meter.first_time(counter, f"{index}:{threshold}"):
                    stop = BudgetStop(budget, counter, spend, self.settings.currency)
                    await audit(
                        run,
                        AuditEventType.BUDGET_ALERT,
                        f"{round(threshold * 100)}%",
                        {"step": step, **stop.detail(), "threshold": threshold, "used": round(used, 4)},
                        agent=agent,
                        rule=f"budget:{budget.label}",
                        barrier=False,
                    )

    def _applicable(self, run: TaskRecord, agent: str, now: datetime) -> list[tuple[int, Budget, Counter]]:
        zone = self.settings.timezone
        out = []
        for scope, name in self._entities(run, agent):
            for index, budget in enumerate(self.settings.budgets):
                if budget.scope is scope and budget.applies_to(name):
                    out.append(
                        (index, budget, Counter(scope.value, name, period_key(budget.period, now, zone)))
                    )
        return out

    async def check(self, run: TaskRecord, *, agent: str) -> BudgetStop | None:
        """The first budget of the task's tenant, user, goal or ``agent`` that is spent, or None."""
        if not self.settings.budgets:
            return None
        applicable = self._applicable(run, agent, self._clock())
        if not applicable:
            return None
        spends = await self.meter.get([c for _, _, c in applicable])
        for (_, budget, counter), spend in zip(applicable, spends, strict=True):
            if _fraction(budget, spend) >= 1.0:
                return BudgetStop(budget, counter, spend, self.settings.currency)
        return None


def _fraction(budget: Budget, spend: Spend) -> float:
    """How much of ``budget`` ``spend`` uses (the larger of cost and tokens)."""
    used = 0.0
    if budget.limit is not None:
        used = spend.cost_micros / (budget.limit * MICROS)
    if budget.limit_tokens is not None:
        used = max(used, spend.tokens / budget.limit_tokens)
    return used
