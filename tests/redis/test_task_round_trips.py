"""Redis round trips of one 1-step task through the gateway in the steady state, counted (not
timed) on redis-py's connections, so that a change that adds one fails here.

The task's own writes are 3 round trips: its lease, record and list rows (one pipeline); its
record before the dispatch (what a takeover needs); its final events and record (one script).
Lease releases go in the takeover's rounds (every third of a lease, for every task at once).
Routing adds one: the routing statistics' outcome script (which also carries the dispatch's
start). The catalog costs none: candidates and the chosen entry come from the gateway's catalog
snapshot, and ranking from the stats this gateway last read or wrote. Their periodic re-reads
(at most one a second each, whatever the load) are counted apart (see docs/operations.md).
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from middleware.redis.routing_stats import RedisRoutingStats
from middleware.server.bootstrap import build_agency
from middleware.server.settings import definition_from
from tests.conftest import REDIS_URL

pytestmark = pytest.mark.timeout(60)

#: The task store, leases and event log's round trips per 1-step task.
TASK_ROUND_TRIPS = 3
#: Every round trip of a 1-step task (catalog and routing statistics included), periodic
#: re-reads left out.
ALL_ROUND_TRIPS = 4

_TASK_MODULES = ("task_store.py", "task_leases.py", "task_events.py", "batch.py")

CONTRACT = {
    "name": "echo",
    "version": "1.0.0",
    "can_do": ["echo"],
    "side_effect_free": True,
    "input_schema": {"type": "object"},
}


async def echo(request: Any) -> Any:
    return request.input


@contextlib.contextmanager
def round_trips() -> Iterator[Counter[str]]:
    """Count every command or pipeline sent on a connection, by the ``middleware/redis`` module
    that sent it."""
    counts: Counter[str] = Counter()
    send = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        frame = sys._getframe(1)
        module = "other"
        while frame is not None:
            path = frame.f_code.co_filename.replace("\\", "/")
            if "/middleware/redis/" in path and not path.endswith("/errors.py"):
                module = path.rsplit("/", 1)[1]
            frame = frame.f_back  # type: ignore[assignment]
        counts[module] += 1
        await send(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]


async def test_a_one_step_task_costs_a_fixed_number_of_round_trips(tmp_path: Path, redis_prefix: str) -> None:
    definition = definition_from(
        {
            "server": {"address": "127.0.0.1:0", "metrics_address": "", "data_dir": str(tmp_path)},
            "agency": {"node_id": "rt"},
            "storage": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix},
        },
        env={},
    )
    agency = await build_agency(definition)
    try:
        await agency.register(CONTRACT, echo, replace=True)

        async def task(i: int) -> None:
            outcome = await agency.submit(
                {"task_id": f"rt-{i}", "text": "echo", "constraints": {"action": "echo"}, "input": {"n": i}},
                client="alice",
            )
            assert outcome.state.value == "completed", outcome.error

        for i in range(3):  # the steady state: scripts loaded, connections open, snapshot read
            await task(i)
        snapshot, stats = agency.catalog.snapshot, agency.router.stats
        assert isinstance(stats, RedisRoutingStats) and snapshot is not None
        await snapshot.wait_refreshed(0)
        n = 5
        refreshes, reads = snapshot.refreshes, stats.reads
        with round_trips() as counts:
            for i in range(3, 3 + n):
                await task(i)
        refreshes, reads = snapshot.refreshes - refreshes, stats.reads - reads
        mine = sum(counts[m] for m in _TASK_MODULES)
        assert mine == TASK_ROUND_TRIPS * n, counts
        assert counts["catalog.py"] == 0, counts
        assert counts["routing_stats.py"] == n + reads, counts  # the outcome script; re-reads
        # the snapshot's periodic re-reads: one round trip each (one more may be under way)
        assert counts["catalog_snapshot.py"] <= refreshes + 1, counts
        periodic = reads + counts["catalog_snapshot.py"]
        assert sum(counts.values()) - periodic == ALL_ROUND_TRIPS * n, counts
        assert counts["other"] == 0, counts  # every round trip is a store's
    finally:
        await agency.close()
        await agency.catalog.close()  # as agency serve does (its client is the routing stats' too)
