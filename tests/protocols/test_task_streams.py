"""The A2A and MCP bindings stream the same task events as gRPC ``WatchTask``: A2A
``SendStreamingMessage`` and ``SubscribeToTask`` (status updates), MCP progress notifications.
Official SDK clients, a slow agent released by the test."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_message_text
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, SubscribeToTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict
from mcp import Client

from middleware import Agency
from middleware.server.protocols.a2a_server import build_a2a_app
from middleware.server.protocols.common import HttpServer
from middleware.server.protocols.mcp_server import build_mcp_http_app
from middleware.task_events import OUTCOME
from middleware.testing import GatedAgent

pytestmark = pytest.mark.timeout(60)

JS = Path(__file__).resolve().parent.parent / "js"


async def slow_agency() -> tuple[Agency, GatedAgent]:
    agency = Agency()
    agent = GatedAgent({"answer": 42}, progress=[("token", {"text": "thinking hard"})])
    contract = {"name": "slow", "can_do": ["think"], "slo_latency_ms": 60_000, "stream_progress": True}
    await agency.register(contract, agent)
    return agency, agent


def a2a_message(text: str) -> Message:
    msg = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    msg.metadata.update({"agency": {"skill": "think"}})
    return msg


def told(updates: list[Any]) -> list[int]:
    """The seqs of the task events the A2A status updates told (one each, or carried)."""
    seqs: list[int] = []
    for update in updates:
        meta = MessageToDict(update.metadata)
        seqs += [int(e["seq"]) for e in meta.get("agency_events", [])]
        if "agency_event" in meta:
            seqs.append(int(meta["agency_event"]["seq"]))
    return sorted(seqs)


async def test_a2a_streaming_tells_every_event_of_the_task_once_with_streamed_text():
    agency, agent = await slow_agency()
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url))
    await server.start()
    updates: list[Any] = []
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(server.url, ClientConfig(streaming=True, httpx_client=http))
            try:
                async for event in client.send_message(
                    SendMessageRequest(message=a2a_message("please think"))
                ):
                    if event.HasField("status_update"):
                        updates.append(event.status_update)
                        if event.status_update.status.message.parts:
                            agent.release()  # the agent answers once its text reached the client
            finally:
                await client.close()
    finally:
        await server.stop()
        await agency.close()
    task_id = updates[-1].task_id
    assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
    texts = [
        get_message_text(u.status.message) for u in updates if u.status.state == TaskState.TASK_STATE_WORKING
    ]
    assert "thinking hard" in texts
    events = [e async for e in agency.watch(task_id)]
    assert told(updates) == [e.seq for e in events if e.type != OUTCOME]  # each event once, in order
    working = [MessageToDict(u.metadata)["agency_state"] for u in updates[:-1]]
    assert working[:2] == ["routing", "dispatched"]


async def test_a2a_subscribe_to_task_follows_a_running_task_submitted_elsewhere_to_its_end():
    agency, agent = await slow_agency()
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url))
    await server.start()
    try:
        # submitted through another binding (as gRPC would): this A2A server never saw it
        accepted = await agency.submit(
            {"text": "please think", "constraints": {"action": "think"}}, wait=False
        )
        await agent.entered.wait()
        got: list[Any] = []
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(server.url, ClientConfig(streaming=True, httpx_client=http))
            try:
                async for event in client.subscribe(SubscribeToTaskRequest(id=accepted.task_id)):
                    got.append(event)
                    if len(got) == 1:
                        agent.release()  # it runs on while the subscriber follows
            finally:
                await client.close()
    finally:
        await server.stop()
        await agency.close()
    assert got[0].HasField("task") and got[0].task.id == accepted.task_id
    assert got[0].task.status.state == TaskState.TASK_STATE_WORKING
    updates = [e.status_update for e in got if e.HasField("status_update")]
    assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update for e in got if e.HasField("artifact_update")]
    assert [MessageToDict(p)["data"] for a in artifacts for p in a.artifact.parts] == [{"answer": 42}]


async def test_mcp_progress_notifications_tell_each_event_of_the_task_as_it_runs():
    agency, agent = await slow_agency()
    server = HttpServer(build_mcp_http_app(agency), "127.0.0.1:0", name="mcp")
    await server.start()
    progress: list[tuple[float, str]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message or ""))
        if message and "writes: thinking hard" in message:
            agent.release()  # answers once the client was told the agent is at work

    try:
        async with Client(f"{server.url}/mcp") as client:
            done = await client.call_tool("think", {}, progress_callback=on_progress)
            plain = asyncio.create_task(client.call_tool("think", {}))  # no token: no notifications
            result = await asyncio.wait_for(plain, 30)
    finally:
        await server.stop()
        await agency.close()
    assert not done.is_error and done.structured_content == {"answer": 42}
    assert not result.is_error
    values = [v for v, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)  # increasing, as MCP requires
    messages = [m for _, m in progress]
    assert messages[0].startswith("accepted: think")
    assert any("routed to slow@1.0.0" in m for m in messages)
    assert any("dispatched to slow@1.0.0" in m for m in messages)
    assert messages[-1] == "outcome completed"
    assert len(progress) == int(values[-1])  # every event of the task, none left out


@pytest.mark.skipif(shutil.which("node") is None, reason="node 20 is installed by .ci/run")
async def test_the_official_typescript_mcp_client_gets_the_task_events_as_progress():
    agency, agent = await slow_agency()
    server = HttpServer(build_mcp_http_app(agency), "127.0.0.1:0", name="mcp")
    await server.start()
    node = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "mcp_progress.mjs"),
        f"{server.url}/mcp",
        "think",
        "{}",
        stdout=asyncio.subprocess.PIPE,
        cwd=str(JS),
    )
    assert node.stdout is not None
    lines: list[dict[str, Any]] = []
    try:
        while line := await asyncio.wait_for(node.stdout.readline(), 30):
            lines.append(json.loads(line))
            assert "error" not in lines[-1], lines[-1]
            if "writes: thinking hard" in lines[-1].get("message", ""):
                agent.release()
        assert await asyncio.wait_for(node.wait(), 30) == 0
    finally:
        if node.returncode is None:
            node.kill()
            await node.wait()
        await server.stop()
        await agency.close()
    progress = [line for line in lines if "progress" in line]
    assert [p["progress"] for p in progress] == list(range(1, len(progress) + 1))
    assert progress[-1]["message"] == "outcome completed"
    assert lines[-1]["result"] == {"isError": False, "structuredContent": {"answer": 42}}


async def test_a2a_subscribe_refuses_a_task_that_ended_or_is_unknown():
    from a2a.utils.errors import A2AError

    agency, agent = await slow_agency()
    agent.release()
    done = await agency.submit({"text": "please think", "constraints": {"action": "think"}})
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url))
    await server.start()
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(server.url, ClientConfig(streaming=True, httpx_client=http))
            try:
                for task_id in (done.task_id, "task_nope"):
                    with pytest.raises(A2AError):
                        async for _ in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                            pass
            finally:
                await client.close()
    finally:
        await server.stop()
        await agency.close()
