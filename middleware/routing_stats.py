"""Live routing statistics the pipeline feeds back after every dispatch."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Protocol, runtime_checkable

from ._model import Model

__all__ = ["AgentStats", "MemoryRoutingStats", "RoutingStats"]


class AgentStats(Model):
    success_rate: float = 1.0
    in_flight: int = 0
    samples: int = 0


@runtime_checkable
class RoutingStats(Protocol):
    async def started(self, agent: str) -> None: ...

    async def finished(self, agent: str, *, success: bool) -> None: ...

    async def snapshot(self, agent: str) -> AgentStats: ...


class MemoryRoutingStats:
    """Success rate over the last ``window`` dispatches per agent, plus in-flight count.

    An agent with no history counts as fully successful so new agents get traffic.
    """

    def __init__(self, window: int = 100) -> None:
        self._window = window
        self._outcomes: dict[str, deque[bool]] = defaultdict(lambda: deque(maxlen=self._window))
        self._in_flight: dict[str, int] = defaultdict(int)

    async def started(self, agent: str) -> None:
        self._in_flight[agent] += 1

    async def finished(self, agent: str, *, success: bool) -> None:
        self._in_flight[agent] = max(0, self._in_flight[agent] - 1)
        self._outcomes[agent].append(success)

    async def snapshot(self, agent: str) -> AgentStats:
        outcomes = self._outcomes.get(agent)
        rate = (sum(outcomes) / len(outcomes)) if outcomes else 1.0
        return AgentStats(
            success_rate=rate, in_flight=self._in_flight.get(agent, 0), samples=len(outcomes or ())
        )
