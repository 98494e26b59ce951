"""The seed's section 4.4 measures: offline from a known audit log, live as Prometheus metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from middleware.audit import AuditRecord, MemoryAuditLog
from middleware.audit.wal import WalAuditLog
from middleware.cli import main
from middleware.kpi import compute_kpis
from middleware.server.metrics import MeteredAuditLog, Metrics

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def rec(task: str, kind: str, seconds: float, outcome: str = "", node: str = "n1") -> AuditRecord:
    return AuditRecord(
        event_type=kind, task_id=task, time=T0 + timedelta(seconds=seconds), outcome=outcome, node=node
    )


def known_log() -> list[AuditRecord]:
    """Four tasks: t1 resolved in 1 s; t2 handed over after 4 s (then resumed and completed);
    t3 drifted and was handed over after 2 s; t4 was submitted an hour later."""
    return [
        rec("t1", "task.submitted", 0),
        rec("t2", "task.submitted", 0),
        rec("t1", "task.completed", 1, "completed"),
        rec("t3", "task.submitted", 60),
        rec("t3", "failure.event", 61, "INTENT_DRIFT"),
        rec("t3", "human.handover", 62, "escalated"),
        rec("t3", "task.completed", 62, "input_required"),
        rec("t2", "human.handover", 4, "escalated"),
        rec("t2", "task.completed", 4, "input_required"),
        rec("t2", "task.resumed", 300, "approve"),
        rec("t2", "task.completed", 301, "completed"),  # after the first stop: not counted again
        rec("t4", "task.submitted", 3600),
        rec("t4", "task.completed", 3601, "completed"),
    ]


def test_kpis_from_a_known_log_over_a_period():
    report = compute_kpis(known_log(), since=T0, until=T0 + timedelta(minutes=30))
    assert report.tasks == 3
    assert report.first_contact_resolution == round(1 / 3, 4)
    assert report.average_handling_seconds == round(7 / 3, 4)
    assert report.human_transfer_rate == round(2 / 3, 4)
    assert report.intent_drift_rate == round(1 / 3, 4)
    assert report.sla_attainment == round(2 / 3, 4)  # 1 s and 2 s are below 3 s, 4 s is not
    assert report.outcomes == {"completed": 1, "input_required": 2}
    everything = compute_kpis(known_log(), sla_seconds=5)
    assert everything.tasks == 4 and everything.sla_attainment == 1.0
    assert compute_kpis([]).first_contact_resolution is None


async def test_agency_report_reads_the_audit_log(tmp_path, capsys):
    log = WalAuditLog(tmp_path / "audit", "n1")
    for r in known_log():
        await log.append(r)
    await log.close()
    args = ["report", "--data-dir", str(tmp_path), "--since", "2026-11-01T10:00:00Z"]
    assert main([*args, "--until", "2026-11-01T10:30:00Z", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tasks"] == 3 and doc["human_transfers"] == 2 and doc["intent_drift_tasks"] == 1
    assert main([*args, "--until", "2026-11-01T10:30:00Z"]) == 0
    text = capsys.readouterr().out
    assert "First-contact resolution: 33.3% (1/3)" in text
    assert "Average handling time:    2.333 s" in text
    assert "SLA attainment (< 3 s): 66.7% (2/3)" in text
    assert main(["report", "--data-dir", str(tmp_path / "nowhere")]) == 3  # nothing found (exit_codes)


async def test_live_kpi_metrics_follow_the_audit_stream():
    registry = CollectorRegistry()
    metered = MeteredAuditLog(MemoryAuditLog(), Metrics(registry, sla_seconds=3))
    for r in known_log():
        await metered.append(r)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name)

    assert value("agency_kpi_tasks_total") == 4
    assert value("agency_kpi_first_contact_resolved_total") == 2
    assert value("agency_kpi_human_transfers_total") == 2
    assert value("agency_kpi_intent_drift_tasks_total") == 1
    assert value("agency_kpi_sla_met_total") == 3
    assert value("agency_kpi_first_contact_resolution_ratio") == 0.5
    assert value("agency_kpi_intent_drift_ratio") == 0.25
    assert value("agency_kpi_average_handling_seconds") == 2.0
    assert value("agency_kpi_sla_seconds") == 3
