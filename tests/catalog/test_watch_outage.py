"""A catalog watch outlives a Redis outage: it subscribes again once Redis is back."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from gateway_processes import free_port, start_redis
from redis.asyncio import Redis

from middleware.catalog import CatalogEventType
from middleware.contracts import CapabilityContract
from middleware.redis.catalog import RedisCatalog
from middleware.server.metrics import Metrics

pytestmark = pytest.mark.timeout(60)


async def test_a_watch_survives_redis_restarting() -> None:
    port = free_port()
    redis_proc = start_redis(port)
    metrics = Metrics()
    client = Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    catalog = RedisCatalog(client, prefix="w:", sweep_interval=0.1, on_redis_error=metrics.redis_error)
    try:
        async with catalog.watch() as events:
            await catalog.register(CapabilityContract(name="before", can_do=["x"]))
            first = await asyncio.wait_for(anext(events), 10)
            assert (first.type, first.key) == (CatalogEventType.REGISTERED, "before@1.0.0")

            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            waiting = asyncio.ensure_future(anext(events))  # the watch goes on through the outage
            failed = metrics.registry.get_sample_value
            while not failed("agency_redis_errors_total", {"operation": "catalog.watch"}):
                assert not waiting.done(), waiting  # did not end with the error
                await asyncio.sleep(0.02)
            redis_proc = start_redis(port)
            while not waiting.done():  # publish until the re-subscribed watch hears one
                with contextlib.suppress(Exception):
                    await catalog.register(CapabilityContract(name="after", can_do=["x"]), replace=True)
                await asyncio.wait({waiting}, timeout=0.1)
            event = waiting.result()
            assert event.key == "after@1.0.0"
    finally:
        await client.aclose()
        redis_proc.kill()
        redis_proc.wait()
