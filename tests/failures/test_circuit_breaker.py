"""The per-agent circuit breaker: open after repeated timeouts, half-open probe, close."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from middleware import FailureType, TaskState
from middleware.audit import MemoryAuditLog
from middleware.circuit_breaker import BreakerConfig, CircuitBreaker, CircuitState
from middleware.server.metrics import MeteredAuditLog, Metrics
from middleware.testing import Hang, Raise, ScriptedAgent

from .conftest import Clock, audit_records, build, contract, task


def test_opens_after_the_threshold_half_opens_after_the_wait_and_closes_on_success(clock: Clock):
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=3, open_seconds=30), clock=clock)
    assert breaker.record_failure("a") is None and breaker.record_failure("a") is None
    assert breaker.state("a") is CircuitState.CLOSED and breaker.allow("a")
    assert breaker.record_failure("a") is CircuitState.OPEN
    assert not breaker.allow("a") and breaker.open_agents() == ["a"]
    clock.advance(29.9)
    assert breaker.state("a") is CircuitState.OPEN
    clock.advance(0.2)
    assert breaker.state("a") is CircuitState.HALF_OPEN and breaker.open_agents() == []
    assert breaker.allow("a")  # the probe
    assert not breaker.allow("a") and breaker.open_agents() == ["a"]  # one probe at a time
    assert breaker.record_success("a") is CircuitState.CLOSED
    assert breaker.state("a") is CircuitState.CLOSED and breaker.allow("a")


def test_a_failed_probe_opens_it_again_and_success_resets_the_count(clock: Clock):
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2, open_seconds=10), clock=clock)
    breaker.record_failure("a")
    breaker.record_success("a")
    assert breaker.record_failure("a") is None  # the count restarted
    assert breaker.record_failure("a") is CircuitState.OPEN
    clock.advance(10)
    assert breaker.allow("a")
    assert breaker.record_failure("a") is CircuitState.OPEN
    clock.advance(9)
    assert breaker.state("a") is CircuitState.OPEN  # a full new wait


async def test_router_skips_an_open_agent_and_dispatch_to_it_is_tool_unavailable(clock: Clock):
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2, open_seconds=60), clock=clock)
    flaky = ScriptedAgent(Hang())
    steady = ScriptedAgent({"answer": "steady"})
    metrics = Metrics(CollectorRegistry())
    agency, _, _ = await build(
        [(contract("fast", slo_ms=10), flaky), (contract("steady", slo_ms=900), steady)],
        breaker=breaker,
        audit=MeteredAuditLog(MemoryAuditLog(), metrics),
    )
    state = {"agent": "fast@1.0.0"}
    first = await agency.submit(task())
    # two timeouts on "fast" open its circuit; the next retry is refused at once as TOOL_UNAVAILABLE
    assert [f.type for f in first.failures] == [
        FailureType.TOOL_TIMEOUT,
        FailureType.TOOL_TIMEOUT,
        FailureType.TOOL_UNAVAILABLE,
    ]
    assert "circuit breaker is open" in first.failures[2].detail
    assert first.state is TaskState.COMPLETED and first.output == {"answer": "steady"}
    assert flaky.calls == 2
    opened = audit_records(agency, "agent.circuit", first.task_id)
    assert [(r.actors.agent, r.outcome) for r in opened] == [("fast@1.0.0", "open")]
    assert metrics.registry.get_sample_value("agency_circuit_breaker_state", state) == 2

    second = await agency.submit(task())  # the router skips "fast" while it is open
    assert second.failures == [] and flaky.calls == 2
    assert second.routing[0]["chosen"] == "steady@1.0.0"
    assert any(r["agent"] == "fast@1.0.0" for r in second.routing[0]["rejected"])

    clock.advance(60)  # half-open: "fast" may be probed again
    await agency.deregister("steady@1.0.0")
    flaky._steps = [{"answer": "fast again"}]
    third = await agency.submit(task())
    assert third.output == {"answer": "fast again"}
    assert breaker.state("fast@1.0.0") is CircuitState.CLOSED
    assert metrics.registry.get_sample_value("agency_circuit_breaker_state", state) == 0


async def test_when_only_open_agents_fit_the_task_fails_over_as_tool_unavailable(clock: Clock):
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=1, open_seconds=60), clock=clock)
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    agency, _, _ = await build([(contract("only", slo_ms=10), down)], breaker=breaker)
    await agency.submit(task())
    assert breaker.state("only@1.0.0") is CircuitState.OPEN
    out = await agency.submit(task())
    assert down.calls == 1  # not called again while open
    assert [f.type for f in out.failures] == [FailureType.TOOL_UNAVAILABLE]
    assert out.state is TaskState.INPUT_REQUIRED and out.pending["kind"] == "human_handover"
