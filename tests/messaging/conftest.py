"""One environment per transport: every messaging test runs against memory and real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from middleware.messaging import ManualClock, MemoryMailbox, RedisMailbox, RedisSubscriptions

from .helpers import Env


@pytest.fixture(params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, redis_client: Any, redis_prefix: str) -> AsyncIterator[Env]:
    clock = ManualClock()
    if request.param == "memory":
        yield Env("memory", MemoryMailbox(clock=clock), clock)
        return
    transport = RedisMailbox(redis_client, prefix=redis_prefix, clock=clock)
    yield Env("redis", transport, clock, subscriptions=RedisSubscriptions(redis_client, prefix=redis_prefix))
    await transport.purge()
    async for key in redis_client.scan_iter(match=redis_prefix + "*"):  # subscriptions, buckets
        await redis_client.delete(key)
