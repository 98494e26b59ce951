"""Failure-rate monitoring: one type above 15 % of an agent's tasks flags its contract for review."""

from __future__ import annotations

import io

import pytest
from prometheus_client import CollectorRegistry

from middleware import FailureType
from middleware.audit import FileAuditLog
from middleware.cli import main as cli_main
from middleware.cli.contracts import flagged_contracts, print_review
from middleware.failure_monitor import BUCKETS, FailureMonitor, MonitorConfig
from middleware.server.metrics import MeteredAuditLog, Metrics
from middleware.testing import Raise, ScriptedAgent

from .conftest import Clock, audit_records, build, contract, task

T = FailureType.TOOL_ERROR


def test_flags_above_fifteen_percent_only_with_enough_tasks_and_clears(clock: Clock):
    registry = CollectorRegistry()
    monitor = FailureMonitor(MonitorConfig(min_tasks=20, window_seconds=3600), clock=clock, registry=registry)
    for _ in range(17):
        assert monitor.record_task(["a"], {}) == []
    for _ in range(3):  # 3/20 = 15 %: not above
        assert monitor.record_task(["a"], {"a": [T]}) == []
    flags = monitor.record_task(["a"], {"a": [T]})  # 4/21 = 19 %
    assert [(f.agent, f.failure_type, f.failures, f.tasks) for f in flags] == [("a", T, 4, 21)]
    assert flags[0].rate == round(4 / 21, 4) and not flags[0].cleared
    assert monitor.record_task(["a"], {"a": [T]}) == []  # already flagged: not raised again
    assert [f.agent for f in monitor.flagged()] == ["a"]
    rate = registry.get_sample_value("agency_agent_failure_rate", {"agent": "a", "failure_type": T.value})
    assert rate is not None and abs(rate - 5 / 22) < 1e-9

    clock.advance(3600 + 3600 / BUCKETS)  # the window slides past every failure (a bucket late at most)
    for _ in range(19):  # the flag stays until there is enough evidence
        assert monitor.record_task(["a"], {}) == []
    cleared = monitor.record_task(["a"], {})
    assert [(f.agent, f.cleared) for f in cleared] == [("a", True)]
    assert monitor.flagged() == []


def test_few_tasks_never_flag(clock: Clock):
    monitor = FailureMonitor(MonitorConfig(min_tasks=20), clock=clock)
    for _ in range(19):
        assert monitor.record_task(["a"], {"a": [T]}) == []


async def test_pipeline_flags_the_contract_audits_it_and_the_cli_lists_it(tmp_path, clock: Clock):
    flaky = ScriptedAgent({"ok": True})
    monitor = FailureMonitor(MonitorConfig(min_tasks=5), clock=clock)
    audit = FileAuditLog(tmp_path / "audit")
    metrics = Metrics(CollectorRegistry())
    agency, _, _ = await build(
        [(contract("flaky", slo_ms=50), flaky)], monitor=monitor, audit=MeteredAuditLog(audit, metrics)
    )
    for _ in range(4):
        await agency.submit(task())
    flaky._steps = [Raise(ValueError("boom")), {"ok": True}]
    flaky.requests.clear()
    last = await agency.submit(task())  # 1 of 5 tasks had a TOOL_ERROR: 20 % > 15 %
    records = [r for _, r in audit.records() if r.event_type == "contract.review"]
    assert len(records) == 1
    assert records[0].task_id == last.task_id and records[0].actors.agent == "flaky@1.0.0"
    assert records[0].detail["failure_type"] == "TOOL_ERROR" and records[0].detail["rate"] == 0.2
    assert records[0].rule == "failure_rate:TOOL_ERROR>0.15"
    labels = {"agent": "flaky@1.0.0", "type": "TOOL_ERROR"}
    assert metrics.registry.get_sample_value("agency_contract_review_flagged", labels) == 1  # the metric
    await agency.close()

    flags = flagged_contracts(tmp_path)
    assert [(f["agent"], f["failure_type"], f["failures"], f["tasks"]) for f in flags] == [
        ("flaky@1.0.0", "TOOL_ERROR", 1, 5)
    ]
    out = io.StringIO()
    print_review(tmp_path, out=out)
    text = out.getvalue()
    assert "flaky@1.0.0" in text and "TOOL_ERROR" in text and "20.0%" in text and "1/5" in text
    assert cli_main(["contracts", "review", "--data-dir", str(tmp_path), "--json"]) == 0


def test_cli_says_so_when_nothing_is_flagged(tmp_path):
    from middleware.errors import NotFound

    out = io.StringIO()
    with pytest.raises(NotFound, match="no audit log at"):  # a wrong --data-dir is not "nothing flagged"
        print_review(tmp_path, out=out)
    (tmp_path / "audit").mkdir()
    assert print_review(tmp_path, out=out) == 0
    assert out.getvalue() == "No contract is flagged for review.\n"


async def test_only_attributed_failures_count(clock: Clock):
    monitor = FailureMonitor(MonitorConfig(min_tasks=1), clock=clock)
    agency, _, _ = await build([(contract("x"), ScriptedAgent({"ok": 1}))], monitor=monitor)
    out = await agency.submit(task("predict", action="stock_prediction"))  # CAPABILITY_MISMATCH: no agent
    assert out.state.value == "rejected"
    assert monitor.flagged() == [] and audit_records(agency, "contract.review") == []


def test_the_window_keeps_bounded_memory_and_never_drops_a_task_early(clock: Clock):
    monitor = FailureMonitor(MonitorConfig(min_tasks=1000, window_seconds=60), clock=clock)
    for i in range(10_000):  # many tasks, 10 per tick of 100 ms: 100 s in all
        monitor.record_task(["a"], {"a": [T]} if i % 10 == 0 else {})
        if i % 10 == 9:
            clock.advance(0.1)
    assert len(monitor._buckets["a"]) <= BUCKETS + 1, "one bucket per 1/BUCKETS of the window at most"
    tasks, failures = monitor.figures("a")
    # the last 60 s of the 100 s are in the window (bucket-granular: up to one tick more)
    assert 6000 <= tasks <= 6010 and failures[T] == tasks // 10
