"""Two gateway processes (``agency serve``) sharing one Redis catalog, driven over gRPC."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(60)

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


async def _start(name: str, data_dir: Path, prefix: str) -> tuple[asyncio.subprocess.Process, int]:
    definition = data_dir / f"{name}.yaml"
    definition.write_text(
        json.dumps(  # JSON is YAML
            {
                "version": 1,
                "server": {"address": "127.0.0.1:0", "metrics_address": ""},
                "agency": {"node_id": name},
                "storage": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
                "audit": {"directory": str(data_dir / name / "audit")},
            }
        )
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "serve",
        "--config",
        str(definition),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)  # bounded: a process starting
    match = re.search(rb"serving on [\d.]+:(\d+)", line)
    assert match, f"gateway {name} did not start: {line!r}"
    return proc, int(match.group(1))


@pytest.fixture
async def two_gateways(
    tmp_path: Path, redis_client, redis_prefix: str
) -> AsyncIterator[list[grpc.aio.Channel]]:
    started = await asyncio.gather(
        _start("gw-a", tmp_path, redis_prefix), _start("gw-b", tmp_path, redis_prefix)
    )
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _, port in started]
    try:
        yield channels
    finally:
        for channel in channels:
            await channel.close()
        for proc, _ in started:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in started:
            assert await asyncio.wait_for(proc.wait(), timeout=20) == 0
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


def _contract(name: str, **kw: object) -> common_pb2.CapabilityContract:
    kw.setdefault("can_do", ["query_metric"])
    return common_pb2.CapabilityContract(name=name, version="1.0.0", **kw)  # type: ignore[arg-type]


async def test_two_gateway_processes_share_one_redis_catalog(two_gateways) -> None:
    a_chan, b_chan = two_gateways
    a, b = catalog_pb2_grpc.CatalogServiceStub(a_chan), catalog_pb2_grpc.CatalogServiceStub(b_chan)
    await a.Register(catalog_pb2.RegisterRequest(contract=_contract("probe", can_do=["ping"])))

    watch = b.Watch(catalog_pb2.WatchRequest(include_existing=True))
    first = await asyncio.wait_for(watch.read(), timeout=10)
    assert (first.type, first.key) == ("existing", "probe@1.0.0")  # b's subscription is live now

    await a.Register(
        catalog_pb2.RegisterRequest(
            contract=_contract(
                "report", regions=["shanghai"], max_data_delay_ms=300_000, metrics=["refund_rate"]
            )
        )
    )
    event = await asyncio.wait_for(watch.read(), timeout=10)
    assert (event.type, event.key) == ("registered", "report@1.0.0")  # a's change, seen by b

    assert (
        await b.Get(catalog_pb2.GetCapabilityRequest(key="report@1.0.0"))
    ).contract.max_data_delay_ms == 300_000
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.Register(catalog_pb2.RegisterRequest(contract=_contract("report")))
    assert err.value.code() is grpc.StatusCode.ALREADY_EXISTS

    route = agency_pb2_grpc.AgencyServiceStub(b_chan)
    decision = await route.Route(
        agency_pb2.RouteRequest(
            text="帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的"
        )
    )
    assert decision.chosen == "report@1.0.0"  # b routes to what a registered

    await b.Deregister(catalog_pb2.DeregisterRequest(key="report@1.0.0"))
    gone = await asyncio.wait_for(watch.read(), timeout=10)
    assert (gone.type, gone.key) == ("deregistered", "report@1.0.0")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await a.Get(catalog_pb2.GetCapabilityRequest(key="report@1.0.0"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    watch.cancel()
