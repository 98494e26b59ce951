"""Where spending is summed: per tenant, user, goal, agent, model and session, per period.

:class:`UsageMeter` is the interface; :class:`MemoryUsageMeter` keeps the sums in this
process, :class:`middleware.redis.usage_meter.RedisUsageMeter` in Redis so every replica
adds to and reads the same sums (one hash per entity and period, under the entity's hash
tag ``{usage:<scope>:<name>}``). A :class:`Counter` names one sum: ``("tenant", "acme",
"2026-12")``. Sums are integers (tokens, cost in micro-units), so additions from several
replicas are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Counter", "MemoryUsageMeter", "Spend", "UsageMeter"]


@dataclass(frozen=True)
class Counter:
    """One sum: an entity (scope and name) in one period (``2026-12-31``, ``2026-12``, ``total``)."""

    scope: str
    name: str
    period: str

    @property
    def key(self) -> str:
        return f"{self.scope}:{self.name}:{self.period}"


@dataclass(frozen=True)
class Spend:
    """What a counter holds."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@runtime_checkable
class UsageMeter(Protocol):
    """Sums of spending, shared by the replicas that share the store."""

    async def add(
        self, counters: Sequence[Counter], *, input_tokens: int, output_tokens: int, cost_micros: int
    ) -> list[Spend]:
        """Add to every counter; returns their new sums, in order."""
        ...

    async def get(self, counters: Sequence[Counter]) -> list[Spend]:
        """The sums of ``counters``, in order (zero for a counter never added to)."""
        ...

    async def first_time(self, counter: Counter, mark: str) -> bool:
        """True exactly once per counter and ``mark`` (an alert raised once per period)."""
        ...


class MemoryUsageMeter:
    """Sums in this process (the embedded default)."""

    def __init__(self) -> None:
        self._sums: dict[str, tuple[int, int, int]] = {}
        self._marks: set[tuple[str, str]] = set()

    async def add(
        self, counters: Sequence[Counter], *, input_tokens: int, output_tokens: int, cost_micros: int
    ) -> list[Spend]:
        out = []
        for c in counters:
            i, o, m = self._sums.get(c.key, (0, 0, 0))
            total = (i + input_tokens, o + output_tokens, m + cost_micros)
            self._sums[c.key] = total
            out.append(Spend(*total))
        return out

    async def get(self, counters: Sequence[Counter]) -> list[Spend]:
        return [Spend(*self._sums.get(c.key, (0, 0, 0))) for c in counters]

    async def first_time(self, counter: Counter, mark: str) -> bool:
        key = (counter.key, mark)
        if key in self._marks:
            return False
        self._marks.add(key)
        return True
