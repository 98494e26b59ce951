"""Per-agent circuit breakers: stop sending work to an agent that keeps timing out.

After ``failure_threshold`` consecutive timeouts or unavailability on one agent its
circuit **opens**: the router skips the agent and a dispatch to it fails at once as
TOOL_UNAVAILABLE (no deadline is waited out). After ``open_seconds`` the circuit is
**half-open**: one probe call is let through; its success **closes** the circuit,
its failure opens it again for another ``open_seconds``. Any answer from the agent
(even an error or a bad output) proves it is reachable and counts as a success here.

State is per gateway process (each replica learns on its own); the clock is injected
so tests need no sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from ._model import Model

__all__ = ["BreakerConfig", "CircuitBreaker", "CircuitState"]


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerConfig(Model):
    """Knobs of the per-agent circuit breaker."""

    failure_threshold: int = Field(
        default=5, ge=1, le=1000, description="Consecutive timeouts/unavailability that open it."
    )
    open_seconds: float = Field(default=30.0, gt=0, description="How long it stays open before a probe.")


@dataclass
class _Circuit:
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False


class CircuitBreaker:
    """Circuit state of every agent this gateway dispatches to.

    Args:
        config: Threshold and open time.
        clock: Monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or BreakerConfig()
        self._clock = clock
        self._circuits: dict[str, _Circuit] = {}

    def state(self, agent: str) -> CircuitState:
        c = self._circuits.get(agent)
        if c is None or c.opened_at is None:
            return CircuitState.CLOSED
        if self._clock() - c.opened_at >= self.config.open_seconds:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def open_agents(self) -> list[str]:
        """Agents the router must skip now (open, or half-open with a probe in flight)."""
        return sorted(agent for agent in self._circuits if not self._available(agent))

    def _available(self, agent: str) -> bool:
        state = self.state(agent)
        if state is CircuitState.OPEN:
            return False
        return not (state is CircuitState.HALF_OPEN and self._circuits[agent].probing)

    def allow(self, agent: str) -> bool:
        """May a call go to ``agent`` now? In half-open, only one probe at a time is allowed."""
        if not self._available(agent):
            return False
        if self.state(agent) is CircuitState.HALF_OPEN:
            self._circuits[agent].probing = True
        return True

    def record_success(self, agent: str) -> CircuitState | None:
        """The agent answered: close its circuit. Returns the new state if it changed."""
        c = self._circuits.get(agent)
        if c is None:
            return None
        old = self.state(agent)
        self._circuits.pop(agent)
        return CircuitState.CLOSED if old is not CircuitState.CLOSED else None

    def record_failure(self, agent: str) -> CircuitState | None:
        """The agent timed out or was unreachable. Returns the new state if it changed."""
        c = self._circuits.setdefault(agent, _Circuit())
        old = self.state(agent)
        c.failures += 1
        c.probing = False
        if old is CircuitState.HALF_OPEN or (
            old is CircuitState.CLOSED and c.failures >= self.config.failure_threshold
        ):
            c.opened_at = self._clock()
            return CircuitState.OPEN
        return None
