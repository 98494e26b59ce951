"""Every binding benefits: the user's words alone complete the warranty case over A2A and MCP,
driven by the official JavaScript SDKs (tests/js) and the Python SDKs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import uuid
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_data_parts
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from mcp import Client

from middleware import Agency
from middleware.access import Principal
from middleware.access import Role as AgencyRole
from middleware.demo import build_demo_agency, clock_on, demo_config
from middleware.server.protocols.a2a_server import build_a2a_app
from middleware.server.protocols.common import HttpServer
from middleware.server.protocols.mcp_server import build_mcp_http_app

JS = Path(__file__).resolve().parents[1] / "js"
SENTENCE = "我上周买的手机屏幕碎了，要换新"
#: The customer's chat client authenticates as the customer (the order system knows u_789).
TOKENS = {hashlib.sha256(b"tok-u789").hexdigest(): Principal(name="u_789", role=AgencyRole.CLIENT)}


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def agency():
    agency = await build_demo_agency(
        Agency(config=demo_config(), clock=clock_on(date(2026, 6, 15)), sleep=no_sleep)
    )
    yield agency
    await agency.close()


async def node(script: str, *args: str) -> list[dict[str, Any]]:
    """Run ``tests/js/<script>`` with node; its JSON lines."""
    executable = shutil.which("node")
    assert executable, "node (20+) is needed: .ci/run installs it"
    proc = await asyncio.create_subprocess_exec(
        executable,
        script,
        *args,
        cwd=JS,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


async def served(app: Any) -> HttpServer:
    server = HttpServer(app, "127.0.0.1:0", name="binding")
    await server.start()
    return server


async def test_a2a_js_sdk_sends_only_the_words_and_answers_the_one_question(agency):
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url, token_hashes=None))
    await server.start()
    try:
        asked, done = await node("a2a_sentence.mjs", server.url, SENTENCE, "", "PhoneX")
    finally:
        await server.stop()
    # an anonymous chat: the order system does not know the phone, so the gateway asks for it
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    question = asked["status"]["message"]["parts"][0]["text"]
    assert question == "为继续办理（warranty），请提供：device_model (answer with: device_model)"
    assert done["status"]["state"] == "TASK_STATE_COMPLETED" and done["id"] == asked["id"]
    [output] = [p["data"] for a in done["artifacts"] for p in a["parts"]]
    assert output["model"] == "PhoneX" and output["tracking_number"] == "EXP123456"
    record = await agency.tasks.get(done["id"])
    assert record.goal is not None and record.verdict is not None and record.verdict.passed
    assert record.plan_source == "goal:GOAL_WARRANTY_001"


async def test_a2a_python_sdk_only_the_words_of_a_known_customer_complete_at_once(agency):
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url, token_hashes=TOKENS))
    await server.start()
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=SENTENCE)])
    try:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-u789"}, timeout=60) as http:
            config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"])
            client = await create_client(server.url, config)
            try:
                events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            finally:
                await client.close()
    finally:
        await server.stop()
    task = events[-1].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [outcome] = get_data_parts(list(task.status.message.parts))
    assert outcome["goal_id"] == "GOAL_WARRANTY_001" and outcome["goal_verdict"]["passed"] is True
    assert [r["step"] for r in outcome["routing"]] == ["intake", "order", "warranty", "shipping", "reply"]


async def test_mcp_ts_sdk_governed_task_with_only_text_fills_the_asked_field(agency):
    server = await served(build_mcp_http_app(agency))
    try:
        [reply] = await node(
            "mcp_sentence.mjs", f"{server.url}/mcp", SENTENCE, json.dumps({"device_model": "PhoneX"})
        )
    finally:
        await server.stop()
    [form] = reply["asked"]  # the gateway asked through MCP elicitation, with the contract's type
    assert form["requestedSchema"]["properties"] == {
        "device_model": {"type": "string", "title": "device_model"}
    }
    result = reply["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["model"] == "PhoneX" and result["structuredContent"]["fee"] == 0


async def test_mcp_python_sdk_governed_task_with_only_text_of_a_known_customer(agency):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = await served(build_mcp_http_app(agency, token_hashes=TOKENS))
    try:
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer tok-u789"}, timeout=60) as http,
            Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client,
        ):
            done = await client.call_tool("governed_task", {"text": SENTENCE})
    finally:
        await server.stop()
    assert not done.is_error, done.content
    assert done.structured_content["tracking_number"] == "EXP123456"
    record = await agency.tasks.get(done.meta["agency/governance"]["task_id"])
    assert record.request.steps == [] and record.plan_source == "goal:GOAL_WARRANTY_001"
