"""The keep-alive outlives backend errors, puts back entries that are gone, and tells
health whether the gateway's own agents can be routed to."""

from __future__ import annotations

import asyncio
import logging

import pytest

from middleware.contracts import CapabilityContract
from middleware.errors import BackendUnavailable, Unavailable
from middleware.liveness import KeepAlive
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.health import BackendMonitor
from middleware.testing import ManualClock

pytestmark = pytest.mark.timeout(20)

KEY = "hosted@1.0.0"


class FlakyCatalog(MemoryCatalog):
    """A catalog whose heartbeats fail while ``down`` (Redis unreachable)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.down = False
        self.beats = 0

    async def heartbeat(self, key: str):  # type: ignore[no-untyped-def]
        self.beats += 1
        if self.down:
            raise BackendUnavailable("redis failed during catalog.heartbeat: ConnectionError")
        return await super().heartbeat(key)


async def test_the_loop_survives_an_outage_logs_it_once_and_counts_every_failed_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    catalog = FlakyCatalog(lease_seconds=30)
    await catalog.register(CapabilityContract(name="hosted", can_do=["act"]))
    counted: list[str] = []
    waiting: asyncio.Queue[float] = asyncio.Queue()  # the loop is between rounds
    go: asyncio.Queue[None] = asyncio.Queue()  # the test lets one round run

    async def next_round(seconds: float) -> None:
        waiting.put_nowait(seconds)
        await go.get()

    keep = KeepAlive(catalog, lambda: [KEY], sleep=next_round, on_error=counted.append)
    catalog.down = True
    async with keep:
        assert await waiting.get() == 10  # a third of the lease
        backoffs = []
        for _ in range(5):
            go.put_nowait(None)
            backoffs.append(await waiting.get())  # the round failed; the loop waits again
        assert backoffs == sorted(backoffs) and backoffs[-1] <= 1.0  # backoff, capped
        catalog.down = False
        go.put_nowait(None)
        assert await waiting.get() == 10  # recovered: back to the lease's rhythm
        assert not keep.errors.failing and keep._task is not None and not keep._task.done()
    assert counted == ["keepalive"] * 5
    failed = [r for r in caplog.records if "keepalive failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR
    assert sum("keepalive recovered after 5" in r.getMessage() for r in caplog.records) == 1


async def test_an_entry_gone_from_the_catalog_is_registered_again() -> None:
    catalog = MemoryCatalog(lease_seconds=30)
    await catalog.register(CapabilityContract(name="hosted", can_do=["act"], description="as declared"))
    restored: list[CapabilityContract] = []

    async def restore(contract: CapabilityContract) -> None:
        restored.append(contract)
        await catalog.register(contract, replace=True)

    keep = KeepAlive(catalog, lambda: [KEY], restore=restore)
    await keep.remember()
    await catalog.deregister(KEY)  # Redis restarted without its data
    assert await keep.beat() == 1
    assert [c.description for c in restored] == ["as declared"]
    assert (await catalog.get(KEY)).contract.description == "as declared"


async def test_health_follows_whether_the_gateways_agents_can_be_routed_to() -> None:
    clock = ManualClock()
    catalog = MemoryCatalog(lease_seconds=30, clock=clock)
    await catalog.register(CapabilityContract(name="hosted", can_do=["act"]))
    keep = KeepAlive(catalog, lambda: [KEY])
    await keep.remember()
    verdicts: list[bool] = []

    async def flip(healthy: bool) -> None:
        verdicts.append(healthy)

    monitor = BackendMonitor({"catalog": keep.check}, on_change=flip)
    assert await monitor.check_once() is True
    clock.advance(31)  # heartbeats missed: stale, never routed to
    assert await monitor.check_once() is False
    assert "hosted@1.0.0 (stale)" in monitor.failing["catalog"]
    await keep.beat()
    assert await monitor.check_once() is True
    await catalog.deregister(KEY)
    with pytest.raises(Unavailable, match="not registered"):
        await keep.check()
    assert await monitor.check_once() is False
    await keep.beat()  # registered again
    assert await monitor.check_once() is True
    assert verdicts == [True, False, True, False, True]
