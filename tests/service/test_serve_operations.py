"""``agency serve --config``: health follows Redis, and audit retention runs from the file."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from gateway_processes import free_port, start_gateway, start_redis, write_definition
from grpc_health.v1 import health_pb2, health_pb2_grpc

from middleware import InvalidInput
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.record import AuditRecord
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.audit.wal_reader import WalLogReader
from middleware.server.definition import AgencyDefinition

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


async def _health_becomes(health: health_pb2_grpc.HealthStub, status: int, within: float = 15) -> None:
    """Poll the other process's health (its observable state) until it reports ``status``."""
    deadline = time.monotonic() + within
    seen = None
    while time.monotonic() < deadline:
        reply = await health.Check(health_pb2.HealthCheckRequest(service="agency.v1.AgencyService"))
        if (seen := reply.status) == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"health stayed {seen}, expected {status}")


async def _file_appears(path: Path, within: float = 15) -> None:
    """Poll for a file the gateway process writes (its observable state)."""
    deadline = time.monotonic() + within
    for _ in iter(lambda: path.exists() or time.monotonic() > deadline, True):
        await asyncio.sleep(0.05)


async def test_a_gateway_on_redis_is_not_serving_while_redis_is_down(tmp_path: Path) -> None:
    port = free_port()
    redis_proc = start_redis(port)
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "storage": {"backend": "redis", "redis_url": f"redis://127.0.0.1:{port}/0", "key_prefix": "ops:"},
    }
    gateway = await start_gateway(write_definition(tmp_path / "agency.yaml", definition), "g1", tmp_path)
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            await _health_becomes(health, SERVING)
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            await _health_becomes(health, NOT_SERVING)
            started = time.monotonic()
            try:
                await stub.Route(agency_pb2.RouteRequest(text="x"), timeout=10)
                raise AssertionError("a call was accepted while Redis was down")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.UNAVAILABLE and "redis" in (exc.details() or "")
            assert time.monotonic() - started < 5, "refused at once, not after the deadline"
            redis_proc = start_redis(port)
            await _health_becomes(health, SERVING)
    finally:
        assert await gateway.stop() == 0, gateway.output()
        redis_proc.kill()
        redis_proc.wait()


async def test_a_gateway_applies_the_files_audit_retention(tmp_path: Path) -> None:
    audit_dir = tmp_path / "g1" / "audit"
    old = WalAuditLog(audit_dir, "g1", options=WalOptions(segment_bytes=4096, checkpoint_every=5))
    for i in range(40):
        await old.append(AuditRecord(event_type="agent.step", node="g1", outcome="success", detail={"i": i}))
    await old.close()
    sealed_before = sorted(p.name for p in (audit_dir / "g1").glob("*.wal*"))
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "audit": {
            "retention": {"max_age": "0.001s", "archive_dir": str(tmp_path / "cold"), "interval": "1h"}
        },
    }
    gateway = await start_gateway(write_definition(tmp_path / "agency.yaml", definition), "g1", tmp_path)
    try:
        await _file_appears(audit_dir / "g1" / "pruned.json")  # the first run starts with the gateway
    finally:
        assert await gateway.stop() == 0, gateway.output()
    archived = sorted(p.name for p in (tmp_path / "cold" / "g1").glob("*.wal*"))
    assert archived and archived == sealed_before[: len(archived)]
    records = [r for _, r in WalLogReader(audit_dir).records()]
    retention = [r for r in records if r.event_type == "audit.retention"]
    assert len(retention) == 1 and retention[0].detail["segments"] == archived
    assert verify_path(audit_dir).ok and verify_path(tmp_path / "cold" / "g1").ok


def test_bad_retention_settings_are_named_by_path() -> None:
    data = {"audit": {"retention": {"max_age": "forever", "interval": "0s", "archive_dir": 3}}}
    with pytest.raises(InvalidInput) as info:
        AgencyDefinition.from_data(data)
    fields = {p.field for p in info.value.problems}
    assert {"audit.retention.max_age", "audit.retention.interval"} <= fields, fields
    assert "is not an age such as 90d" in str(info.value)
    ok = AgencyDefinition.from_data({"audit": {"retention": {"max_age": "400d"}}})
    assert ok.audit.retention is not None and ok.audit.retention.max_age.days == 400
    assert ok.audit.retention.interval.total_seconds() == 3600


def test_agency_settings_under_server_are_refused_not_ignored() -> None:
    with pytest.raises(InvalidInput) as info:
        AgencyDefinition.from_data({"server": {"agency": {"node_id": "g7"}}})
    assert info.value.problems[0].field == "server.agency"
    assert AgencyDefinition.from_data({"agency": {"node_id": "g7"}}).agency.node_id == "g7"
