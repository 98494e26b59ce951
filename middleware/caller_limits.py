"""Limits per caller that keep one client or agent from exhausting the gateway.

* **Watch streams**: each stream's backlog is bounded (:attr:`CallerLimits.watch_queue`
  events and :attr:`CallerLimits.watch_backlog_bytes` bytes); a consumer that falls
  further behind is dropped: its stream ends with RESOURCE_EXHAUSTED saying so (re-read
  with Query, then watch again). A caller may hold at most
  :attr:`CallerLimits.watch_streams` streams at once.
* **Catalog writes** (Register, Update, Deregister, Heartbeat): a token bucket per
  caller, :attr:`CallerLimits.catalog_writes_per_second` refilled, bursts of
  :attr:`CallerLimits.catalog_write_burst`; beyond it, RESOURCE_EXHAUSTED. Admins are
  not limited (deployment tooling registers whole catalogs at once).

* **Schema compilation** (the JSON Schemas of a Register or Update, checked and compiled in
  a worker thread): the CPU seconds it took are charged to the caller, a budget of
  :attr:`CallerLimits.schema_cpu_seconds_per_minute` refilled evenly; a caller whose budget is
  spent is refused RESOURCE_EXHAUSTED with the seconds to wait (``retry_after_ms``) before its
  schemas are compiled. One agent registering the largest schemas allowed cannot keep a core
  busy. Admins are not limited.

The per-caller limits apply with tokens on (without tokens there is no caller to count
for); the bounded backlog applies always. ``agency serve`` reads the limits from the
environment (:func:`middleware.server.settings.caller_limits_from_env`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import Field

from ._model import Model
from .errors import ResourceExhausted

__all__ = ["CallerLimits", "CpuBudget", "StreamCounter", "WriteRateLimiter"]


class CallerLimits(Model):
    """How much of the gateway one caller may hold or use."""

    watch_queue: int = Field(default=256, ge=1, description="Events a Watch stream may fall behind.")
    watch_backlog_bytes: int = Field(
        default=4 << 20, ge=1, description="Bytes of events a Watch stream may fall behind."
    )
    watch_streams: int = Field(default=8, ge=1, description="Watch streams one caller may hold at once.")
    catalog_writes_per_second: float = Field(
        default=10.0, gt=0, description="Catalog writes per second per caller."
    )
    catalog_write_burst: int = Field(default=50, ge=1, description="Catalog writes one caller may burst.")
    schema_cpu_seconds_per_minute: float = Field(
        default=6.0,
        gt=0,
        description="CPU seconds of schema checking and compiling one caller may use per minute "
        "(a tenth of a core).",
    )


class StreamCounter:
    """How many streams each caller holds; refuses one beyond the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    @contextmanager
    def holding(self, caller: str) -> Iterator[None]:
        """Count one stream of ``caller`` for the duration of the block.

        Raises:
            ResourceExhausted: ``caller`` already holds ``limit`` streams.
        """
        held = self._open.get(caller, 0)
        if held >= self.limit:
            who = f"client {caller!r}" if caller else "this caller"
            raise ResourceExhausted(
                f"{who} already holds {held} Watch streams, the most allowed "
                "(AGENCY_WATCH_STREAMS_PER_CALLER): close one first",
                details={"client": caller, "limit": self.limit},
            )
        self._open[caller] = held + 1
        try:
            yield
        finally:
            left = self._open[caller] - 1
            if left:
                self._open[caller] = left
            else:
                del self._open[caller]


class WriteRateLimiter:
    """A token bucket per caller."""

    def __init__(self, per_second: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second, self.burst, self.clock = per_second, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, at)

    def take(self, caller: str, *, operation: str) -> None:
        """Spend one write of ``caller``.

        Raises:
            ResourceExhausted: the caller's bucket is empty (retry later).
        """
        now = self.clock()
        tokens, at = self._buckets.get(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_second)
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            who = f"client {caller!r}" if caller else "this caller"
            raise ResourceExhausted(
                f"{who} made too many catalog writes ({operation}): at most {self.per_second:g} per "
                f"second, bursts of {self.burst} (AGENCY_CATALOG_WRITES_PER_SECOND); retry later",
                details={"client": caller, "operation": operation},
            )
        self._buckets[caller] = (tokens - 1.0, now)
        if len(self._buckets) > 10_000:  # forget full buckets now and then
            rate, burst = self.per_second, self.burst
            self._buckets = {c: (t, a) for c, (t, a) in self._buckets.items() if t + (now - a) * rate < burst}


class CpuBudget:
    """CPU seconds per caller: a bucket of ``per_minute`` seconds refilled evenly, charged after
    the work with what it cost (so one call may overdraw it; the next waits until it is paid)."""

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute, self.clock = per_minute, clock
        self._rate = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (seconds left, at)

    def _level(self, caller: str, now: float) -> float:
        left, at = self._buckets.get(caller, (self.per_minute, now))
        return min(self.per_minute, left + (now - at) * self._rate)

    def check(self, caller: str, *, operation: str) -> None:
        """Refuse ``caller`` while its budget is spent.

        Raises:
            ResourceExhausted: with ``retry_after_ms``, the time until the budget is positive.
        """
        now = self.clock()
        left = self._level(caller, now)
        if left > 0:
            return
        wait_ms = max(1, math.ceil((-left + 0.01) / self._rate * 1000))
        who = f"client {caller!r}" if caller else "this caller"
        raise ResourceExhausted(
            f"{who} spent its schema compilation budget ({operation}): at most {self.per_minute:g} CPU "
            f"seconds a minute (AGENCY_SCHEMA_CPU_SECONDS_PER_MINUTE); retry in {wait_ms / 1000:.1f} s",
            details={"client": caller, "operation": operation, "retry_after_ms": wait_ms},
        )

    def charge(self, caller: str, seconds: float) -> None:
        """Take ``seconds`` of CPU from ``caller``'s budget (it may go below zero)."""
        now = self.clock()
        self._buckets[caller] = (self._level(caller, now) - seconds, now)
        if len(self._buckets) > 10_000:  # forget full buckets now and then
            self._buckets = {c: v for c, v in self._buckets.items() if self._level(c, now) < self.per_minute}
