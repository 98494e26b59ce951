"""Shared fixtures: a fresh Agency, a real Redis (flushed per test, own DB), a real gRPC server."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def redis_client() -> AsyncIterator[object]:
    """A real Redis connection on a test database; keys are namespaced per test."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # CI must not silently skip these
        pytest.fail(f"Redis is required at {REDIS_URL}: {exc}")
    yield client
    await client.aclose()


@pytest.fixture
def redis_prefix() -> str:
    """A unique key prefix so parallel/previous tests never see each other's keys."""
    return f"test:{uuid.uuid4().hex[:12]}:"
