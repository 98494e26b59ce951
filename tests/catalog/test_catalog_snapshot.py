"""The Redis catalog's snapshot (middleware/redis/catalog_snapshot.py): two gateways on one real
Redis see each other's changes in their routing within the documented bound, with or without
pub/sub, and liveness still excludes a dead agent within its lease.

The bound is checked by counting re-reads, not by timing them: a change is in the snapshot after
at most two re-reads that complete after it (one may have been under way), and a re-read happens
on every catalog event and at least every ``snapshot_seconds``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

from middleware.catalog import CatalogEntry
from middleware.contracts import CapabilityContract
from middleware.errors import NotFound
from middleware.redis import keys as key_names
from middleware.redis.catalog import RedisCatalog
from middleware.redis.catalog_snapshot import CatalogSnapshot
from middleware.testing import ManualClock
from tests.catalog.conftest import REDIS_URL

pytestmark = pytest.mark.timeout(30)


def contract(name: str, **kw: Any) -> CapabilityContract:
    kw.setdefault("can_do", ["act"])
    return CapabilityContract(name=name, version="1.0.0", **kw)


async def pair(prefix: str, clock: ManualClock, **kw: Any) -> tuple[RedisCatalog, RedisCatalog]:
    """Two gateways: two catalogs, each on its own client, on one prefix."""
    a = RedisCatalog(aioredis.Redis.from_url(REDIS_URL), prefix=prefix, clock=clock, **kw)
    b = RedisCatalog(aioredis.Redis.from_url(REDIS_URL), prefix=prefix, clock=clock, **kw)
    return a, b


@pytest.fixture
async def made() -> AsyncIterator[list[RedisCatalog]]:
    catalogs: list[RedisCatalog] = []
    yield catalogs
    if catalogs:
        await catalogs[0].clear()
    for catalog in catalogs:
        await catalog.close()


async def ready(catalog: RedisCatalog) -> CatalogSnapshot:
    assert catalog.snapshot is not None
    await catalog.candidates("act")  # starts it
    await catalog.snapshot.wait_refreshed(0)
    assert catalog.snapshot.ready
    return catalog.snapshot


async def seen_within_two_re_reads(catalog: RedisCatalog, check: Any) -> None:
    """``check(candidates)`` holds after at most two re-reads that follow now."""
    snapshot = catalog.snapshot
    assert snapshot is not None
    start = snapshot.refreshes
    if check(await catalog.candidates("act")):
        return  # already (a re-read that began after the change may have completed)
    async with asyncio.timeout(20):
        for n in (start, start + 1):
            await snapshot.wait_refreshed(n)
            if check(await catalog.candidates("act")):
                return
    raise AssertionError(f"not seen after two re-reads: {await catalog.candidates('act')}")


def keys(entries: list[CatalogEntry]) -> list[str]:
    return [e.key for e in entries]


async def test_register_and_deregister_on_one_gateway_reach_the_others_routing_by_pub_sub(
    made: list[RedisCatalog], redis_prefix: str
) -> None:
    # a periodic re-read far beyond the test's timeout: only the events can bring the changes
    a, b = await pair(redis_prefix, ManualClock(), snapshot_seconds=600)
    made += [a, b]
    snap = await ready(b)
    await a.register(contract("x"))
    await seen_within_two_re_reads(b, lambda c: keys(c) == ["x@1.0.0"])
    assert (await b.get("x@1.0.0")).contract.name == "x"
    await a.update(contract("x", description="new"))
    await seen_within_two_re_reads(b, lambda c: c and c[0].revision == 2)
    await a.deregister("x@1.0.0")
    await seen_within_two_re_reads(b, lambda c: c == [])
    with pytest.raises(NotFound):
        await b.get("x@1.0.0")
    assert snap.ready


async def test_routing_from_a_ready_snapshot_costs_no_round_trip(
    made: list[RedisCatalog], redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await pair(redis_prefix, ManualClock(), snapshot_seconds=600)
    made += [a, b]
    await a.register(contract("x"))
    await ready(b)
    await seen_within_two_re_reads(b, lambda c: keys(c) == ["x@1.0.0"])
    sent: list[Any] = []
    original = AbstractConnection.send_packed_command

    async def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        sent.append(command)
        await original(conn, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    assert keys(await b.candidates("Act")) == ["x@1.0.0"]  # labels normalised as the index's
    assert (await b.get("x@1.0.0")).key == "x@1.0.0"
    assert await b.candidates("other") == []
    monkeypatch.undo()
    assert sent == []


async def test_a_gateway_sees_its_own_writes_at_once(made: list[RedisCatalog], redis_prefix: str) -> None:
    (a, _) = await pair(redis_prefix, ManualClock(), snapshot_seconds=600)
    made.append(a)
    await ready(a)
    await a.register(contract("x"))
    assert keys(await a.candidates("act")) == ["x@1.0.0"]
    await a.register_many([contract("y"), contract("z", can_do=["other"])])
    assert keys(await a.candidates("act")) == ["x@1.0.0", "y@1.0.0"]
    await a.deregister("x@1.0.0")
    assert keys(await a.candidates("act")) == ["y@1.0.0"]


async def test_a_lost_subscription_falls_back_to_the_periodic_re_read(
    made: list[RedisCatalog], redis_prefix: str
) -> None:
    a, b = await pair(redis_prefix, ManualClock(), snapshot_seconds=0.1)
    made += [a, b]
    snap = await ready(b)
    await snap.drop_subscription()  # the socket closes under it, as a network fault would
    await a.register(contract("x"))
    await seen_within_two_re_reads(b, lambda c: keys(c) == ["x@1.0.0"])
    # a write that published nothing (someone with redis-cli): only the re-read can see it
    raw = await a.redis.get(key_names.catalog.entry(redis_prefix, "x@1.0.0"))
    await a.redis.set(key_names.catalog.entry(redis_prefix, "y@1.0.0"), raw.replace(b'"x"', b'"y"'))
    beat_ms = a.clock().timestamp() * 1000  # a live heartbeat (a stale one is re-judged on Redis)
    await a.redis.zadd(key_names.catalog.heartbeats(redis_prefix), {"y@1.0.0": beat_ms})
    await seen_within_two_re_reads(b, lambda c: keys(c) == ["x@1.0.0", "y@1.0.0"])


async def test_liveness_excludes_a_dead_agent_within_its_lease_and_a_heartbeat_brings_it_back(
    made: list[RedisCatalog], redis_prefix: str
) -> None:
    clock = ManualClock()
    a, b = await pair(redis_prefix, clock, lease_seconds=30, snapshot_seconds=0.1)
    made += [a, b]
    await a.register(contract("x"))
    await ready(b)
    await seen_within_two_re_reads(b, lambda c: keys(c) == ["x@1.0.0"])
    clock.advance(29)
    assert not (await b.candidates("act"))[0].stale
    clock.advance(2)  # no heartbeat for longer than the lease: stale at once, no re-read needed
    assert (await b.candidates("act"))[0].stale
    await a.heartbeat("x@1.0.0")  # publishes nothing unless a sweep marked it: the re-read brings it
    await seen_within_two_re_reads(b, lambda c: not c[0].stale)


async def test_a_live_agent_is_never_refused_for_the_snapshots_lag(
    made: list[RedisCatalog], redis_prefix: str
) -> None:
    """A heartbeat the snapshot has not re-read yet (it publishes nothing): an entry the snapshot
    holds as stale is judged on Redis's own heartbeat, so a live agent stays routable."""
    clock = ManualClock()
    a, b = await pair(redis_prefix, clock, lease_seconds=30, snapshot_seconds=600)  # no re-read
    made += [a, b]
    await a.register(contract("x"))
    await ready(b)
    assert keys(await b.candidates("act")) == ["x@1.0.0"]
    clock.advance(31)  # past the lease by the heartbeat the snapshot holds
    await a.heartbeat("x@1.0.0")  # alive in Redis; the snapshot does not know yet
    assert [e.stale for e in await b.candidates("act")] == [False]
    assert not (await b.get("x@1.0.0")).stale


async def test_an_expired_entry_leaves_the_others_snapshot(
    made: list[RedisCatalog], redis_prefix: str
) -> None:
    # a real TTL in Redis: the entry key expires expire_after_seconds after its last heartbeat
    a, b = await pair(redis_prefix, ManualClock(), lease_seconds=0.2, snapshot_seconds=0.05)
    made += [a, b]
    await a.register(contract("x"))
    await ready(b)
    async with asyncio.timeout(20):  # a bounded poll for Redis's own expiry (2 s)
        while await b.candidates("act"):
            await b.snapshot.wait_refreshed(b.snapshot.refreshes)  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        await b.get("x@1.0.0")


async def test_a_snapshot_not_re_read_for_three_periods_is_not_used() -> None:
    ticks = [0.0]
    catalog = RedisCatalog(aioredis.Redis.from_url(REDIS_URL), prefix="unused:", snapshot_seconds=None)
    snap = CatalogSnapshot(catalog, refresh_seconds=1.0, monotonic=lambda: ticks[0])
    try:
        assert not snap.ready  # never read
        await snap.refresh()
        assert not snap.ready  # read, but not subscribed: events would be missed
        snap._subscribed = True
        assert snap.ready
        ticks[0] += 3.0
        assert snap.ready
        ticks[0] += 0.001  # Redis unreachable, a stuck loop: routing reads Redis again
        assert not snap.ready
    finally:
        await catalog.close()
