"""``agency_redis_errors_total{operation}`` counts what fails against Redis, once per error."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from middleware.catalog import CatalogQuery
from middleware.errors import BackendUnavailable
from middleware.redis.catalog import RedisCatalog
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.redis.task_store import RedisTaskStore
from middleware.server.bootstrap import build_agency, build_post_office
from middleware.server.metrics import Metrics
from middleware.server.settings import definition_from


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def errors(metrics: Metrics, operation: str) -> float:
    value = metrics.registry.get_sample_value("agency_redis_errors_total", {"operation": operation})
    return value or 0.0


@pytest.fixture
async def dead_redis() -> AsyncIterator[Redis]:
    """A client of a port nobody listens on, without retries (errors come at once)."""
    client = Redis(host="127.0.0.1", port=closed_port(), retry=Retry(NoBackoff(), 0))
    yield client
    await client.aclose()


async def test_each_redis_backed_store_reports_its_failed_operations(dead_redis: Redis) -> None:
    metrics = Metrics()
    tasks = RedisTaskStore(dead_redis, on_redis_error=metrics.redis_error)
    catalog = RedisCatalog(dead_redis, prefix="test:dead:", on_redis_error=metrics.redis_error)
    stats = RedisRoutingStats(dead_redis, on_redis_error=metrics.redis_error)

    with pytest.raises(BackendUnavailable):
        await tasks.get("t-1")
    with pytest.raises(BackendUnavailable):
        async with tasks.lock("t-1"):
            pass
    with pytest.raises(BackendUnavailable):
        await catalog.get("a@1.0.0")
    with pytest.raises(BackendUnavailable):
        await catalog.all()  # fails inside query: counted once, as the query
    with pytest.raises(BackendUnavailable):
        await stats.finished("a@1.0.0", success=True)
    with pytest.raises(BackendUnavailable):
        await stats.snapshot("a@1.0.0")

    assert errors(metrics, "task_store.get") == 1
    assert errors(metrics, "task_store.lock") == 1
    assert errors(metrics, "catalog.get") == 1
    assert errors(metrics, "catalog.query") == 1 and errors(metrics, "catalog.all") == 0
    assert errors(metrics, "routing_stats.finished") == 1
    assert errors(metrics, "routing_stats.snapshot") == 1
    total = sum(
        s.value
        for family in metrics.registry.collect()
        if family.name == "agency_redis_errors"
        for s in family.samples
        if s.name == "agency_redis_errors_total"
    )
    assert total == 6  # one per failed call, no double counting


async def test_build_agency_and_post_office_wire_the_counter(tmp_path) -> None:
    """What ``agency serve`` builds from a Redis definition counts its Redis errors."""
    metrics = Metrics()
    definition = definition_from(
        {
            "storage": {"backend": "redis", "redis_url": f"redis://127.0.0.1:{closed_port()}/0"},
            "audit": {"directory": str(tmp_path / "audit")},
        },
        env={},
    )
    agency = await build_agency(definition, metrics=metrics)
    post_office = await build_post_office(definition, audit=agency.audit, metrics=metrics)
    try:
        # redis-py may retry a refused connection with backoff: probe concurrently
        results = await asyncio.gather(
            agency.tasks.get("t-1"),
            agency.catalog.query(CatalogQuery()),
            post_office.transport.size("bob"),
            return_exceptions=True,
        )
        assert all(
            isinstance(r, BackendUnavailable) and isinstance(r.__cause__, RedisConnectionError)
            for r in results
        ), results
        assert errors(metrics, "task_store.get") == 1
        assert errors(metrics, "catalog.query") == 1
        assert errors(metrics, "mailbox.size") == 1
    finally:
        await post_office.transport.close()
        await agency.close()
        await agency.catalog.close()
