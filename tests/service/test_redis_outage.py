"""A real Redis stopped and restarted under load: the gateway recovers by itself.

One ``agency serve --config`` process on a private ``redis-server`` (its own port,
started and stopped by the test; with and without persistence) serves a steady load of
tasks. Redis goes away for longer than the catalog lease and comes back: health says
NOT_SERVING while the gateway cannot route and SERVING again once it can, tasks complete
again within seconds of Redis's return (the keep-alive renews, or registers again, the
agents the definition declares), every refused call is UNAVAILABLE (never INTERNAL),
the outage is logged once and counted, SIGTERM stops the gateway with exit code 0, and
the audit log verifies, sealed, with every task that began in it ended in it.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from gateway_processes import (
    GatewayProcess,
    SubmitLoad,
    free_port,
    start_gateway,
    start_redis,
    write_definition,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.open_tasks import open_tasks
from middleware.audit.verify import verify_path
from middleware.audit.wal_reader import WalLogReader

pytestmark = pytest.mark.timeout(110)

HERE = Path(__file__).resolve().parent  # replica_agents.py
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
LEASE = 1.5
WORK = agency_pb2.SubmitRequest(text="do the work", constraints_json='{"action": "work"}')


async def _health_becomes(health: health_pb2_grpc.HealthStub, status: int, within: float = 20) -> None:
    """Poll the gateway's health (the other process's observable state) until ``status``."""
    deadline = time.monotonic() + within
    seen = None
    while time.monotonic() < deadline:
        reply = await health.Check(health_pb2.HealthCheckRequest(service="agency.v1.AgencyService"))
        if (seen := reply.status) == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"health stayed {seen}, expected {status}")


async def _output_shows(gateway: GatewayProcess, text: str, within: float = 20) -> None:
    """Poll the gateway's output (the other process's observable state) for ``text``."""
    deadline = time.monotonic() + within
    for _ in iter(lambda: text in gateway.output() or time.monotonic() > deadline, True):
        await asyncio.sleep(0.05)
    assert text in gateway.output(), gateway.output()


def _metric(output: str, name: str) -> float:
    port = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", output)
    assert port, output
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.mark.parametrize("persistence", ["none", "appendonly"])
async def test_a_gateway_serves_again_by_itself_after_redis_restarts(
    tmp_path: Path, persistence: str
) -> None:
    port = free_port()
    data = tmp_path / "redis" if persistence == "appendonly" else None
    redis_proc = start_redis(port, persist_in=data)
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": "127.0.0.1:0"},
        "storage": {
            "backend": "redis",
            "redis_url": f"redis://127.0.0.1:{port}/0",
            "key_prefix": "outage:",
            "lease_seconds": LEASE,
        },
        "agents": [
            {"agent": "replica_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}},
        ],
    }
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateway = await start_gateway(config, "g1", tmp_path, pythonpath=[HERE])
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            load = SubmitLoad(agency_pb2_grpc.AgencyServiceStub(channel), WORK, clients=3)
            try:
                await _health_becomes(health, SERVING)
                await load.completes(20, within=20)

                redis_proc.terminate()
                redis_proc.wait(timeout=10)
                await _health_becomes(health, NOT_SERVING)
                # the fault: an outage longer than the lease (the agents' entries go stale)
                await asyncio.sleep(LEASE * 2)
                assert load.codes and set(load.codes) == {"UNAVAILABLE"}, load.codes
                assert load.reasons.keys() == {"BACKEND_UNAVAILABLE"}, load.reasons

                redis_proc = start_redis(port, persist_in=data)
                back = time.monotonic()
                await _health_becomes(health, SERVING)
                serving_in = time.monotonic() - back
                await load.completes(20, within=15)
                recovered_in = time.monotonic() - back
                print(
                    f"[{persistence}] after Redis returned: SERVING in {serving_in:.2f} s, "
                    f"20 more tasks in {recovered_in:.2f} s"
                )
            finally:
                await load.stop()
        assert set(load.codes) == {"UNAVAILABLE"}, load.codes  # never INTERNAL
        assert recovered_in < 15
        output = gateway.output()
        assert output.count("keepalive failed") == 1, output  # once per outage, not per round
        assert "keepalive recovered" in output, output
        assert _metric(output, "agency_background_errors_total") >= 1
        restored = "steady@1.0.0 was gone from the catalog: registered again" in output
        # without persistence the entry is gone and registered again; with it, the stale
        # entry came back with Redis's data and the renewed lease revived it
        assert restored is (persistence == "none"), output
    finally:
        code = await gateway.stop()
        redis_proc.kill()
        redis_proc.wait()
    output = gateway.output()
    assert code == 0, output
    assert "Traceback" not in output, output
    audit = tmp_path / "g1" / "audit"
    verdict = verify_path(audit)
    assert verdict.ok, verdict.first_failure
    node = verdict.nodes[0]
    assert not any("after the last signed checkpoint" in w for w in node.warnings), node.warnings  # sealed
    records = [r for _, r in WalLogReader(audit).records()]
    assert not open_tasks(records), "tasks began in the log and never ended"


async def test_sigterm_while_redis_is_down_still_seals_the_audit_log(tmp_path: Path) -> None:
    port = free_port()
    redis_proc = start_redis(port)
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "storage": {
            "backend": "redis",
            "redis_url": f"redis://127.0.0.1:{port}/0",
            "key_prefix": "down:",
            "lease_seconds": LEASE,
        },
        "agents": [
            {"agent": "replica_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}},
        ],
    }
    gateway = await start_gateway(
        write_definition(tmp_path / "agency.yaml", definition), "g1", tmp_path, pythonpath=[HERE]
    )
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert (
                await agency_pb2_grpc.AgencyServiceStub(channel).Submit(WORK, timeout=10)
            ).state == "completed"
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            await _health_becomes(health, NOT_SERVING)
            await _output_shows(gateway, "keepalive failed")  # the loop met the outage
    finally:
        code = await gateway.stop()
        redis_proc.kill()
        redis_proc.wait()
    output = gateway.output()
    assert code == 0 and "Traceback" not in output, output
    assert "agency: stopped" in output
    verdict = verify_path(tmp_path / "g1" / "audit")
    assert verdict.ok, verdict.first_failure
    assert not any("after the last signed checkpoint" in w for w in verdict.nodes[0].warnings)
