"""Health tells the truth through a Redis failover, and the gateway follows it with no restart.

A real ``agency serve --config`` process (gRPC on port 0) with its storage on real Redis
processes (tests/redis_servers.py):

- on a Sentinel set (``redis+sentinel://``): ``SENTINEL FAILOVER`` under load; the gateway goes
  on serving from the new primary, SERVING, tasks completing, the same process throughout, and
  every refused call UNAVAILABLE (never INTERNAL);
- on a plain ``redis://`` URL whose server is demoted to a replica (``REPLICAOF``, a
  primary/replica swap): PING still answers there, but health says NOT_SERVING (the write probe
  is refused ``READONLY``) and calls are refused UNAVAILABLE at once; swapped back, SERVING and
  tasks complete again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import grpc
import pytest
from gateway_processes import GatewayProcess, SubmitLoad, start_gateway, write_definition
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_servers import RedisServer, SentinelSet, failover, redis_server, wait_until

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc

pytestmark = pytest.mark.timeout(150)

AGENTS = Path(__file__).resolve().parents[1] / "service"  # replica_agents.py
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
WORK = agency_pb2.SubmitRequest(text="do the work", constraints_json='{"action": "work"}')


def _definition(url: str) -> dict[str, object]:
    return {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "storage": {
            "backend": "redis",
            "redis_url": url,
            "key_prefix": f"failover-{uuid.uuid4().hex[:8]}:",
            "lease_seconds": 30,  # the default: the keep-alive alone would notice only after ~20 s
        },
        "agents": [{"agent": "replica_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}}],
    }


async def _health(health: health_pb2_grpc.HealthStub) -> int:
    reply = await health.Check(health_pb2.HealthCheckRequest(service="agency.v1.AgencyService"), timeout=5)
    return int(reply.status)


async def _health_becomes(health: health_pb2_grpc.HealthStub, status: int, within: float = 20) -> float:
    """Poll the gateway's health (another process's observable state) until ``status``; seconds taken."""
    started = time.monotonic()
    seen = None
    while time.monotonic() - started < within:
        if (seen := await _health(health)) == status:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"health stayed {seen}, expected {status}")


async def _serve(url: str, tmp_path: Path) -> GatewayProcess:
    config = write_definition(tmp_path / "agency.yaml", _definition(url))
    return await start_gateway(config, "g1", tmp_path, pythonpath=[AGENTS])


async def test_a_sentinel_failover_under_load_is_followed_without_a_restart(
    redis_sentinel_set: SentinelSet, tmp_path: Path
) -> None:
    gateway = await _serve(redis_sentinel_set.url, tmp_path)
    pid = gateway.proc.pid
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            load = SubmitLoad(agency_pb2_grpc.AgencyServiceStub(channel), WORK, clients=2)
            try:
                await _health_becomes(health, SERVING)
                await load.completes(10, within=20)
                old = redis_sentinel_set.primary_address()
                started = time.monotonic()
                new = await asyncio.to_thread(failover, redis_sentinel_set)
                assert new != old
                await _health_becomes(health, SERVING)
                await load.completes(20, within=20)
                print(f"after SENTINEL FAILOVER: 20 more tasks within {time.monotonic() - started:.2f} s")
                # SERVING now means writes work: the new primary takes the probe
                with redis_sentinel_set.primary().client() as primary:
                    assert primary.exists(_definition_prefix(tmp_path) + "health")
            finally:
                await load.stop()
        # never INTERNAL. A task in flight at the switch may answer NOT_FOUND: Redis replicates
        # asynchronously, so what the old primary took after the promotion is not on the new one
        # (the task's record, created there, is gone): only tasks in flight within the second in
        # which the gateway's pools switch primaries (each pool asks the Sentinels once a second).
        assert set(load.codes) <= {"UNAVAILABLE", "NOT_FOUND"}, load.codes
        assert load.codes["NOT_FOUND"] <= 2 * load.clients, load.codes
        print(f"refused during the failover: {dict(load.codes)}")
        assert gateway.proc.returncode is None and gateway.proc.pid == pid  # no restart
    finally:
        code = await gateway.stop()
    assert code == 0, gateway.output()
    assert "Traceback" not in gateway.output(), gateway.output()


def _definition_prefix(tmp_path: Path) -> str:
    import json

    definition = json.loads((tmp_path / "agency.yaml").read_text())
    return str(definition["storage"]["key_prefix"])


async def test_a_demoted_server_behind_a_plain_url_is_not_serving_while_it_cannot_take_writes(
    redis_standalone: RedisServer, tmp_path: Path
) -> None:
    primary = redis_standalone
    with redis_server("--replicaof", "127.0.0.1", str(primary.port)) as replica:
        wait_until(
            "the replica to sync", lambda: replica.info("replication").get("master_link_status") == "up"
        )
        gateway = await _serve(primary.url, tmp_path)
        try:
            async with grpc.aio.insecure_channel(gateway.address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                stub = agency_pb2_grpc.AgencyServiceStub(channel)
                load = SubmitLoad(stub, WORK, clients=2)
                try:
                    await _health_becomes(health, SERVING)
                    await load.completes(10, within=20)

                    # the swap: the replica is promoted, the gateway's server becomes its replica
                    with replica.client() as r, primary.client() as p:
                        r.replicaof("NO", "ONE")
                        p.replicaof("127.0.0.1", replica.port)
                        assert p.ping()  # what the old health check asked: still answered
                    took = await _health_becomes(health, NOT_SERVING, within=10)
                    print(f"demoted: NOT_SERVING after {took:.2f} s")
                    # and it stays so while writes fail: calls refused at once, UNAVAILABLE
                    for _ in range(3):
                        started = time.monotonic()
                        with pytest.raises(grpc.aio.AioRpcError) as refused:
                            await stub.Submit(WORK, timeout=10)
                        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
                        assert time.monotonic() - started < 2
                        assert await _health(health) == NOT_SERVING

                    # swapped back: the same process serves again
                    with replica.client() as r, primary.client() as p:
                        p.replicaof("NO", "ONE")
                        r.replicaof("127.0.0.1", primary.port)
                    back = await _health_becomes(health, SERVING)
                    await load.completes(10, within=20)
                    print(f"promoted again: SERVING after {back:.2f} s")
                finally:
                    await load.stop()
            assert set(load.codes) <= {"UNAVAILABLE"}, load.codes  # never INTERNAL
            assert gateway.proc.returncode is None
        finally:
            code = await gateway.stop()
        assert code == 0, gateway.output()
        assert "Traceback" not in gateway.output(), gateway.output()
