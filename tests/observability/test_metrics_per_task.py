"""Metrics are folded once per hand-over (issue 18): the warranty demo's records give the same
registry values whether they reach ``MeteredAuditLog`` one by one or in the journal's batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from middleware import Agency
from middleware.audit import AuditRecord, MemoryAuditLog
from middleware.audit.record import PlainRecord, record_view
from middleware.demo import (
    build_demo_agency,
    demo_config,
    drifting_request,
    failing_claim_request,
    refused_request,
    warranty_request,
)
from middleware.server.metrics import MeteredAuditLog, Metrics

#: Timing of the hand-overs themselves: one observation per append or per batch, not per record.
_APPEND_DURATION = "agency_audit_append_duration_seconds"


class HandOvers(MemoryAuditLog):
    """A memory log that keeps each hand-over (an ``append`` is a hand-over of one)."""

    def __init__(self) -> None:
        super().__init__()
        self.hand_overs: list[list[AuditRecord | PlainRecord]] = []

    async def append(self, record: AuditRecord) -> int:
        self.hand_overs.append([record])
        return await super().append(record)

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        self.hand_overs.append(list(records))
        return await super().append_batch(records)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample but creation times and the hand-overs' own timing."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created") and not s.name.startswith(_APPEND_DURATION)
    }


async def no_sleep(_: float) -> None:
    return None


async def demo_run(audit: MeteredAuditLog) -> None:
    agency = await build_demo_agency(Agency(config=demo_config(), audit=audit, sleep=no_sleep))
    for request in (warranty_request(), failing_claim_request(), drifting_request(), refused_request()):
        await agency.submit(request)
    await agency.close()


def records(hand_overs: list[list[AuditRecord | PlainRecord]]) -> Iterator[AuditRecord]:
    for batch in hand_overs:
        for record in batch:
            yield record_view(record)


async def test_the_warranty_demo_gives_the_same_metrics_per_record_and_per_hand_over() -> None:
    batched, one_by_one = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    log = HandOvers()
    await demo_run(MeteredAuditLog(log, batched))
    assert any(len(batch) > 1 for batch in log.hand_overs)  # the journal's batches were metered

    per_record = MeteredAuditLog(MemoryAuditLog(), one_by_one)
    n = 0
    for record in records(log.hand_overs):
        await per_record.append(record)
        n += 1

    assert samples(batched.registry) == samples(one_by_one.registry)
    count = _APPEND_DURATION + "_count"
    assert batched.registry.get_sample_value(count) == len(log.hand_overs)
    assert one_by_one.registry.get_sample_value(count) == n

    def value(name: str, **labels: str) -> float | None:
        return batched.registry.get_sample_value(name, labels)

    # the demo's figures, as the per-record metering before issue 18 counted them
    assert value("agency_tasks_total", state="completed") == 1
    assert value("agency_tasks_total", state="input_required") == 2
    assert value("agency_tasks_total", state="rejected") == 1
    assert value("agency_task_duration_seconds_count") == 4
    # the freight step is refused for the goal's scope before dispatch (issue 27)
    assert value("agency_routing_decisions_total", outcome="chosen") == 11
    assert value("agency_routing_decisions_total", outcome="refused") == 2
    assert value("agency_failures_total", type="TOOL_TIMEOUT", agent="replacement_shipper@1.0.0") == 3
    assert value("agency_failures_total", type="INTENT_DRIFT", agent="-") == 1
    assert value("agency_failures_total", type="CAPABILITY_MISMATCH", agent="-") == 1
    assert value("agency_resolutions_total", kind="escalate_to_human") == 2
    assert value("agency_goal_verifications_total", result="passed") == 3
    assert value("agency_goal_verifications_total", result="failed") == 1
    assert value("agency_audit_appends_total", event_type="task.transition") == 38  # no freight dispatch
    assert value("agency_audit_appends_total", event_type="catalog.change") == 9
    assert value("agency_kpi_tasks_total") == 4
    assert value("agency_kpi_first_contact_resolved_total") == 1
    assert value("agency_kpi_human_transfers_total") == 2
    assert value("agency_kpi_intent_drift_tasks_total") == 1
    assert value("agency_kpi_sla_met_total") == 4
    assert value("agency_kpi_first_contact_resolution_ratio") == 0.25
    assert value("agency_kpi_human_transfer_ratio") == 0.5
    assert value("agency_kpi_intent_drift_ratio") == 0.25


def _task(n: int) -> list[AuditRecord]:
    return [
        AuditRecord(event_type="task.submitted", task_id=f"t{n}", node="n1"),
        AuditRecord(event_type="task.completed", task_id=f"t{n}", outcome="completed", node="n1"),
    ]


def _own(metric: Counter | Histogram, sample: str) -> float:
    """A sample as the Prometheus metric object itself holds it (not through the registry,
    whose collectors bring it up to date first)."""
    return next(s.value for f in metric.collect() for s in f.samples if s.name == sample)


async def test_a_scrape_of_some_metrics_only_sees_every_hand_over() -> None:
    """The HTTP endpoint's ``name[]`` filter collects only the collectors of those names."""
    metrics = Metrics(CollectorRegistry())
    metered = MeteredAuditLog(MemoryAuditLog(), metrics)
    for n in range(3):
        await metered.append_batch(_task(n))
    some = metrics.registry.restricted_registry(["agency_tasks_total", "agency_kpi_tasks_total"])
    values = {s.name: s.value for f in some.collect() for s in f.samples if not s.name.endswith("_created")}
    assert values == {"agency_tasks_total": 3.0, "agency_kpi_tasks_total": 3.0}


async def test_updates_waiting_for_a_scrape_are_bounded() -> None:
    """Without any scrape the folded updates still reach the metrics (memory stays bounded)."""
    metrics = Metrics(CollectorRegistry())
    metered = MeteredAuditLog(MemoryAuditLog(), metrics)
    for n in range(700):  # 1,400 hand-overs, 1,400 append latencies and 700 task durations
        for record in _task(n):
            await metered.append(record)
    assert _own(metrics.audit_append_latency, "agency_audit_append_duration_seconds_count") >= 1024
    assert _own(metrics.kpis.tasks, "agency_kpi_tasks_total") >= 512
    assert metrics.registry.get_sample_value("agency_audit_append_duration_seconds_count") == 1400
    assert metrics.registry.get_sample_value("agency_kpi_tasks_total") == 700
    assert _own(metrics.kpis.tasks, "agency_kpi_tasks_total") == 700  # the read published the rest
