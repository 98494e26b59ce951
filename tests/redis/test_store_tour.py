"""Every Redis store on a real Sentinel set, through a ``redis+sentinel://`` URL: each store's
calls work, and go on working after ``SENTINEL FAILOVER`` on the same store objects (redis-py's
Sentinel client finds the new primary; nothing is rebuilt)."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

import pytest
from redis_servers import SentinelSet, failover
from store_calls import outcome, store_calls

pytestmark = pytest.mark.timeout(120)


async def test_every_store_works_through_a_sentinel_url_and_after_a_failover(
    redis_sentinel_set: SentinelSet,
) -> None:
    async with AsyncExitStack() as stack:
        stores = await store_calls(redis_sentinel_set.url, f"tour-{uuid.uuid4().hex[:8]}:", stack)
        flat = [(f"{store}.{name}", call) for store, calls in stores.items() for name, call in calls]

        before = {name: await outcome(call) for name, call in flat}
        assert not {n: repr(e) for n, e in before.items() if e is not None}

        await asyncio.to_thread(failover, redis_sentinel_set)
        after = {name: await outcome(call) for name, call in flat}
        failed = {n: repr(e) for n, e in after.items() if e is not None}
        assert not failed, f"failed after the failover: {failed}"
