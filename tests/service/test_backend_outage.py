"""Health follows Redis: NOT_SERVING and fast UNAVAILABLE while it is down, SERVING when back."""

from __future__ import annotations

import time

import grpc
import pytest
import redis.asyncio as aioredis
from gateway_processes import free_port, start_redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.redis.health import BackendMonitor, redis_check
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.gate import BackendGate


async def test_health_and_fail_fast_follow_a_redis_outage():
    port = free_port()
    redis_proc = start_redis(port)
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=0.5)
    agency = Agency()
    server = None
    monitor = None
    try:

        async def flip(healthy: bool) -> None:
            await server.set_serving(healthy)

        monitor = BackendMonitor({"redis": redis_check(client, timeout=0.5)}, interval=0.05, on_change=flip)
        server = build_server(agency, "127.0.0.1:0", interceptors=[BackendGate(monitor)])
        await server.start()
        await monitor.start()
        assert monitor.healthy is True
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            assert (await health.Check(health_pb2.HealthCheckRequest())).status == 1  # SERVING
            await stub.Route(agency_pb2.RouteRequest(text="x"), timeout=5)

            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            await monitor.wait_for(False)
            reply = await health.Check(health_pb2.HealthCheckRequest(service="agency.v1.AgencyService"))
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Route(agency_pb2.RouteRequest(text="x"), timeout=5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "redis" in info.value.details()
            assert time.monotonic() - started < 2  # refused at once, not after the deadline

            redis_proc = start_redis(port)
            await monitor.wait_for(True)
            reply = await health.Check(health_pb2.HealthCheckRequest(service="agency.v1.AgencyService"))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            await stub.Route(agency_pb2.RouteRequest(text="x"), timeout=5)
    finally:
        if monitor is not None:
            await monitor.stop()
        if server is not None:
            await server.stop(0)
        await client.aclose()
        redis_proc.kill()
        redis_proc.wait()
