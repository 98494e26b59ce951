"""A gateway on Redis keeps working past 20 leases: the test that would have caught the index expiry.

Issue 24: with Redis storage and no fault at all, every Submit was refused ("no capability is
registered for it") from ten leases after start: ``RedisCatalog.heartbeat`` renewed the entry
keys but the ``idx:*`` sets kept the TTL they got at registration (10 x the lease). No test ran
that long. Here one ``agency serve`` process on the test Redis runs with a 1 s lease for more
than 20 leases (twice that expiry), under a trickle of work, and everything that lives by a
lease or a TTL is used at the start and again at the end:

* keep-alive: an agent the gateway hosts (renewed by the gateway) and a remote worker's agent
  (renewed by the worker's heartbeats through the gateway) are both live and routable;
* the catalog's indexes: queries by action, tag and name still find both, and Submit routes to
  each by action;
* sessions: a session opened at the start is recalled by a task of the same session at the end
  (its ``task.submitted`` names the context it started with);
* mailboxes: a message sent at the start is still there to pull at the end, and a new one is
  delivered.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from gateway_processes import (
    REDIS_URL,
    GatewayProcess,
    redis_definition,
    start_gateway,
    start_worker,
    write_definition,
)

from middleware.audit.wal_reader import WalLogReader
from middleware.client import AgencyClient
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.tasks import TaskState

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).resolve().parent  # fleet_agents.py
LEASE = 1.0
LEASES = 21  # past 20: twice the ten leases after which the index sets used to expire


async def _routed(client: AgencyClient, action: str, *, session: str = "", task_id: str = "") -> str:
    """Submit a task for ``action``; the agent that did it (the outcome must be completed)."""
    outcome = await client.submit(
        f"twenty leases: {action}",
        constraints={"action": action},
        session_id=session,
        task_id=task_id,
    )
    assert outcome.state is TaskState.COMPLETED, outcome
    (step,) = outcome.steps
    return step.agent


async def test_everything_on_a_lease_still_works_past_twenty_leases(
    tmp_path: Path, redis_client, redis_prefix: str
) -> None:
    alice, bob = AgentCredentials.generate("alice"), AgentCredentials.generate("bob")
    definition = redis_definition(
        redis_prefix,
        storage={
            "backend": "redis",
            "redis_url": REDIS_URL,
            "key_prefix": redis_prefix,
            "lease_seconds": LEASE,
        },
        agents=[
            {
                "agent": "fleet_agents:work",
                "contract": {
                    "name": "hosted",
                    "can_do": ["hosted_work"],
                    "tags": ["twenty"],
                    "slo_latency_ms": 5000,
                },
            }
        ],
        messaging={"agents": [alice.enrollment(), bob.enrollment()], "flows": ["alice > bob"]},
    )
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateway: GatewayProcess = await start_gateway(config, "gw-20", tmp_path, pythonpath=[HERE])
    worker = None
    try:
        worker = await start_worker(
            "fleet_agents:work",
            {"name": "remote", "can_do": ["remote_work"], "tags": ["twenty"], "slo_latency_ms": 5000},
            [gateway.address],
            tmp_path,
            pythonpath=[HERE],
            heartbeat=LEASE / 4,
        )
        async with (
            AgencyClient(gateway.address, timeout=30) as client,
            MessagingClient(alice, gateway.address) as sender,
            MessagingClient(bob, gateway.address) as receiver,
        ):
            # --- at the start: everything is used once
            started = time.monotonic()
            assert await _routed(client, "hosted_work") == "hosted@1.0.0"
            assert await _routed(client, "remote_work", session="s-20", task_id="first-20") == "remote@1.0.0"
            kept = await sender.send("bob", {"sent": "at the start"})

            # --- past 20 leases, a trickle of work (a measurement window: the time is the test)
            done_late = {"hosted": 0, "remote": 0}
            while time.monotonic() - started < LEASES * LEASE:
                late = time.monotonic() - started > 11 * LEASE  # past the old expiry
                for action, name in (("hosted_work", "hosted"), ("remote_work", "remote")):
                    assert await _routed(client, action) == f"{name}@1.0.0"
                    done_late[name] += late
                await asyncio.sleep(LEASE / 2)
            assert done_late["hosted"] and done_late["remote"]

            # --- after 21 leases: keep-alive, the indexes, the session and the mailbox
            for key in ("hosted@1.0.0", "remote@1.0.0"):
                entry = await client.catalog.get(key)
                assert not entry.stale, entry  # renewed: by the gateway, by the worker
            assert {e.key for e in await client.catalog.query(tags=["twenty"])} == {
                "hosted@1.0.0",
                "remote@1.0.0",
            }
            assert [e.key for e in await client.catalog.query(action="remote_work")] == ["remote@1.0.0"]
            assert [e.key for e in await client.catalog.query(name="hosted")] == ["hosted@1.0.0"]
            for key in await redis_client.keys(redis_prefix + "*idx:*"):
                assert await redis_client.pttl(key) > 0, key  # every index set still has a life ahead
            agent = await _routed(client, "remote_work", session="s-20", task_id="last-20")
            assert agent == "remote@1.0.0"
            fresh = await sender.send("bob", {"sent": "at the end"})
            received = await receiver.pull(max_messages=10, wait=5)
            assert {m.message.message_id for m in received} == {kept.message_id, fresh.message_id}
            assert await receiver.ack(received) == 2
        assert time.monotonic() - started > LEASES * LEASE
    finally:
        if worker is not None and worker.proc.returncode is None:
            worker.proc.terminate()
            await worker.proc.wait()
        assert await gateway.stop() == 0, gateway.output()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
    # the last task of the session started with what the first one established
    submitted = {
        r.task_id: r.detail
        for _, r in WalLogReader(tmp_path / "gw-20" / "audit").records()
        if r.event_type == "task.submitted"
    }
    assert "session_context" not in submitted["first-20"]
    assert submitted["last-20"]["session_context"], submitted["last-20"]
