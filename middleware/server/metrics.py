"""Prometheus metrics, derived from the audit stream.

Every governed step already writes an :class:`~middleware.audit.AuditRecord`, so
metrics are computed from those records by :class:`MeteredAuditLog`, a wrapper
around any :class:`~middleware.audit.AuditLog`: the pipeline needs no metric calls
of its own, and metrics can never disagree with the audit trail. Subsystems with
state of their own (circuit breakers, mailboxes, Redis clients) update the gauges
and counters on :class:`Metrics` directly.

The records of one hand-over (a task's batch at a durability barrier, or one append) are
folded once into plain counter increments and histogram observations; the Prometheus
metrics are brought up to date from them when they are read (every scrape) and, between
scrapes, every 1,024 waiting observations.

All metrics live in the ``registry`` given (a fresh ``CollectorRegistry`` in tests);
there is no module-level singleton. Names follow Prometheus conventions (base
units, ``_total`` for counters, ``_seconds`` for durations).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from threading import Lock
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from ..audit.log import AuditLog
from ..audit.record import AuditEventType, AuditRecord, PlainRecord, record_view
from ..kpi import DEFAULT_SLA_SECONDS, KPI_EVENTS, KpiMetrics

__all__ = ["BREAKER_STATES", "MeteredAuditLog", "Metrics", "is_smf_failure", "refusal_reason"]

log = logging.getLogger("agency.pipeline")

#: Values of ``agency_circuit_breaker_state``.
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
#: The record types :meth:`Metrics.observe` derives a metric from (besides the append counts).
_OBSERVED = frozenset(
    {
        AuditEventType.TASK_COMPLETED,
        AuditEventType.ROUTING_DECISION,
        AuditEventType.ROUTING_REFUSED,
        AuditEventType.FAILURE,
        AuditEventType.RESOLUTION,
        AuditEventType.VERIFICATION,
        AuditEventType.MESSAGE_REJECTED,
        AuditEventType.CATALOG_CHANGE,
        AuditEventType.CONTRACT_REVIEW,
        AuditEventType.CIRCUIT_CHANGE,
        AuditEventType.AGENT_RESULT,
        AuditEventType.USAGE,
        AuditEventType.BUDGET_ALERT,
        AuditEventType.BUDGET_EXCEEDED,
    }
)

#: Refused requests, logged (``catalog.change`` only with the outcome ``refused``).
_REFUSALS = frozenset({AuditEventType.MESSAGE_REJECTED, AuditEventType.CATALOG_CHANGE})
#: Every record type a metric reads more than the event type of.
_READ = _OBSERVED | KPI_EVENTS | _REFUSALS


class Metrics:
    """Every metric Agency Middleware exports, registered on one registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, sla_seconds: float = DEFAULT_SLA_SECONDS
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        #: The seed's section 4.4 measures (first-contact resolution, handling time ...).
        self.kpis = KpiMetrics(r, sla_seconds=sla_seconds)
        self.tasks = Counter(
            "agency_tasks_total", "Tasks finished, by final state.", ["state"], registry=None
        )
        self.tenant_tasks = Counter(
            "agency_tenant_tasks_total",
            "Tasks of a tenant finished, by tenant and final state (tasks without a tenant are only "
            "in agency_tasks_total).",
            ["tenant", "state"],
            registry=None,
        )
        self.routing = Counter(
            "agency_routing_decisions_total",
            "Routing decisions, by outcome (chosen|refused).",
            ["outcome"],
            registry=None,
        )
        self.failures = Counter(
            "agency_failures_total",
            "Failure events, by failure type and agent.",
            ["type", "agent"],
            registry=None,
        )
        self.resolutions = Counter(
            "agency_resolutions_total", "Resolutions applied, by kind.", ["kind"], registry=None
        )
        self.verifications = Counter(
            "agency_goal_verifications_total",
            "Goal verifications, by result (passed|failed).",
            ["result"],
            registry=None,
        )
        self.smf_errors = Counter(
            "smf_validation_errors_total",
            "SMF messages between agents refused because they failed SMF validation.",
            registry=None,
        )
        self.requests_refused = Counter(
            "agency_requests_refused_total",
            "Client requests refused at the gateway, by reason (invalid_input, permission_denied, "
            "unauthenticated ...).",
            ["reason"],
            registry=None,
        )
        self.dispatch_latency = Histogram(
            "agency_dispatch_duration_seconds",
            "Time an agent took to answer one dispatch.",
            ["agent"],
            buckets=_LATENCY_BUCKETS,
            registry=None,
        )
        self.task_latency = Histogram(
            "agency_task_duration_seconds",
            "End-to-end time of a task, submit to outcome.",
            buckets=_LATENCY_BUCKETS,
            registry=None,
        )
        self.llm_tokens = Counter(
            "agency_llm_tokens_total",
            "Tokens the agents' models spent (as the agents reported them), by model, direction "
            "(input|output) and tenant.",
            ["model", "direction", "tenant"],
            registry=None,
        )
        self.llm_cost = Counter(
            "agency_llm_cost_total",
            "What the agents' model calls cost (agency.usage.prices), by model, tenant and currency.",
            ["model", "tenant", "currency"],
            registry=None,
        )
        self.budget_alerts = Counter(
            "agency_budget_alerts_total",
            "Budget thresholds crossed (each once per period), by budget scope.",
            ["scope"],
            registry=None,
        )
        self.budget_stops = Counter(
            "agency_budget_stops_total",
            "Tasks stopped before a step because a budget was spent, by scope and outcome (held|aborted).",
            ["scope", "outcome"],
            registry=None,
        )
        self.audit_appends = Counter(
            "agency_audit_appends_total", "Records appended to the audit log.", ["event_type"], registry=None
        )
        self.audit_append_latency = Histogram(
            "agency_audit_append_duration_seconds",
            "Time until an audit append was durable (acknowledged).",
            buckets=_LATENCY_BUCKETS,
            registry=None,
        )
        self.audit_fsync_latency = Histogram(
            "agency_audit_fsync_duration_seconds",
            "Duration of one fdatasync of the audit log.",
            buckets=_FSYNC_BUCKETS,
            registry=r,
        )
        self.mailbox_depth = Gauge(
            "agency_mailbox_depth", "Messages waiting in a mailbox.", ["mailbox"], registry=r
        )
        self.breaker_state = Gauge(
            "agency_circuit_breaker_state",
            "Circuit breaker state per agent (0 closed, 1 half-open, 2 open).",
            ["agent"],
            registry=r,
        )
        self.redis_errors = Counter(
            "agency_redis_errors_total", "Errors talking to Redis, by operation.", ["operation"], registry=r
        )
        self.webhook_deliveries = Counter(
            "agency_webhook_deliveries_total",
            "Webhook delivery attempts, by agent and outcome (delivered, failed, dead_lettered).",
            ["agent", "outcome"],
            registry=r,
        )
        self.webhook_failing = Gauge(
            "agency_webhook_failing", "1 while an agent's webhook keeps failing.", ["agent"], registry=r
        )
        self.background_errors = Counter(
            "agency_background_errors_total",
            "Failed rounds of background loops (keep-alive, monitor, retention ...), by loop; "
            "each loop backs off and goes on.",
            ["loop"],
            registry=r,
        )
        self.contract_review = Gauge(
            "agency_contract_review_flagged",
            "1 when a contract is flagged for review.",
            ["agent", "type"],
            registry=r,
        )
        # set by the human desk (middleware.people.desk), not from the audit stream
        self.escalations_waiting = Gauge(
            "agency_escalations_waiting",
            "Escalations waiting for a person, by kind (as this gateway last saw them).",
            ["kind"],
            registry=r,
        )
        self.human_answer = Histogram(
            "agency_human_answer_seconds",
            "Time from an escalation to a person's decision, by kind.",
            ["kind"],
            buckets=(10, 60, 300, 900, 3600, 4 * 3600, 86400, float("inf")),
            registry=r,
        )
        # The counters and histograms derived from audit records are updated once per
        # hand-over (a journal's batch, an append): its records are folded into plain
        # increments and observations, which reach the Prometheus metrics when they are read
        # (``_Folded`` is the registry's collector for them) or when enough are waiting.
        self._folded = _Folded(
            self.tasks,
            self.tenant_tasks,
            self.routing,
            self.failures,
            self.resolutions,
            self.verifications,
            self.smf_errors,
            self.requests_refused,
            self.dispatch_latency,
            self.task_latency,
            self.audit_appends,
            self.audit_append_latency,
            self.llm_tokens,
            self.llm_cost,
            self.budget_alerts,
            self.budget_stops,
        )
        r.register(self._folded)
        # Children of the folded metrics, looked up once per label value: ``labels()``
        # validates and locks on every call. (Never removed, so a cached child stays the
        # exported one; gauges, which could be, are not cached.)
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self._appended: dict[str, Any] = {}  # event type -> its child of agency_audit_appends_total

    def _child(self, metric: Counter | Histogram, *values: str) -> Any:
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def appended(self, record: AuditRecord, seconds: float) -> None:
        """Count one audit append that took ``seconds`` until durable, and observe its record."""
        self.appended_batch((record,), seconds)

    def appended_batch(
        self,
        records: Sequence[AuditRecord | PlainRecord],
        seconds: float,
        *,
        started: dict[str, datetime] | None = None,
    ) -> None:
        """Count a batch of audit records that took ``seconds`` until durable (one latency
        observation for the batch, one counter update per event type) and fold in what its
        records imply: outcomes, the KPIs, and with ``started`` (task id -> submit time, kept
        by the caller) each task's end-to-end time."""
        folded, appended = self._folded, self._appended
        refused = []
        with folded.lock:
            folded.observe(self.audit_append_latency, seconds)
            incs = folded.incs
            for record in records:
                kind: str = record["event_type"] if isinstance(record, dict) else record.event_type
                child = appended.get(kind)
                if child is None:
                    child = appended[kind] = self.audit_appends.labels(kind)
                incs[child] = incs.get(child, 0) + 1
                # most records (transitions, dispatches ...) imply nothing more than their count
                if kind in _READ and self._fold(record, started):
                    refused.append(record)
            folded.publish_if_full()
        for record in refused:  # logged outside the lock
            _log_refusal(record)

    def observe(self, record: AuditRecord) -> None:
        """Update the metrics one audit record implies (its outcome; not the KPIs, not its
        append)."""
        if record.event_type in _OBSERVED:
            with self._folded.lock:
                self._observe(record, record.event_type, record.outcome, record.actors.agent, record.detail)

    def _fold(self, record: AuditRecord | PlainRecord, started: dict[str, datetime] | None) -> bool:
        """Fold one record the metrics read (holding the lock); whether it is a refusal to log."""
        if isinstance(record, AuditRecord):
            kind, task_id, outcome = record.event_type, record.task_id, record.outcome
            agent, detail, at = record.actors.agent, record.detail, record.time
        else:
            kind, task_id, outcome = record["event_type"], record["task_id"], record["outcome"]
            agent, detail, text = record["actors"]["agent"], record["detail"], record["time"]
            # the time is parsed only where it is read: the KPIs' records (and the task's duration)
            at = datetime.fromisoformat(text) if kind in KPI_EVENTS and isinstance(text, str) else text
        if kind in _OBSERVED:
            self._observe(record, kind, outcome, agent, detail)
        if kind in KPI_EVENTS:
            self.kpis.observe_fields(task_id, kind, at, outcome)
            if started is not None:
                if kind == AuditEventType.TASK_SUBMITTED:
                    if task_id:
                        started[task_id] = at
                elif kind == AuditEventType.TASK_COMPLETED:
                    begun = started.pop(task_id, None)
                    if begun is not None:
                        self._folded.observe(self.task_latency, (at - begun).total_seconds())
            return False
        return kind in _REFUSALS and (kind == AuditEventType.MESSAGE_REJECTED or outcome == "refused")

    def background_error(self, loop: str) -> None:
        """Count one failed round of a background loop (their ``on_error`` hook)."""
        self.background_errors.labels(loop=loop).inc()

    def redis_error(self, operation: str) -> None:
        """Count one Redis error (the ``on_redis_error`` hook of Redis-backed components)."""
        self.redis_errors.labels(operation=operation).inc()

    def webhook_attempt(self, agent: str, outcome: str) -> None:
        """Count one webhook delivery attempt (the webhook dispatcher's ``on_attempt`` hook)."""
        self.webhook_deliveries.labels(agent=agent, outcome=outcome).inc()

    def set_webhook_failing(self, agent: str, failing: bool) -> None:
        """Whether ``agent``'s webhook is failing now."""
        self.webhook_failing.labels(agent=agent).set(1 if failing else 0)

    def set_mailbox_depth(self, mailbox: str, depth: int) -> None:
        """Record a mailbox's live messages (the post office's ``on_depth`` hook)."""
        self.mailbox_depth.labels(mailbox=mailbox).set(depth)

    def _observe(
        self, record: AuditRecord | PlainRecord, kind: str, outcome: str, agent: str, d: dict[str, Any]
    ) -> None:  # holding the fold's lock
        inc = self._folded.inc
        if kind == AuditEventType.TASK_COMPLETED:
            inc(self._child(self.tasks, outcome), 1)
            actors = record["actors"] if isinstance(record, dict) else record.actors.model_dump()
            if tenant := actors.get("tenant"):
                inc(self._child(self.tenant_tasks, tenant, outcome), 1)
        elif kind == AuditEventType.ROUTING_DECISION:
            inc(self._child(self.routing, "chosen"), 1)
        elif kind == AuditEventType.ROUTING_REFUSED:
            inc(self._child(self.routing, "refused"), 1)
        elif kind == AuditEventType.FAILURE:
            inc(self._child(self.failures, outcome, agent or "-"), 1)
        elif kind == AuditEventType.RESOLUTION:
            inc(self._child(self.resolutions, outcome), 1)
        elif kind == AuditEventType.VERIFICATION:
            inc(self._child(self.verifications, "passed" if outcome == "passed" else "failed"), 1)
        elif kind == AuditEventType.MESSAGE_REJECTED:  # rare: the plain form is validated here
            view = record_view(record)
            if is_smf_failure(view):
                inc(self.smf_errors, 1)
            else:
                inc(self._child(self.requests_refused, refusal_reason(view)), _count(view))
        elif kind == AuditEventType.CATALOG_CHANGE and outcome == "refused":
            view = record_view(record)
            inc(self._child(self.requests_refused, refusal_reason(view)), _count(view))
        elif kind == AuditEventType.CONTRACT_REVIEW:
            flagged = 0 if outcome == "cleared" else 1
            self.contract_review.labels(agent=agent or "-", type=d.get("failure_type", "-")).set(flagged)
        elif kind == AuditEventType.CIRCUIT_CHANGE:
            self.breaker_state.labels(agent=agent or "-").set(BREAKER_STATES.get(outcome, 0))
        elif kind == AuditEventType.USAGE:
            model, tenant = str(d.get("model") or "-"), str(d.get("tenant") or "-")
            inc(self._child(self.llm_tokens, model, "input", tenant), int(d.get("input_tokens") or 0))
            inc(self._child(self.llm_tokens, model, "output", tenant), int(d.get("output_tokens") or 0))
            inc(
                self._child(self.llm_cost, model, tenant, str(d.get("currency") or "-")),
                float(d.get("cost") or 0),
            )
        elif kind == AuditEventType.BUDGET_ALERT:
            inc(self._child(self.budget_alerts, str(d.get("scope") or "-")), 1)
        elif kind == AuditEventType.BUDGET_EXCEEDED:
            inc(self._child(self.budget_stops, str(d.get("scope") or "-"), outcome), 1)
        elif kind == AuditEventType.AGENT_RESULT and isinstance(d.get("duration_ms"), (int, float)):
            self._folded.observe(self._child(self.dispatch_latency, agent or "-"), d["duration_ms"] / 1000)


class _Folded:
    """The collector of the metrics derived from audit records, and their updates not yet
    applied: counter increments summed per series, histogram observations in order.

    The event loop adds to them holding ``lock`` (once per hand-over); they are applied to
    the Prometheus metrics before every read (a scrape, ``get_sample_value``) and whenever
    ``publish_every`` observations wait, so memory stays bounded without a scrape.
    """

    def __init__(self, *metrics: Counter | Histogram, publish_every: int = 1024) -> None:
        self.metrics = metrics
        self.lock = Lock()
        self.incs: dict[Any, float] = {}  # counter child -> increments not applied yet
        self._observations: list[tuple[Any, float]] = []  # (histogram child, value)
        self._publish_every = publish_every

    def inc(self, child: Any, n: float) -> None:
        """Add ``n`` to a counter (holding the lock)."""
        self.incs[child] = self.incs.get(child, 0) + n

    def observe(self, child: Any, value: float) -> None:
        """Observe ``value`` in a histogram (holding the lock)."""
        self._observations.append((child, value))

    def publish_if_full(self) -> None:
        """Apply the updates if enough wait (holding the lock)."""
        if len(self._observations) >= self._publish_every:
            self._publish()

    def _publish(self) -> None:  # holding the lock
        incs, self.incs = self.incs, {}
        observations, self._observations = self._observations, []
        for child, n in incs.items():
            child.inc(n)
        for child, value in observations:
            child.observe(value)

    def describe(self) -> Iterator[Metric]:
        """The metrics' descriptions (the registry's duplicate check)."""
        for metric in self.metrics:
            yield from metric.describe()

    def collect(self) -> Iterator[Metric]:
        """The metrics with every update applied (what a scrape reads)."""
        with self.lock:
            self._publish()
        for metric in self.metrics:
            yield from metric.collect()


#: Rules of SMF validation failures (an SMF message between agents that does not validate).
_SMF_RULES = frozenset({"INVALID_INPUT", "SCHEMA_VIOLATION"})
#: ``reason`` label values of ``agency_requests_refused_total`` (anything else is ``other``).
_REFUSAL_REASONS = {
    "": "invalid_input",
    "request_validation": "invalid_input",
    "INVALID_INPUT": "invalid_input",
    "SCHEMA_VIOLATION": "invalid_input",
    "PERMISSION_DENIED": "permission_denied",
    "UNAUTHENTICATED": "unauthenticated",
    "RESOURCE_EXHAUSTED": "resource_exhausted",
    "FAILED_PRECONDITION": "failed_precondition",
    "NOT_FOUND": "not_found",
    "communication_flows": "communication_flows",
}


def is_smf_failure(record: AuditRecord) -> bool:
    """Whether a ``message.rejected`` record is an SMF message between agents that failed
    validation (what ``smf_validation_errors_total`` counts), not a refused client request."""
    return record.component != "gateway" and record.rule in _SMF_RULES


def refusal_reason(record: AuditRecord) -> str:
    """The ``reason`` label of a refused request's record."""
    return _REFUSAL_REASONS.get(record.rule, "other")


def _count(record: AuditRecord) -> int:
    """Refusals one record stands for (aggregated refusals carry a ``count``)."""
    count = record.detail.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _log_refusal(record: AuditRecord | PlainRecord) -> None:
    """Log an SMF message between agents that failed validation at ERROR (what the alert is
    for), a refused client request at INFO (invalid input) or WARNING (auth, permission)."""
    view = record_view(record)
    if view.event_type == AuditEventType.CATALOG_CHANGE and view.outcome != "refused":
        return
    if view.event_type == AuditEventType.MESSAGE_REJECTED and is_smf_failure(view):
        log.error(
            "SMF validation failed: %s",
            "; ".join(view.detail.get("problems", [])) or view.detail.get("why") or "invalid message",
            extra={"trace_id": view.trace_id, "event": view.event_type},
        )
        return
    reason = refusal_reason(view)
    log.log(
        logging.INFO if reason == "invalid_input" else logging.WARNING,
        "request refused (%s): %s",
        reason,
        "; ".join(view.detail.get("problems", [])) or view.detail.get("why") or "refused",
        extra={"trace_id": view.trace_id, "event": view.event_type},
    )


class MeteredAuditLog:
    """An :class:`AuditLog` that updates :class:`Metrics` once per hand-over for the records it
    appends to ``inner`` (and times each task from its ``task.submitted`` to its first
    ``task.completed``), and logs SMF validation failures at ERROR, refused client requests at INFO
    (invalid input) or WARNING (authentication, permission)."""

    def __init__(self, inner: AuditLog, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self._started: dict[str, datetime] = {}

    @property
    def location(self) -> str:
        return self.inner.location

    async def append(self, record: AuditRecord) -> int:
        began = time.perf_counter()
        index = await self.inner.append(record)
        self.metrics.appended_batch((record,), time.perf_counter() - began, started=self._started)
        return index

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        began = time.perf_counter()
        indexes = await self.inner.append_batch(records)
        self.metrics.appended_batch(records, time.perf_counter() - began, started=self._started)
        return indexes

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return self.inner.records()

    def __getattr__(self, name: str) -> object:
        # Backend-specific operations (checkpoints, proofs ...) pass straight through.
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()
