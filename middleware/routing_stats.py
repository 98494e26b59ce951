"""Live routing statistics the pipeline feeds back after every dispatch.

``RoutingStats`` is the interface; :class:`MemoryRoutingStats` keeps them in process and
``RedisRoutingStats`` (``redis/routing_stats.py``) in Redis so replicas share them. For
each agent (``name@version``): the success rate over the last ``window`` dispatches and
the number of calls in flight. An agent with no history counts as fully successful, so
a new agent gets traffic.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["AgentStats", "MemoryRoutingStats", "RoutingStats"]


@dataclass(frozen=True, slots=True)
class AgentStats:
    """What the router knows about one agent right now (a plain value: read per candidate)."""

    success_rate: float = 1.0
    in_flight: int = 0
    samples: int = 0


@runtime_checkable
class RoutingStats(Protocol):
    async def started(self, agent: str) -> None:
        """A dispatch to ``agent`` began (its load rises)."""
        ...

    async def finished(self, agent: str, *, success: bool) -> None:
        """A dispatch to ``agent`` ended, well or not."""
        ...

    async def released(self, agent: str) -> None:
        """A dispatch to ``agent`` was lost with its gateway (taken over by another replica):
        its load falls, and no outcome is counted (the agent did not fail)."""
        ...

    async def snapshot(self, agent: str) -> AgentStats: ...

    async def snapshots(self, agents: Sequence[str]) -> dict[str, AgentStats]:
        """Stats of several agents at once (one round trip for remote backends)."""
        ...


class MemoryRoutingStats:
    """Success rate over the last ``window`` dispatches per agent, plus in-flight count."""

    def __init__(self, window: int = 100) -> None:
        self._window = window
        self._outcomes: dict[str, deque[bool]] = defaultdict(lambda: deque(maxlen=self._window))
        self._in_flight: dict[str, int] = defaultdict(int)

    async def started(self, agent: str) -> None:
        self._in_flight[agent] += 1

    async def finished(self, agent: str, *, success: bool) -> None:
        self._in_flight[agent] = max(0, self._in_flight[agent] - 1)
        self._outcomes[agent].append(success)

    async def released(self, agent: str) -> None:
        self._in_flight[agent] = max(0, self._in_flight[agent] - 1)

    async def snapshot(self, agent: str) -> AgentStats:
        return self._snapshot(agent)

    async def snapshots(self, agents: Sequence[str]) -> dict[str, AgentStats]:
        return {agent: self._snapshot(agent) for agent in agents}

    def _snapshot(self, agent: str) -> AgentStats:
        outcomes = self._outcomes.get(agent)
        rate = (sum(outcomes) / len(outcomes)) if outcomes else 1.0
        return AgentStats(
            success_rate=rate, in_flight=self._in_flight.get(agent, 0), samples=len(outcomes or ())
        )
