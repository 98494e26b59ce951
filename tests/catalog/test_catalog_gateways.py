"""Two gateway processes (``agency serve``) sharing one Redis catalog, driven over gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from gateway_processes import redis_definition, start_gateways, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def two_gateways(
    tmp_path: Path, redis_client, redis_prefix: str
) -> AsyncIterator[list[grpc.aio.Channel]]:
    config = write_definition(tmp_path / "agency.json", redis_definition(redis_prefix))
    gateways = await start_gateways(config, ["gw-a", "gw-b"], tmp_path)
    channels = [grpc.aio.insecure_channel(g.address) for g in gateways]
    try:
        yield channels
    finally:
        for channel in channels:
            await channel.close()
        codes = [await g.stop() for g in gateways]
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
    assert codes == [0, 0], [g.output() for g in gateways]


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
