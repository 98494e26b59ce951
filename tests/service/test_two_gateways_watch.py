"""Long tasks across replicas: two ``agency serve`` processes on one Redis.

A task submitted without waiting to one gateway runs there while its events are followed from
the other; a follower that drops its stream mid-task reconnects to the first and misses nothing;
a grpc-js client (Node, from the .proto files alone) submits on one and follows on the other;
either gateway lists it; SIGTERM lets a running task finish within the grace time and ends one
that does not as interrupted.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_processes import REDIS_URL, GatewayProcess, redis_definition, start_gateways, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent  # replica_agents.py
JS = HERE.parent / "js"

AGENTS = [
    {
        "agent": "replica_agents:held_talking",
        "contract": {
            "name": "held_talking",
            "can_do": ["hold"],
            "slo_latency_ms": 60000,
            "stream_progress": True,
        },
    }
]


class Replica:
    def __init__(self, gateway: GatewayProcess) -> None:
        self.gateway = gateway
        self.channel = grpc.aio.insecure_channel(gateway.address)
        self.agency = agency_pb2_grpc.AgencyServiceStub(self.channel)


@pytest.fixture
async def replicas(tmp_path: Path, redis_client, redis_prefix: str) -> AsyncIterator[tuple[Replica, Replica]]:
    definition = redis_definition(redis_prefix, agents=AGENTS)
    definition["server"]["grace_seconds"] = 1.0  # a task not done within it is interrupted
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateways = await start_gateways(config, ["gw-a", "gw-b"], tmp_path, pythonpath=[HERE])
    a, b = Replica(gateways[0]), Replica(gateways[1])
    try:
        yield a, b
    finally:
        for r in (a, b):
            await r.channel.close()
        codes = [await g.stop() for g in gateways]
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
    assert codes == [0, 0], [g.output() for g in gateways]


def held(release: str, **extra: Any) -> agency_pb2.SubmitRequest:
    return agency_pb2.SubmitRequest(
        text="hold on",
        constraints_json='{"action": "hold"}',
        input_json=json.dumps({"redis_url": REDIS_URL, "release": release}),
        **extra,
    )


async def test_a_task_runs_on_one_gateway_while_the_other_serves_its_stream_and_a_reconnect_misses_nothing(
    replicas, redis_client, redis_prefix
) -> None:
    a, b = replicas
    release = f"{redis_prefix}release"
    accepted = await a.agency.Submit(held(release, return_immediately=True), timeout=10)
    assert accepted.state == "submitted"  # answered while the agent waits for the release

    first = []
    call = b.agency.WatchTask(agency_pb2.WatchTaskRequest(task_id=accepted.task_id), timeout=30)
    async for event in call:  # a's events, live, from b
        first.append(event)
        if event.type == "agent.progress":
            break
    call.cancel()  # the follower goes away mid-task
    assert {e.node for e in first if e.audit_index} == {"gw-a"}
    assert "".join(json.loads(e.detail_json)["data"]["text"] for e in first if e.type == "agent.progress")

    await redis_client.rpush(release, "go")
    rest = [
        e
        async for e in a.agency.WatchTask(  # reconnects to the other replica after its last event
            agency_pb2.WatchTaskRequest(task_id=accepted.task_id, after_seq=first[-1].seq), timeout=30
        )
    ]
    whole = [
        e async for e in b.agency.WatchTask(agency_pb2.WatchTaskRequest(task_id=accepted.task_id), timeout=30)
    ]
    assert [e.id for e in first + rest] == [e.id for e in whole]
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))
    assert whole[-1].type == "task.outcome" and whole[-1].final.state == "completed"
    assert json.loads(whole[-1].final.output_json) == {"released": True}
    kinds = [e.type for e in whole]
    assert kinds.index("agent.dispatch") < kinds.index("agent.progress") < kinds.index("agent.result")

    for replica in (a, b):  # either lists it (the task store is shared)
        page = await replica.agency.ListTasks(agency_pb2.ListTasksRequest(states=["completed"]), timeout=10)
        assert [t.task_id for t in page.tasks] == [accepted.task_id]


@pytest.mark.skipif(shutil.which("node") is None, reason="node 20 is installed by .ci/run")
async def test_a_grpc_js_client_submits_on_one_gateway_and_follows_the_task_on_the_other(
    replicas, redis_client, redis_prefix
) -> None:
    a, b = replicas
    release = f"{redis_prefix}release-js"
    request = {
        "text": "hold on",
        "constraints_json": '{"action": "hold"}',
        "input_json": json.dumps({"redis_url": REDIS_URL, "release": release}),
    }
    node = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "watch_task.mjs"),
        a.gateway.address,
        b.gateway.address,
        json.dumps(request),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(JS),
    )
    assert node.stdout is not None
    lines: list[dict[str, Any]] = []
    try:
        while True:
            line = await asyncio.wait_for(node.stdout.readline(), 30)
            if not line:
                break
            lines.append(json.loads(line))
            assert "error" not in lines[-1], lines[-1]
            if lines[-1].get("event", {}).get("type") == "agent.progress":
                await redis_client.rpush(release, "go")  # the agent answers once Node saw it at work
        assert await asyncio.wait_for(node.wait(), 30) == 0
    finally:
        if node.returncode is None:
            node.kill()
            await node.wait()
    assert lines[0]["submitted"]["state"] == "submitted"
    events = [line["event"] for line in lines[1:]]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "task.submitted" and events[-1]["type"] == "task.outcome"
    assert lines[-1]["final_state"] == "completed"
    task_id = lines[0]["submitted"]["task_id"]
    python_view = [
        e async for e in b.agency.WatchTask(agency_pb2.WatchTaskRequest(task_id=task_id), timeout=30)
    ]
    assert [e["id"] for e in events] == [e.id for e in python_view]  # one stream, whatever the language


async def test_sigterm_interrupts_a_background_task_still_running_after_the_grace_time(
    replicas, redis_client, redis_prefix
) -> None:
    a, b = replicas
    stuck = await a.agency.Submit(held(f"{redis_prefix}never", return_immediately=True), timeout=10)
    async for event in b.agency.WatchTask(agency_pb2.WatchTaskRequest(task_id=stuck.task_id), timeout=30):
        if event.type == "agent.progress":
            break  # running on a
    a.gateway.proc.send_signal(15)  # SIGTERM: a drains for its 1 s grace time, then interrupts
    interrupted: dict[str, Any] = {}
    async for event in b.agency.WatchTask(agency_pb2.WatchTaskRequest(task_id=stuck.task_id), timeout=30):
        if event.type == "task.interrupted":  # followed on b: the end of a's part is in the stream
            interrupted = json.loads(event.detail_json)
            assert event.node == "gw-a"
            break
    assert interrupted["reason"] == "the gateway shut down before the task ended"
    assert await a.gateway.stop() == 0
    assert "1 background task(s) still running after 1 s: interrupting them" in a.gateway.output()


async def test_sigterm_waits_for_a_background_task_released_within_the_grace_time(
    tmp_path: Path, redis_client, redis_prefix
) -> None:
    definition = redis_definition(redis_prefix, agents=AGENTS)
    definition["server"]["grace_seconds"] = 30.0
    config = write_definition(tmp_path / "agency.yaml", definition)
    (gateway,) = await start_gateways(config, ["gw-c"], tmp_path, pythonpath=[HERE])
    channel = grpc.aio.insecure_channel(gateway.address)
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    try:
        release = f"{redis_prefix}drain"
        accepted = await stub.Submit(held(release, return_immediately=True), timeout=10)
        async for event in stub.WatchTask(agency_pb2.WatchTaskRequest(task_id=accepted.task_id), timeout=30):
            if event.type == "agent.progress":
                break
        gateway.proc.send_signal(15)  # SIGTERM while the agent works
        deadline = asyncio.get_running_loop().time() + 20
        while "shutting down" not in gateway.output():
            assert asyncio.get_running_loop().time() < deadline, gateway.output()
            await asyncio.sleep(0.02)
        await redis_client.rpush(release, "go")  # within the grace time
        assert await gateway.stop() == 0
        from middleware.redis.task_store import RedisTaskStore

        stored = await RedisTaskStore(redis_client, prefix=redis_prefix).get(accepted.task_id)
        assert stored.state.value == "completed"  # it ended before the gateway stopped
    finally:
        await channel.close()
        await gateway.stop()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
