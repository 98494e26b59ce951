"""The public client over two gateway processes on one Redis: kill -9 the one it uses mid-run.

The next call succeeds on the other gateway; the Submit whose connection broke is found again
by its task id: on the survivor it is ``dispatched`` until the dead gateway's lease expires,
then ``interrupted`` (naming the dead node), and can be canceled there. Also: Cancel over gRPC
and the CLI (owner, admin, another client; a finished task), and ``--address`` lists.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gateway_processes import REDIS_URL, GatewayProcess, redis_definition, start_gateways, write_definition

from middleware.audit.wal_reader import WalLogReader
from middleware.client import AgencyClient
from middleware.errors import FailedPrecondition, NotFound, PermissionDenied, Unavailable
from middleware.tasks import TaskState

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent  # replica_agents.py
LEASE = 1.0
AGENTS = [
    {"agent": "replica_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}},
    {
        "agent": "replica_agents:held",
        "contract": {"name": "held", "can_do": ["hold"], "slo_latency_ms": 20000},
    },
    {"agent": "replica_agents:unsure", "contract": {"name": "unsure", "can_do": ["plan"]}},
]
TOKENS = {
    "alice": "alice-token-0123456789",
    "mallory": "mallory-token-0123456789",
    "ops": "ops-token-0123456789",
}


def _token_file(path: Path) -> Path:
    roles = {"alice": "client", "mallory": "client", "ops": "admin"}
    path.write_text(
        "".join(
            f"{name} {hashlib.sha256(t.encode()).hexdigest()} {roles[name]}\n" for name, t in TOKENS.items()
        )
    )
    return path


@pytest.fixture
async def pair(tmp_path: Path, redis_client, redis_prefix: str) -> AsyncIterator[list[GatewayProcess]]:
    definition = redis_definition(
        redis_prefix,
        agents=AGENTS,
        storage={
            "backend": "redis",
            "redis_url": REDIS_URL,
            "key_prefix": redis_prefix,
            "lease_seconds": LEASE,
        },
    )
    definition["server"]["auth_tokens"] = str(_token_file(tmp_path / "tokens"))
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateways = await start_gateways(config, ["gw-a", "gw-b"], tmp_path, pythonpath=[HERE])
    try:
        yield gateways
    finally:
        for g in gateways:
            await g.stop()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


async def _until(condition, *, within: float, what: str):
    deadline = time.monotonic() + within
    while True:
        value = await condition()
        if value:
            return value
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_kill_9_of_the_clients_gateway_mid_submit(pair, redis_client, redis_prefix) -> None:
    a, b = pair
    release = f"{redis_prefix}release"
    async with AgencyClient([a.address, b.address], token=TOKENS["alice"], timeout=30) as client:
        first = await client.submit("do the work", constraints={"action": "work"})
        assert first.state is TaskState.COMPLETED

        held = asyncio.ensure_future(
            client.submit(
                "hold on",
                constraints={"action": "hold"},
                input={"redis_url": REDIS_URL, "release": release},
                task_id="task-held-1",
            )
        )

        async def in_flight() -> bool:
            try:
                return (await client.get_task("task-held-1")).state is TaskState.DISPATCHED
            except NotFound:
                return False

        await _until(in_flight, within=20, what="the held task never reached its agent")

        async def load() -> float:
            decision = await client.route("hold on", {"action": "hold"})
            return next(c.load for c in decision.candidates if c.agent == "held@1.0.0")

        assert await load() == 1.0  # the call in flight on a
        a.proc.kill()  # kill -9 the gateway the client uses, with the call in flight
        with pytest.raises(Unavailable) as info:
            await held
        assert info.value.details["task_id"] == "task-held-1"

        after = await client.submit("do the work", constraints={"action": "work"})  # the next call: on b
        assert after.state is TaskState.COMPLETED
        assert client._channel.address == b.address  # type: ignore[attr-defined]

        async def interrupted():
            outcome = await client.get_task("task-held-1")
            return outcome if outcome.state is TaskState.INTERRUPTED else None

        found = await _until(interrupted, within=LEASE * 4 / 3 + 20, what="never taken over")
        assert found.pending["node"] == "gw-a" and found.pending["agent"] == "held@1.0.0"
        assert await load() == 0.0  # released by the takeover: it no longer weighs on ranking
        with pytest.raises(FailedPrecondition) as refused:  # held may have acted: not run again
            await client.resume("task-held-1")
        assert "provide_output" in refused.value.message
        canceled = await client.cancel("task-held-1", reason="gateway lost")
        assert canceled.state is TaskState.CANCELED
    assert await b.stop() == 0  # its own audit log names the dead node
    records = [
        r for _, r in WalLogReader(b.log.parent / "gw-b" / "audit").records() if r.task_id == "task-held-1"
    ]
    [taken] = [r for r in records if r.event_type == "task.interrupted"]
    assert taken.node == "gw-b" and taken.detail["node"] == "gw-a" and taken.rule == "lease_expired"
    assert [r.outcome for r in records if r.event_type == "task.resumed"] == ["cancel"]


async def test_cancel_over_grpc_and_the_cli_owner_admin_and_others(pair, tmp_path: Path) -> None:
    from middleware.cli import main

    a, b = pair
    async with AgencyClient(a.address, token=TOKENS["alice"], timeout=30) as alice:
        waiting = await alice.submit("plan the rollout", constraints={"action": "plan"})
        assert waiting.state is TaskState.INPUT_REQUIRED
        done = await alice.submit("do the work", constraints={"action": "work"})
    async with AgencyClient(b.address, token=TOKENS["mallory"], timeout=30) as mallory:
        with pytest.raises(PermissionDenied):
            await mallory.cancel(waiting.task_id)
    async with AgencyClient([b.address, a.address], token=TOKENS["alice"], timeout=30) as alice:
        with pytest.raises(FailedPrecondition) as info:
            await alice.cancel(done.task_id)
        assert "is completed" in info.value.message

    token = tmp_path / "ops.token"
    token.write_text(TOKENS["ops"])
    argv = ["task", "cancel", waiting.task_id, "--reason", "stale", "--token-file", str(token)]
    argv += ["--address", f"127.0.0.1:1,{b.address}"]  # the first address answers nothing
    assert await asyncio.to_thread(main, argv) == 0
    assert await asyncio.to_thread(main, argv) == 0  # canceled again: the same outcome
    async with AgencyClient(a.address, token=TOKENS["alice"], timeout=30) as alice:
        outcome = await alice.get_task(waiting.task_id)
    assert outcome.state is TaskState.CANCELED and "ops" in outcome.reason and "stale" in outcome.reason
