"""A worker given every gateway of a fleet stays registered through any live one.

Two ``agency serve`` processes on one Redis (a 1 s catalog lease) and one ``agency worker``
process given both. Kill -9 the gateway it registered at: it heartbeats through the other,
its agent stays live in the shared catalog past several leases, and tasks on the survivor
reach it. Without the second address the same kill leaves it stale within a lease (shown
against a worker given one address, in the same run).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gateway_processes import (
    REDIS_URL,
    GatewayProcess,
    redis_definition,
    start_gateways,
    start_worker,
    write_definition,
)

from middleware.client import AgencyClient
from middleware.errors import NotFound
from middleware.tasks import TaskState

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent  # fleet_agents.py
LEASE = 1.0


@pytest.fixture
async def fleet(tmp_path: Path, redis_client, redis_prefix: str) -> AsyncIterator[list[GatewayProcess]]:
    definition = redis_definition(
        redis_prefix,
        storage={
            "backend": "redis",
            "redis_url": REDIS_URL,
            "key_prefix": redis_prefix,
            "lease_seconds": LEASE,
        },
    )
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateways = await start_gateways(config, ["gw-a", "gw-b"], tmp_path, pythonpath=[HERE])
    try:
        yield gateways
    finally:
        for g in gateways:
            await g.stop()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


async def _entry(client: AgencyClient, key: str):
    try:
        return await client.catalog.get(key)
    except NotFound:
        return None


async def test_kill_9_of_the_gateway_a_worker_registered_at_keeps_its_agent_routable(
    fleet, tmp_path: Path
) -> None:
    a, b = fleet
    both = await start_worker(
        "fleet_agents:work",
        {"name": "rehomed", "can_do": ["rehome"], "slo_latency_ms": 5000},
        [f"{a.address},{b.address}"],  # a comma list: a first
        tmp_path,
        pythonpath=[HERE],
    )
    one = await start_worker(
        "fleet_agents:work",
        {"name": "homebound", "can_do": ["stay"], "slo_latency_ms": 5000},
        [a.address],
        tmp_path,
        pythonpath=[HERE],
    )
    try:
        async with AgencyClient(b.address, timeout=30) as client:
            before = await client.submit("rehome", constraints={"action": "rehome"})
            assert before.state is TaskState.COMPLETED, before.reason

            a.proc.kill()  # kill -9 the gateway both registered at
            killed = time.monotonic()
            while time.monotonic() - killed < 3 * LEASE:  # past three leases, watched on b
                entry = await _entry(client, "rehomed@1.0.0")
                assert entry is not None and not entry.stale, "the worker's agent went stale"
                await asyncio.sleep(0.05)
            assert "calls go to" in both.output()  # it moved to b

            after = await client.submit("rehome", constraints={"action": "rehome"})
            assert after.state is TaskState.COMPLETED, after.reason
            assert after.output["pid"] == both.proc.pid
            alone = await _entry(client, "homebound@1.0.0")  # the one-address worker: lost
            assert alone is None or alone.stale
    finally:
        for w in (both, one):
            w.proc.kill()
            await w.proc.wait()
