"""Failure-rate monitoring: a contract that keeps failing one way needs a review.

For every agent the monitor keeps, over a sliding time window, the tasks the agent
took part in and the failure types attributed to it in each. When one type is
seen in more than ``threshold`` (15 %) of the agent's tasks (with at least
``min_tasks`` tasks in the window), the agent's contract is **flagged for review**:
a :class:`ReviewFlag` is returned (the pipeline writes a ``contract.review`` audit
record, from which ``middleware.server.metrics`` sets the ``agency_contract_review_flagged``
gauge), and ``agency contracts review`` lists it. The monitor's own gauge,
``agency_agent_failure_rate{agent,failure_type}``, lives on the registry it is given.
The flag clears when the rate is back at or under the threshold over at least
``min_tasks`` tasks.

(Seed §5.2: "任何agent的单一失败类型率 > 15% 必须重新审视其能力契约".)

The window is kept as ``BUCKETS`` time buckets of counts per agent (a minute each for the
default 24 h), so the memory is bounded however many tasks pass; a task leaves the window
when its whole bucket is older than the window (at most one bucket late, never early).

State is per gateway process; the audit log holds every flag durably.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Gauge
from pydantic import Field

from ._model import Model
from .failures import FailureType
from .smf import utcnow
from .tasks import TaskRecord

__all__ = ["FailureMonitor", "MonitorConfig", "ReviewFlag"]


#: Iterating the enum itself is several times slower (it runs once per finished task).
_FAILURE_TYPES = tuple(FailureType)
#: Time buckets per window: the memory per agent, and how finely the window slides.
BUCKETS = 1440


class _Bucket:
    """Tasks and failures by type that finished within one bucket of time."""

    __slots__ = ("failures", "start", "tasks")

    def __init__(self, start: float) -> None:
        self.start = start
        self.tasks = 0
        self.failures: dict[FailureType, int] = {}


class MonitorConfig(Model):
    """Knobs of the failure-rate monitor."""

    window_seconds: float = Field(default=24 * 3600, gt=0, description="Sliding window length.")
    threshold: float = Field(default=0.15, gt=0, le=1, description="Flag above this share of tasks.")
    min_tasks: int = Field(default=20, ge=1, description="Tasks needed in the window before flagging.")


class ReviewFlag(Model):
    """An agent's contract flagged for review, with the figures behind it."""

    agent: str
    failure_type: FailureType
    rate: float
    failures: int
    tasks: int
    threshold: float
    window_seconds: float
    flagged_at: datetime = Field(default_factory=utcnow)
    cleared: bool = Field(default=False, description="True when the rate fell back under the threshold.")


class FailureMonitor:
    """Per agent and failure type over a sliding window.

    Args:
        config: Window, threshold, minimum sample.
        clock: Wall-clock seconds (injected in tests).
        registry: Prometheus registry for the failure-rate gauge (a private one by default).
    """

    def __init__(
        self,
        config: MonitorConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config or MonitorConfig()
        self._clock = clock
        self._width = self.config.window_seconds / BUCKETS
        self._buckets: dict[str, deque[_Bucket]] = {}
        self._tasks: dict[str, int] = {}  # tasks in the window, kept in step with the buckets
        self._counts: dict[str, dict[FailureType, int]] = {}  # failures by type, likewise
        self._flags: dict[tuple[str, FailureType], ReviewFlag] = {}
        self.registry = registry or CollectorRegistry()
        self._rate = Gauge(
            "agency_agent_failure_rate",
            "Share of an agent's tasks (sliding window) with this failure type",
            ["agent", "failure_type"],
            registry=self.registry,
        )

    def record_task(
        self, agents: Iterable[str], failures: Mapping[str, Iterable[FailureType]]
    ) -> list[ReviewFlag]:
        """Count one finished task for each of ``agents`` (with the failure types attributed
        to each in ``failures``); return the flags this task newly raised or cleared."""
        now = self._clock()
        new: list[ReviewFlag] = []
        for agent in sorted(set(agents) | set(failures)):
            if not agent:
                continue
            buckets = self._buckets.setdefault(agent, deque())
            start = now - now % self._width
            if not buckets or buckets[-1].start != start:
                buckets.append(_Bucket(start))
            bucket = buckets[-1]
            bucket.tasks += 1
            self._tasks[agent] = self._tasks.get(agent, 0) + 1
            types = set(failures[agent]) if failures.get(agent) else ()
            if types:
                counts = self._counts.setdefault(agent, {})
                for t in types:
                    bucket.failures[t] = bucket.failures.get(t, 0) + 1
                    counts[t] = counts.get(t, 0) + 1
            new.extend(self._evaluate(agent, now))
        return new

    def task_finished(self, task: TaskRecord) -> list[ReviewFlag]:
        """Count a finished task for every agent it dispatched to, with the failure types
        attributed to each (humans who supplied an output are not agents)."""
        failures: dict[str, set[FailureType]] = {}
        for f in task.failures:
            if f.agent:
                failures.setdefault(f.agent, set()).add(f.type)
        agents = [s.agent for s in task.steps if s.agent and not s.agent.startswith("human:")]
        return self.record_task(agents, failures)

    def figures(self, agent: str) -> tuple[int, dict[FailureType, int]]:
        """``(tasks, failures by type)`` of ``agent`` in the current window."""
        self._prune(agent, self._clock())
        return self._tasks.get(agent, 0), {t: n for t, n in self._counts.get(agent, {}).items() if n}

    def flagged(self) -> list[ReviewFlag]:
        """The contracts flagged for review now, worst first."""
        return sorted(self._flags.values(), key=lambda f: (-f.rate, f.agent, f.failure_type.value))

    def _prune(self, agent: str, now: float) -> None:
        buckets = self._buckets.get(agent)
        if not buckets:
            return
        counts = self._counts.get(agent, {})
        oldest = now - self.config.window_seconds
        while buckets and buckets[0].start + self._width <= oldest:  # the whole bucket is older
            gone = buckets.popleft()
            self._tasks[agent] -= gone.tasks
            for t, n in gone.failures.items():
                counts[t] -= n

    def _evaluate(self, agent: str, now: float) -> list[ReviewFlag]:
        tasks, counts = self.figures(agent)
        new: list[ReviewFlag] = []
        for ftype in _FAILURE_TYPES:
            failures = counts.get(ftype, 0)
            key = (agent, ftype)
            if not failures and key not in self._flags:
                continue  # rate 0 (threshold > 0): nothing to export, flag or clear
            rate = failures / tasks if tasks else 0.0
            if failures or key in self._flags:
                self._rate.labels(agent, ftype.value).set(rate)
            over = tasks >= self.config.min_tasks and rate > self.config.threshold
            if over:
                flag = ReviewFlag(
                    agent=agent,
                    failure_type=ftype,
                    rate=round(rate, 4),
                    failures=failures,
                    tasks=tasks,
                    threshold=self.config.threshold,
                    window_seconds=self.config.window_seconds,
                )
                if key not in self._flags:
                    new.append(flag)
                else:
                    flag.flagged_at = self._flags[key].flagged_at
                self._flags[key] = flag
            elif key in self._flags and tasks >= self.config.min_tasks:  # enough evidence it is back
                old = self._flags.pop(key)
                new.append(
                    old.model_copy(
                        update={"rate": round(rate, 4), "failures": failures, "tasks": tasks, "cleared": True}
                    )
                )
        return new
