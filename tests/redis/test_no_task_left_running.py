"""After a Redis fault, every task left in Redis in a running state reaches a stopped one
within two leases, and Cancel ends it (issue 24, "tasks stuck after a Redis restart").

A gateway (an ``Agency`` on Redis stores, task leases and its takeover loop) talks to a real
redis-server through a TCP proxy (tests/tcp_proxy.py), which makes the faults a restart makes
by chance, on cue: the server unreachable while a task's last write is sent, and a write
applied whose reply never arrives (the connection drops in between).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis_servers import RedisServer
from tcp_proxy import TcpProxy

from middleware import Agency, AgencyConfig, CapabilityContract, TaskRequest, TaskState
from middleware.errors import AgencyError
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats

LEASE = 1.0
PREFIX = "stuck:"
STOPPED = {TaskState.INTERRUPTED, TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED}


class Gateway:
    """One gateway on Redis through ``proxy``; ``agent`` runs the tasks' one step."""

    def __init__(self, proxy: TcpProxy, agent: Any) -> None:
        self.client = aioredis.Redis(port=proxy.port, socket_timeout=2, socket_connect_timeout=2)
        catalog = MemoryCatalog()
        self.agency = Agency(
            catalog=catalog,
            router=Router(catalog, stats=MemoryRoutingStats()),
            tasks=RedisTaskStore(self.client, prefix=PREFIX),
            events=RedisTaskEventLog(self.client, prefix=PREFIX),
            leases=RedisTaskLeases(self.client, prefix=PREFIX, lease_seconds=LEASE),
            config=AgencyConfig(node_id="gw-a"),
        )
        self.agent = agent

    async def start(self) -> None:
        contract = CapabilityContract(name="writer", can_do=["write"], slo_latency_ms=10_000)
        await self.agency.register(contract, self.agent)
        assert self.agency.takeover is not None
        self.agency.takeover.start()

    async def close(self) -> None:
        await self.agency.close()
        await self.client.aclose()


@pytest.fixture
async def proxy(redis_standalone: RedisServer) -> AsyncIterator[TcpProxy]:
    the_proxy = await TcpProxy(redis_standalone.address).start()
    yield the_proxy
    await the_proxy.close()


async def _stored(server: RedisServer, task_id: str) -> TaskState | None:
    """The task's state in Redis, read past the proxy (None: no record)."""
    client = aioredis.Redis(port=server.port)
    try:
        store = RedisTaskStore(client, prefix=PREFIX)
        try:
            return (await store.get(task_id)).state
        except AgencyError:
            return None
    finally:
        await client.aclose()


async def _stops_within_two_leases(server: RedisServer, task_id: str) -> TaskState:
    """Wait (on Redis, polled) for the stored task to stop; fail after two leases and a margin
    for a loaded machine."""

    async def stopped() -> TaskState:
        while (state := await _stored(server, task_id)) not in STOPPED:  # noqa: ASYNC110 (another process)
            await asyncio.sleep(0.05)  # polling another process's state: no event to wait on
        assert state is not None
        return state

    try:
        return await asyncio.wait_for(stopped(), 2 * LEASE + 1.0)
    except TimeoutError:
        raise AssertionError(
            f"task {task_id} still {await _stored(server, task_id)} two leases after the fault"
        ) from None


async def test_a_task_whose_last_write_failed_is_taken_over_not_left_running(
    redis_standalone: RedisServer, proxy: TcpProxy
) -> None:
    """Redis goes away while the agent works: the task's outcome cannot be stored and the client
    is told UNAVAILABLE. The gateway lives on; the task is stored ``dispatched``. Its lease must
    not be renewed forever by a gateway that no longer runs it."""

    async def agent(request: Any) -> dict[str, str]:
        proxy.refuse()  # Redis unreachable from here until the test lets it back
        return {"done": "yes"}

    gateway = Gateway(proxy, agent)
    await gateway.start()
    try:
        request = TaskRequest(text="write it down", constraints={"action": "write"})
        with pytest.raises(AgencyError):
            await gateway.agency.submit(request)
        assert await _stored(redis_standalone, request.task_id) is TaskState.DISPATCHED
        proxy.accept()
        state = await _stops_within_two_leases(redis_standalone, request.task_id)
        assert state is TaskState.INTERRUPTED
        outcome = await gateway.agency.cancel(request.task_id, reason="the client gave up")
        assert outcome.state is TaskState.CANCELED
    finally:
        proxy.accept()
        await gateway.close()


async def test_a_write_applied_whose_reply_was_lost_does_not_leave_the_task_running(
    redis_standalone: RedisServer, proxy: TcpProxy
) -> None:
    """The save before the dispatch reaches Redis, its reply does not (the connection drops):
    the client retries it on a new connection. The task must still end (completed, or
    interrupted and then cancelable), never stay ``dispatched`` with no lease."""
    calls = 0

    async def agent(request: Any) -> dict[str, str]:
        nonlocal calls
        calls += 1
        return {"done": "yes"}

    gateway = Gateway(proxy, agent)
    await gateway.start()
    try:
        request = TaskRequest(text="write it down", constraints={"action": "write"})
        cut = proxy.cut_after(b'"state":"dispatched"')
        with contextlib.suppress(AgencyError):  # told an error: the task must stop in Redis all the same
            await gateway.agency.submit(request)
        assert cut.is_set(), "the proxy never saw the dispatch's save"
        state = await _stops_within_two_leases(redis_standalone, request.task_id)
        if state is TaskState.INTERRUPTED:
            outcome = await gateway.agency.cancel(request.task_id, reason="the client gave up")
            assert outcome.state is TaskState.CANCELED
        else:
            assert state is TaskState.COMPLETED and calls == 1
    finally:
        await gateway.close()
