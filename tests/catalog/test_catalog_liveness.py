"""KeepAlive: a gateway renews the leases of the agents it hosts, and only those."""

from __future__ import annotations

import asyncio

import pytest

from middleware.contracts import CapabilityContract
from middleware.liveness import KeepAlive
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.catalog import RedisCatalog
from middleware.router import Router
from middleware.server.bootstrap import build_agency
from middleware.server.definition import AgencyDefinition
from middleware.testing import ManualClock

pytestmark = pytest.mark.timeout(20)


async def test_keep_alive_renews_hosted_agents_so_they_never_go_stale() -> None:
    clock = ManualClock()
    catalog = MemoryCatalog(lease_seconds=30, clock=clock)
    for name in ("hosted", "remote"):
        await catalog.register(CapabilityContract(name=name, can_do=["act"]))
    rounds: list[asyncio.Event] = [asyncio.Event() for _ in range(3)]
    waits = 0

    async def fake_sleep(seconds: float) -> None:  # each "sleep" lets 10 s of clock pass
        nonlocal waits
        assert seconds == 10  # a third of the lease
        if waits:
            rounds[waits - 1].set()
        waits += 1
        clock.advance(seconds)
        if waits > len(rounds):
            await asyncio.Event().wait()

    async with KeepAlive(catalog, lambda: ["hosted@1.0.0"], sleep=fake_sleep):
        await asyncio.wait_for(rounds[-1].wait(), 5)
    decision = await Router(catalog).decide(await Router(catalog).constraints_for("", {"action": "act"}))
    assert decision.chosen == "hosted@1.0.0"  # 30 s passed: the remote one missed its lease
    assert [(r.agent, r.constraint) for r in decision.rejected] == [("remote@1.0.0", "liveness")]


async def test_keep_alive_does_nothing_without_a_lease() -> None:
    keep = KeepAlive(MemoryCatalog(), lambda: ["x@1.0.0"])
    assert keep.interval is None
    async with keep:
        assert keep._task is None


async def test_a_definition_with_redis_storage_shares_catalog_and_stats(tmp_path, redis_prefix) -> None:
    import os

    url = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    definition = AgencyDefinition.from_data(
        {
            "storage": {
                "backend": "redis",
                "redis_url": url,
                "key_prefix": redis_prefix,
                "lease_seconds": 12,
            },
            "audit": {"directory": str(tmp_path / "audit")},
            "agents": [
                {
                    "factory": "middleware.demo:demo_agent",
                    "args": {"name": "reply_agent"},
                    "contract": {"name": "reply_agent", "can_do": ["compose_reply"]},
                }
            ],
        }
    )
    agency = await build_agency(definition)
    try:
        assert isinstance(agency.catalog, RedisCatalog) and agency.catalog.lease_seconds == 12
        assert agency.catalog.prefix == redis_prefix + "catalog:"
        assert (await agency.route("", {"action": "compose_reply"})).chosen == "reply_agent@1.0.0"
    finally:
        await agency.catalog.clear()  # type: ignore[attr-defined]
        await agency.close()
        await agency.catalog.close()
