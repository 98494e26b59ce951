"""What only the Redis catalog does: sharing between gateways, expiry instead of leaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from middleware.catalog import CatalogEventType, CatalogQuery
from middleware.contracts import CapabilityContract
from middleware.errors import AlreadyExists, InvalidInput
from middleware.redis.catalog import RedisCatalog
from middleware.redis.keys import catalog as catalog_keys
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.testing import ManualClock

pytestmark = pytest.mark.timeout(20)


def contract(name: str = "agent", version: str = "1.0.0", **kw: Any) -> CapabilityContract:
    kw.setdefault("can_do", ["act"])
    return CapabilityContract(name=name, version=version, **kw)


@pytest.fixture
async def gateways(redis_client: Any, redis_prefix: str) -> AsyncIterator[tuple[RedisCatalog, RedisCatalog]]:
    """Two catalogs with their own connections on one prefix: two gateways, one catalog."""

    clock = ManualClock()
    a = RedisCatalog(aioredis.Redis.from_url(_url()), prefix=redis_prefix, lease_seconds=30, clock=clock)
    b = RedisCatalog(aioredis.Redis.from_url(_url()), prefix=redis_prefix, lease_seconds=30, clock=clock)
    yield a, b
    await a.clear()
    await a.close()
    await b.close()


def _url() -> str:
    import os

    return os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


async def test_gateways_sharing_a_prefix_see_each_others_changes(gateways) -> None:
    a, b = gateways
    async with b.watch() as events:
        await a.register(contract("shared", tags=["x"]))
        event = await asyncio.wait_for(events.__anext__(), 5)
        assert (event.type, event.key) == (CatalogEventType.REGISTERED, "shared@1.0.0")
        assert [e.key for e in await b.candidates("act")] == ["shared@1.0.0"]
        with pytest.raises(AlreadyExists):
            await b.register(contract("shared"))
        await b.update(contract("shared", description="changed by b"))
        assert (await a.get("shared@1.0.0")).contract.description == "changed by b"
        await b.deregister("shared@1.0.0")
        assert await a.query(CatalogQuery()) == []


async def test_entries_carry_a_ttl_that_heartbeats_renew(redis_client, redis_prefix) -> None:
    clock = ManualClock()
    catalog = RedisCatalog(
        redis_client, prefix=redis_prefix, lease_seconds=2, expire_after_seconds=20, clock=clock
    )
    await catalog.register(contract(tags=["t"]))
    ttl = await redis_client.pttl(catalog_keys.entry(redis_prefix, "agent@1.0.0"))
    assert 15_000 < ttl <= 20_000
    assert 15_000 < await redis_client.pttl(catalog_keys.index(redis_prefix, "tag", "t")) <= 20_000
    await redis_client.pexpire(catalog_keys.entry(redis_prefix, "agent@1.0.0"), 5_000)
    await catalog.heartbeat("agent@1.0.0")
    assert await redis_client.pttl(catalog_keys.entry(redis_prefix, "agent@1.0.0")) > 15_000
    await catalog.clear()


async def test_an_expired_entry_leaves_no_trace(redis_client, redis_prefix) -> None:
    clock = ManualClock()
    catalog = RedisCatalog(
        redis_client, prefix=redis_prefix, lease_seconds=2, expire_after_seconds=10, clock=clock
    )
    await catalog.register(contract("gone", can_do=["act"]))
    await catalog.register(contract("kept", can_do=["act"]))
    # Redis expires the entry key on its own (real time); simulate its TTL running out
    await redis_client.delete(catalog_keys.entry(redis_prefix, "gone@1.0.0"))
    assert [e.key for e in await catalog.candidates("act")] == ["kept@1.0.0"]
    assert await redis_client.smembers(catalog_keys.index(redis_prefix, "can", "act")) == {b"kept@1.0.0"}

    clock.advance(11)
    await catalog.heartbeat("kept@1.0.0")
    async with catalog.watch() as events:
        swept = await catalog.sweep()
        assert [(e.type, e.key) for e in swept] == [(CatalogEventType.DEREGISTERED, "gone@1.0.0")]
        assert (await asyncio.wait_for(events.__anext__(), 5)).key == "gone@1.0.0"
    assert await redis_client.zrange(catalog_keys.heartbeats(redis_prefix), 0, -1) == [b"kept@1.0.0"]
    await catalog.clear()


async def test_only_one_gateway_announces_a_stale_entry(gateways) -> None:
    a, b = gateways
    await a.register(contract())
    a.clock.advance(31)  # type: ignore[attr-defined]
    first, second = await asyncio.gather(a.sweep(), b.sweep())
    assert sorted(len(x) for x in (first, second)) == [0, 1]


async def test_bulk_import_validates_everything_first(redis_client, redis_prefix) -> None:
    catalog = RedisCatalog(redis_client, prefix=redis_prefix)
    with pytest.raises(InvalidInput) as err:
        await catalog.register_many([contract("ok"), {"name": "bad", "can_do": []}])  # type: ignore[list-item]
    assert err.value.problems[0].field.startswith("[1].")
    assert await catalog.all() == []
    assert await catalog.register_many([contract(f"a{i}") for i in range(5)]) == 5
    with pytest.raises(AlreadyExists):
        await catalog.register_many([contract("a0"), contract("new")])
    assert len(await catalog.all()) == 5
    await catalog.clear()


async def test_redis_routing_stats_are_shared_and_windowed(redis_client, redis_prefix) -> None:
    """Shared through Redis within the documented bound: a start reaches Redis by a flush (the
    timer's, a re-read's or the outcome script's), and another gateway re-reads numbers older than
    ``max_age_seconds``. Its own starts and outcomes a gateway sees at once."""
    ticks = [0.0]
    one = RedisRoutingStats(redis_client, prefix=redis_prefix, window=4, monotonic=lambda: ticks[0])
    other = RedisRoutingStats(
        aioredis.Redis.from_url(_url()), prefix=redis_prefix, window=4, monotonic=lambda: ticks[0]
    )
    try:
        assert (await one.snapshot("a@1")).success_rate == 1.0  # no history: optimistic
        await one.started("a@1")
        assert (await one.snapshot("a@1")).in_flight == 1  # its own start: at once
        assert (await other.snapshot("a@1")).in_flight == 0  # not sent yet
        await one.flush()
        assert (await one.snapshot("a@1")).in_flight == 1  # not counted twice
        assert (await other.snapshot("a@1")).in_flight == 0  # read less than max_age ago
        ticks[0] += other.max_age_seconds
        assert (await other.snapshot("a@1")).in_flight == 1
        await other.finished("a@1", success=False)
        assert (await other.snapshot("a@1")).in_flight == 0  # its own outcome: at once
        for _ in range(3):
            await one.started("a@1")
            await one.finished("a@1", success=True)  # start and outcome: one script
        ticks[0] += other.max_age_seconds
        snap = await other.snapshot("a@1")
        assert (snap.success_rate, snap.samples, snap.in_flight) == (0.75, 4, 0)
        await one.finished("a@1", success=True)  # the failure falls out of the window
        ticks[0] += other.max_age_seconds
        both = await other.snapshots(["a@1", "b@1"])
        assert both["a@1"].success_rate == 1.0 and both["a@1"].samples == 4
        assert both["b@1"].samples == 0
    finally:
        await one.aclose()
        await other.aclose()
        await other.redis.aclose()


async def test_routing_stats_send_a_start_with_the_next_re_read_or_on_their_timer(
    redis_client, redis_prefix
) -> None:
    ticks = [0.0]
    one = RedisRoutingStats(redis_client, prefix=redis_prefix, flush_seconds=0.05, monotonic=lambda: ticks[0])
    other = RedisRoutingStats(redis_client, prefix=redis_prefix, max_age_seconds=0)
    try:
        await one.started("a@1")
        await one.started("b@1")
        await one.snapshots(["a@1"])  # a re-read carries every unsent start
        assert (await other.snapshots(["a@1", "b@1"]))["b@1"].in_flight == 1
        flushes = one.flushes
        await one.started("a@1")  # nothing else happens: the timer sends it
        async with asyncio.timeout(10):
            await one.wait_flushed(flushes)
        assert (await other.snapshot("a@1")).in_flight == 2
        await one.released("a@1")  # a takeover's release: one fewer
        assert (await other.snapshot("a@1")).in_flight == 1
    finally:
        await one.aclose()


async def test_concurrent_registrations_of_one_key_let_exactly_one_win(gateways) -> None:
    a, b = gateways
    results = await asyncio.gather(
        *[(a if i % 2 else b).register(contract("race", description=str(i))) for i in range(6)],
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, AlreadyExists) for r in results if isinstance(r, BaseException))
    stored = await a.get("race@1.0.0")
    assert stored.contract.description == winners[0].contract.description and stored.revision == 1
    updates = await asyncio.gather(
        *[(a if i % 2 else b).update(contract("race", description=f"u{i}")) for i in range(6)]
    )
    assert sorted(u.revision for u in updates) == [2, 3, 4, 5, 6, 7]  # no update was lost


async def test_without_a_snapshot_candidates_is_one_round_trip_once_the_action_was_looked_up(
    redis_client: Any, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct path (no snapshot, or one not ready: just started, Redis unreachable)."""
    from redis.asyncio.connection import AbstractConnection

    catalog = RedisCatalog(redis_client, prefix=redis_prefix, snapshot_seconds=None)
    await catalog.register(contract("a"))
    await catalog.register(contract("b"))
    sent = []
    original = AbstractConnection.send_packed_command

    async def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        sent.append(command)
        await original(conn, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    assert [e.key for e in await catalog.candidates("act")] == ["a@1.0.0", "b@1.0.0"]
    assert len(sent) == 2  # the first lookup of an action: the index, then its entries
    sent.clear()
    assert [e.key for e in await catalog.candidates("act")] == ["a@1.0.0", "b@1.0.0"]
    assert len(sent) == 1
    await catalog.register(contract("c"))
    sent.clear()
    assert [e.key for e in await catalog.candidates("act")] == ["a@1.0.0", "b@1.0.0", "c@1.0.0"]
    assert len(sent) == 2  # a new member: read in a second round trip
    await catalog.deregister("a@1.0.0")
    sent.clear()
    assert [e.key for e in await catalog.candidates("act")] == ["b@1.0.0", "c@1.0.0"]
    assert len(sent) == 1
    monkeypatch.undo()
    await catalog.clear()


async def test_a_gateways_own_start_counts_while_it_is_on_its_way_to_redis(
    redis_client, redis_prefix
) -> None:
    """A route made while a flush of this gateway's starts is under way still counts them (they
    left the unsent count and are not in the numbers read yet), and once sent they are counted
    once, here and on another gateway."""
    ticks = [0.0]
    one = RedisRoutingStats(
        redis_client, prefix=redis_prefix, max_age_seconds=600, flush_seconds=600, monotonic=lambda: ticks[0]
    )
    assert (await one.snapshot("x")).in_flight == 0  # read: fresh for 600 s
    await one.started("x")
    assert (await one.snapshot("x")).in_flight == 1
    flushing = asyncio.create_task(one.flush())
    await asyncio.sleep(0)  # one loop step: the flush takes the starts and awaits Redis's reply
    assert not flushing.done() and not one._unsent, "the flush is not under way"
    assert (await one.snapshot("x")).in_flight == 1  # no re-read: from what is held here
    await flushing
    assert (await one.snapshot("x")).in_flight == 1
    other = RedisRoutingStats(redis_client, prefix=redis_prefix)
    assert (await other.snapshot("x")).in_flight == 1
    await one.finished("x", success=True)
    assert (await one.snapshot("x")).in_flight == 0
    await one.aclose()
