"""Every Redis store through a restart of a real redis-server: during the outage each call raises
``BackendUnavailable`` (UNAVAILABLE on the wire, the Redis error chained), never a raw Redis
error (INTERNAL); the first calls after the server is back work.

Each store is built as the gateway builds it (``from_url`` where it has one, on the storage URL;
tests/redis/store_calls.py) on a server of this test's own, killed with kill -9 and started again
on the same port (no persistence: Redis comes back empty, as after a crash without AOF).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import AsyncExitStack

import pytest
from redis.exceptions import RedisClusterException, RedisError
from redis_servers import RedisServer
from store_calls import outcome, store_calls

from middleware.errors import BackendUnavailable

pytestmark = pytest.mark.timeout(120)


async def test_every_store_is_unavailable_during_a_redis_restart_and_works_at_once_after(
    redis_standalone: RedisServer,
) -> None:
    async with AsyncExitStack() as stack:
        stores = await store_calls(redis_standalone.url, f"outage-{uuid.uuid4().hex[:8]}:", stack)
        flat = [(f"{store}.{name}", call) for store, calls in stores.items() for name, call in calls]

        before = {name: await outcome(call) for name, call in flat}
        assert not {n: e for n, e in before.items() if e is not None}, before

        redis_standalone.kill()
        started = time.monotonic()
        during = dict(
            zip([n for n, _ in flat], await asyncio.gather(*(outcome(c) for _, c in flat)), strict=True)
        )
        outage_s = time.monotonic() - started
        wrong = {n: repr(e) for n, e in during.items() if not isinstance(e, BackendUnavailable)}
        assert not wrong, f"not BackendUnavailable during the outage: {wrong}"
        assert all(isinstance(e.__cause__, (RedisError, RedisClusterException)) for e in during.values())

        redis_standalone.start()
        after = {}
        for name, call in flat:  # one at a time: each store's first call after the restart
            after[name] = await outcome(call)
        failed = {n: repr(e) for n, e in after.items() if e is not None}
        assert not failed, f"first calls after the restart failed: {failed}"
        print(f"{len(flat)} calls on {len(stores)} stores; every one refused within {outage_s:.2f} s")
