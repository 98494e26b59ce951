"""The seed's section 4.4 measures, from the audit stream: live and over a period.

Every figure is computed per task at its **first stop** (the first ``task.completed``
record: the task completed, failed, was rejected, or stopped to wait for a person or
a clarification), from the records the task wrote up to then:

=========================  ==================================================================
measure                    definition
=========================  ==================================================================
first-contact resolution   tasks that completed at their first stop / tasks handled
average handling time      mean seconds from ``task.submitted`` to the first stop
human-transfer rate        tasks with a ``human.handover`` / tasks handled
intent-drift rate          tasks with an ``INTENT_DRIFT`` failure / tasks handled
SLA attainment             tasks whose handling time is below the SLA (3 s by default)
=========================  ==================================================================

:class:`KpiMetrics` exports them to Prometheus as the tasks go (counters, a histogram
and ratio gauges, fed by :class:`~middleware.server.metrics.Metrics`; a stopped task adds to
plain totals, the metrics are updated from them when read); :func:`compute_kpis`
reads them from an audit log over a period (``agency report``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from threading import Lock

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from pydantic import Field

from ._model import Model
from .audit.record import AuditEventType, AuditRecord

__all__ = [
    "DEFAULT_SLA_SECONDS",
    "KPI_EVENTS",
    "KpiMetrics",
    "KpiReport",
    "TaskFigures",
    "TaskTally",
    "compute_kpis",
]

#: The seed's SLA: a task answered within 3 seconds.
DEFAULT_SLA_SECONDS = 3.0
_MAX_OPEN = 100_000  # tasks tracked between submit and first stop (the oldest are dropped)
_HANDLING_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 900)


@dataclass
class _Open:
    submitted: datetime
    handover: bool = False
    drift: bool = False


@dataclass(frozen=True)
class TaskFigures:
    """One task's figures at its first stop."""

    task_id: str
    submitted: datetime
    handling_seconds: float
    resolved: bool
    handover: bool
    drift: bool
    outcome: str


#: The records a task's KPI figures are folded from (every other record is skipped at once).
KPI_EVENTS = frozenset(
    {
        AuditEventType.TASK_SUBMITTED,
        AuditEventType.HUMAN_HANDOVER,
        AuditEventType.FAILURE,
        AuditEventType.TASK_COMPLETED,
    }
)


class TaskTally:
    """Folds audit records into per-task figures (one :class:`TaskFigures` at each first stop)."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, _Open] = OrderedDict()

    def add(self, record: AuditRecord) -> TaskFigures | None:
        """Take one record; the task's figures when this record is its first stop."""
        return self.add_fields(record.task_id, record.event_type, record.time, record.outcome)

    def add_fields(self, task_id: str, kind: str, time: datetime, outcome: str) -> TaskFigures | None:
        """:meth:`add` from a record's task id, event type, time and outcome (plain records
        on the hot path are not built into models for this)."""
        if not task_id:
            return None
        if kind == AuditEventType.TASK_SUBMITTED:
            self._open[task_id] = _Open(submitted=time)
            if len(self._open) > _MAX_OPEN:
                self._open.popitem(last=False)
            return None
        state = self._open.get(task_id)
        if state is None:
            return None
        if kind == AuditEventType.HUMAN_HANDOVER:
            state.handover = True
        elif kind == AuditEventType.FAILURE and outcome == "INTENT_DRIFT":
            state.drift = True
        elif kind == AuditEventType.TASK_COMPLETED:
            del self._open[task_id]
            return TaskFigures(
                task_id=task_id,
                submitted=state.submitted,
                handling_seconds=max(0.0, (time - state.submitted).total_seconds()),
                resolved=outcome == "completed",
                handover=state.handover,
                drift=state.drift,
                outcome=outcome,
            )
        return None


class KpiReport(Model):
    """The measures over a period (``agency report``)."""

    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = Field(default=None, description="The tenant measured (None: every task).")
    sla_seconds: float
    tasks: int = Field(description="Tasks submitted in the period that reached a first stop.")
    resolved_first_contact: int
    human_transfers: int
    intent_drift_tasks: int
    sla_met: int
    first_contact_resolution: float | None = Field(description="Share 0..1 (None: no tasks).")
    average_handling_seconds: float | None
    human_transfer_rate: float | None
    intent_drift_rate: float | None
    sla_attainment: float | None
    outcomes: dict[str, int] = Field(default_factory=dict, description="Tasks by first-stop outcome.")


def _ratio(n: int, d: int) -> float | None:
    return round(n / d, 4) if d else None


def compute_kpis(
    records: Iterable[AuditRecord],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    sla_seconds: float = DEFAULT_SLA_SECONDS,
    tenant: str | None = None,
) -> KpiReport:
    """The measures of the tasks submitted in ``[since, until)`` (records in log order); with
    ``tenant``, of that tenant's tasks only (``""``: the tasks without a tenant)."""
    tally = TaskTally()
    figures: list[TaskFigures] = []
    for record in records:
        if tenant is not None and record.actors.tenant != tenant:
            continue
        done = tally.add(record)
        if done is None:
            continue
        if (since is None or done.submitted >= since) and (until is None or done.submitted < until):
            figures.append(done)
    n = len(figures)
    outcomes: dict[str, int] = {}
    for f in figures:
        outcomes[f.outcome] = outcomes.get(f.outcome, 0) + 1
    resolved = sum(f.resolved for f in figures)
    handovers = sum(f.handover for f in figures)
    drifts = sum(f.drift for f in figures)
    sla = sum(f.handling_seconds < sla_seconds for f in figures)
    return KpiReport(
        since=since,
        until=until,
        tenant=tenant,
        sla_seconds=sla_seconds,
        tasks=n,
        resolved_first_contact=resolved,
        human_transfers=handovers,
        intent_drift_tasks=drifts,
        sla_met=sla,
        first_contact_resolution=_ratio(resolved, n),
        average_handling_seconds=round(sum(f.handling_seconds for f in figures) / n, 4) if n else None,
        human_transfer_rate=_ratio(handovers, n),
        intent_drift_rate=_ratio(drifts, n),
        sla_attainment=_ratio(sla, n),
        outcomes=outcomes,
    )


class KpiMetrics:
    """The measures as Prometheus metrics, counted as each task reaches its first stop.

    A task's figures are added to plain totals when it stops (on the event loop, no metric
    call); the Prometheus metrics are brought up to date from the totals when they are read
    (this object is the registry's collector for them) or when ``publish_every`` tasks wait,
    so whoever reads them sees every task that has stopped.

    Args:
        registry: Where to register (the gateway's :class:`~middleware.server.metrics.Metrics` registry).
        sla_seconds: The SLA a task's handling time is compared with.
        publish_every: Stopped tasks kept as totals at most before the metrics are updated.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        sla_seconds: float = DEFAULT_SLA_SECONDS,
        publish_every: int = 256,
    ) -> None:
        self.sla_seconds = sla_seconds
        self._publish_every = publish_every
        self._tally = TaskTally()
        self._lock = Lock()  # the totals are added on the event loop, published by a scrape too
        self._n = self._resolved = self._handover = self._drift = self._sla = 0
        self._total_seconds = 0.0
        self._handling: list[float] = []  # handling times not observed by the histogram yet
        self._shown = (0, 0, 0, 0, 0)  # the totals the counters show
        self.tasks = Counter("agency_kpi_tasks_total", "Tasks that reached their first stop.", registry=None)
        self.resolved = Counter(
            "agency_kpi_first_contact_resolved_total", "Tasks completed at their first stop.", registry=None
        )
        self.handovers = Counter(
            "agency_kpi_human_transfers_total", "Tasks handed over to a person.", registry=None
        )
        self.drifts = Counter(
            "agency_kpi_intent_drift_tasks_total", "Tasks with an INTENT_DRIFT failure.", registry=None
        )
        self.sla_met = Counter("agency_kpi_sla_met_total", "Tasks handled within the SLA.", registry=None)
        self.handling = Histogram(
            "agency_kpi_handling_seconds",
            "Handling time: task submitted to its first stop.",
            buckets=_HANDLING_BUCKETS,
            registry=None,
        )
        self.sla = Gauge("agency_kpi_sla_seconds", "The SLA handling times are compared with.", registry=None)
        self.sla.set(sla_seconds)
        self.fcr = Gauge(
            "agency_kpi_first_contact_resolution_ratio",
            "First-contact resolution since start.",
            registry=None,
        )
        self.aht = Gauge(
            "agency_kpi_average_handling_seconds", "Average handling time since start.", registry=None
        )
        self.transfer_rate = Gauge(
            "agency_kpi_human_transfer_ratio", "Human-transfer rate since start.", registry=None
        )
        self.drift_rate = Gauge(
            "agency_kpi_intent_drift_ratio", "Intent-drift rate since start.", registry=None
        )
        self.sla_rate = Gauge("agency_kpi_sla_attainment_ratio", "SLA attainment since start.", registry=None)
        self._metrics = (
            self.tasks,
            self.resolved,
            self.handovers,
            self.drifts,
            self.sla_met,
            self.handling,
            self.sla,
            self.fcr,
            self.aht,
            self.transfer_rate,
            self.drift_rate,
            self.sla_rate,
        )
        registry.register(self)

    def observe(self, record: AuditRecord) -> None:
        """Take one audit record (called for every record appended)."""
        self.observe_fields(record.task_id, record.event_type, record.time, record.outcome)

    def observe_fields(self, task_id: str, kind: str, time: datetime, outcome: str) -> None:
        """:meth:`observe` from a record's task id, event type, time and outcome."""
        if kind not in KPI_EVENTS:
            return
        done = self._tally.add_fields(task_id, kind, time, outcome)
        if done is None:
            return
        with self._lock:
            self._n += 1
            self._total_seconds += done.handling_seconds
            self._handling.append(done.handling_seconds)
            self._resolved += done.resolved
            self._handover += done.handover
            self._drift += done.drift
            self._sla += done.handling_seconds < self.sla_seconds
            if len(self._handling) >= self._publish_every:
                self._publish()

    def publish(self) -> None:
        """Bring the metrics up to date with every task that has stopped."""
        with self._lock:
            self._publish()

    def _publish(self) -> None:  # holding the lock
        totals = (self._n, self._resolved, self._handover, self._drift, self._sla)
        if totals == self._shown:
            return
        counters = (self.tasks, self.resolved, self.handovers, self.drifts, self.sla_met)
        for counter, total, shown in zip(counters, totals, self._shown, strict=True):
            if total > shown:
                counter.inc(total - shown)
        self._shown = totals
        for seconds in self._handling:
            self.handling.observe(seconds)
        self._handling.clear()
        n = self._n
        self.fcr.set(self._resolved / n)
        self.aht.set(self._total_seconds / n)
        self.transfer_rate.set(self._handover / n)
        self.drift_rate.set(self._drift / n)
        self.sla_rate.set(self._sla / n)

    def describe(self) -> Iterator[Metric]:
        """The metrics' descriptions (the registry's duplicate check)."""
        for metric in self._metrics:
            yield from metric.describe()

    def collect(self) -> Iterator[Metric]:
        """The metrics, up to date (what a scrape reads)."""
        self.publish()
        for metric in self._metrics:
            yield from metric.collect()
