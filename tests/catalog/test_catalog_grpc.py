"""CatalogService and the Route dry run over a real gRPC server on port 0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2
from middleware.memory_catalog import MemoryCatalog
from middleware.pipeline import Agency
from middleware.server.grpc_api import build_server
from middleware.testing import ManualClock

pytestmark = pytest.mark.timeout(30)


class Server:
    def __init__(self, agency: Agency, channel: grpc.aio.Channel, clock: ManualClock) -> None:
        self.agency = agency
        self.clock = clock
        self.catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
        self.agency_stub = agency_pb2_grpc.AgencyServiceStub(channel)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    clock = ManualClock()
    agency = Agency(catalog=MemoryCatalog(lease_seconds=30, clock=clock))
    srv = build_server(agency, "127.0.0.1:0")
    await srv.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{srv.port}")
    yield Server(agency, channel, clock)
    await channel.close()
    await srv.stop(0)
    await agency.close()


def pb_contract(name: str = "agent", version: str = "1.0.0", **kw: Any) -> common_pb2.CapabilityContract:
    kw.setdefault("can_do", ["query_metric"])
    return common_pb2.CapabilityContract(name=name, version=version, **kw)


async def test_register_get_query_update_heartbeat_deregister(server: Server) -> None:
    stub = server.catalog
    entry = await stub.Register(
        catalog_pb2.RegisterRequest(
            contract=pb_contract(
                "report",
                "2.1.0",
                tags=["Orders"],
                regions=["shanghai"],
                max_data_delay_ms=300_000,
                metrics=["refund_rate"],
                human_review=True,
                output_schema_json=json.dumps({"type": "object"}),
            )
        )
    )
    assert (entry.key, entry.revision, entry.stale) == ("report@2.1.0", 1, False)
    assert list(entry.contract.tags) == ["orders"]
    got = await stub.Get(catalog_pb2.GetCapabilityRequest(key="report@2.1.0"))
    assert got.contract.max_data_delay_ms == 300_000 and got.contract.human_review
    assert list(got.contract.regions) == ["shanghai"]
    await stub.Register(catalog_pb2.RegisterRequest(contract=pb_contract("report", "1.0.0")))
    plain = await stub.Get(catalog_pb2.GetCapabilityRequest(key="report@1.0.0"))
    assert not plain.contract.HasField("max_data_delay_ms")  # undeclared stays undeclared

    found = await stub.Query(catalog_pb2.QueryRequest(name="report", version_range="^2"))
    assert [e.key for e in found.entries] == ["report@2.1.0"]

    updated = await stub.Update(
        catalog_pb2.UpdateRequest(contract=pb_contract("report", "2.1.0", description="v2"))
    )
    assert updated.revision == 2 and updated.contract.description == "v2"

    server.clock.advance(31)
    assert (await stub.Get(catalog_pb2.GetCapabilityRequest(key="report@2.1.0"))).stale
    assert [e.key for e in (await stub.Query(catalog_pb2.QueryRequest(name="report"))).entries] == []
    alive = await stub.Heartbeat(catalog_pb2.HeartbeatRequest(key="report@2.1.0"))
    assert not alive.stale

    await stub.Deregister(catalog_pb2.DeregisterRequest(key="report@2.1.0"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Get(catalog_pb2.GetCapabilityRequest(key="report@2.1.0"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


async def test_errors_map_to_status_codes_with_every_problem(server: Server) -> None:
    stub = server.catalog
    bad = pb_contract("Bad Name", "1.0", can_do=["pay"], cannot_do=["pay"], slo_latency_ms=-5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Register(catalog_pb2.RegisterRequest(contract=bad))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(err.value.trailing_metadata() or ())
    fields = {p["field"] for p in json.loads(trailers["agency-problems"])}
    assert fields == {"contract.name", "contract.version", "contract.slo_latency_ms", "contract.cannot_do"}
    assert (await stub.Query(catalog_pb2.QueryRequest())).entries == []  # nothing half-registered

    await stub.Register(catalog_pb2.RegisterRequest(contract=pb_contract()))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Register(catalog_pb2.RegisterRequest(contract=pb_contract()))
    assert err.value.code() is grpc.StatusCode.ALREADY_EXISTS
    for call in (
        stub.Update(catalog_pb2.UpdateRequest(contract=pb_contract("ghost"))),
        stub.Deregister(catalog_pb2.DeregisterRequest(key="ghost@1.0.0")),
        stub.Heartbeat(catalog_pb2.HeartbeatRequest(key="ghost@1.0.0")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Query(catalog_pb2.QueryRequest(version_range=">>2"))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata() or ())["agency-field"] == "version_range"


async def test_watch_streams_every_change(server: Server) -> None:
    stub = server.catalog
    await stub.Register(catalog_pb2.RegisterRequest(contract=pb_contract("first")))
    stream = stub.Watch(catalog_pb2.WatchRequest(include_existing=True))

    async def next_event() -> catalog_pb2.CatalogEvent:
        return await asyncio.wait_for(stream.read(), timeout=5)

    existing = await next_event()  # once the snapshot arrives, the subscription is in place
    assert (existing.type, existing.key) == ("existing", "first@1.0.0")

    await stub.Register(catalog_pb2.RegisterRequest(contract=pb_contract("second")))
    await stub.Update(catalog_pb2.UpdateRequest(contract=pb_contract("second", description="new")))
    server.clock.advance(31)
    await stub.Heartbeat(catalog_pb2.HeartbeatRequest(key="second@1.0.0"))
    await server.agency.catalog.sweep()  # "first" missed its lease
    await stub.Heartbeat(catalog_pb2.HeartbeatRequest(key="first@1.0.0"))
    await stub.Deregister(catalog_pb2.DeregisterRequest(key="second@1.0.0"))

    seen = [await next_event() for _ in range(5)]
    assert [(e.type, e.key) for e in seen] == [
        ("registered", "second@1.0.0"),
        ("updated", "second@1.0.0"),
        ("stale", "first@1.0.0"),
        ("alive", "first@1.0.0"),
        ("deregistered", "second@1.0.0"),
    ]
    assert seen[1].entry.contract.description == "new" and seen[2].entry.stale
    assert not seen[4].HasField("entry")
    stream.cancel()


async def test_route_dry_run_returns_the_full_explanation(server: Server) -> None:
    stub = server.catalog
    await stub.Register(
        catalog_pb2.RegisterRequest(
            contract=pb_contract(
                "monitor",
                slo_latency_ms=50,
                regions=["shanghai"],
                max_data_delay_ms=1000,
                granularities=["hour"],
            )
        )
    )
    await stub.Register(
        catalog_pb2.RegisterRequest(contract=pb_contract("batch", max_data_delay_ms=86_400_000))
    )
    await stub.Register(
        catalog_pb2.RegisterRequest(contract=pb_contract("refuser", can_do=["x"], cannot_do=["query_metric"]))
    )
    decision = await server.agency_stub.Route(
        agency_pb2.RouteRequest(
            text="帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的"
        )
    )
    assert decision.chosen == "monitor@1.0.0" and not decision.refused
    constraints = json.loads(decision.constraints_json)
    assert constraints["freshness_tolerance_ms"] == 900_000 and constraints["region"] == "shanghai"
    assert [(r.agent, r.constraint) for r in decision.rejected] == [
        ("refuser@1.0.0", "cannot_do"),
        ("batch@1.0.0", "freshness_tolerance_ms"),
    ]
    assert decision.considered == 3 and decision.candidates[0].score > 0
    assert "chose monitor@1.0.0" in decision.explanation

    refused = await server.agency_stub.Route(
        agency_pb2.RouteRequest(
            text="anything", constraints_json=json.dumps({"action": "query_metric", "data_residency": "eu"})
        )
    )
    assert refused.refused and refused.chosen == ""
    assert {(r.agent, r.constraint) for r in refused.rejected} == {
        ("refuser@1.0.0", "cannot_do"),
        ("monitor@1.0.0", "data_residency"),
        ("batch@1.0.0", "data_residency"),
    }
