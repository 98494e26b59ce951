"""One catalog test suite, two backends: every test taking ``make_catalog`` runs on both."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from middleware.catalog import Catalog
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.catalog import RedisCatalog
from middleware.testing import ManualClock

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

MakeCatalog = Callable[..., Awaitable[Catalog]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
async def make_catalog(
    request: pytest.FixtureRequest, redis_prefix: str, clock: ManualClock
) -> AsyncIterator[MakeCatalog]:
    """``await make_catalog(lease_seconds=30)``: a fresh catalog on the parametrised backend.

    Redis catalogs made in one test share the prefix, like gateways sharing one catalog.
    """
    import redis.asyncio as aioredis

    made: list[Any] = []

    async def make(lease_seconds: float = 30.0, **kwargs: Any) -> Catalog:
        kwargs.setdefault("clock", clock)
        if request.param == "memory":
            catalog: Any = MemoryCatalog(lease_seconds=lease_seconds, **kwargs)
        else:
            client = aioredis.Redis.from_url(REDIS_URL)
            try:
                await client.ping()
            except Exception as exc:
                pytest.fail(f"Redis is required at {REDIS_URL}: {exc}")
            catalog = RedisCatalog(
                client, prefix=redis_prefix + "catalog:", lease_seconds=lease_seconds, **kwargs
            )
        made.append(catalog)
        return catalog

    yield make
    for catalog in made:
        if isinstance(catalog, RedisCatalog):
            await catalog.clear()
        await catalog.close()
