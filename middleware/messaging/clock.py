"""Time as an injected dependency, so expiry, visibility timeouts and rate limits are testable.

A clock is any zero-argument callable returning seconds as a float (``time.time`` by
default). :class:`ManualClock` is the fake shipped with the package: it only moves
when told to.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "ManualClock", "system_clock"]

#: Seconds since the epoch (wall clock; TTLs are compared against message timestamps).
Clock = Callable[[], float]

system_clock: Clock = time.time


class ManualClock:
    """A clock that stands still until :meth:`advance` is called.

    Args:
        start: The initial reading, in seconds since the epoch.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must not be negative)."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
