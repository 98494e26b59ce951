"""Protocol defects found with outside clients (issue 26), each tried again with the client that
found it: the official A2A JavaScript SDK (tests/js/a2a_client.mjs) and the MCP TypeScript SDK
(tests/js/mcp_client.mjs), run with node against the gateway's real HTTP listeners."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from middleware import Agency, AgentReply
from middleware.server.http_limits import HttpLimits
from middleware.server.protocols.a2a_server import build_a2a_app
from middleware.server.protocols.common import HttpServer
from middleware.testing import ScriptedAgent

pytestmark = pytest.mark.asyncio

JS = Path(__file__).resolve().parents[1] / "js"
NODE = shutil.which("node") or "node"


async def node(script: str, *args: str) -> Any:
    """Run ``tests/js/<script>`` with node (off this loop: the servers run on it) and parse its line."""
    proc = await asyncio.create_subprocess_exec(
        NODE, str(JS / script), *args, cwd=JS, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


async def a2a(url: str, step: dict[str, Any], token: str = "") -> Any:
    return await node("a2a_client.mjs", url, token, json.dumps(step))


async def hedging_agency() -> Agency:
    agency = Agency()
    unsure = ScriptedAgent(*[AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5)] * 5)
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    return agency


async def serve_a2a(agency: Agency) -> tuple[HttpServer, str]:
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url))
    await server.start()
    return server, server.url


async def test_a_task_answered_elsewhere_is_finished_in_a2a_too() -> None:
    """Issue 26: a task answered through gRPC Resume or MCP resume_task stayed INPUT_REQUIRED in
    A2A GetTask forever, and a follow-up then got -32602 instead of -32004."""
    agency = await hedging_agency()
    server, url = await serve_a2a(agency)
    try:
        waiting = await a2a(
            url, {"op": "send", "text": "plan my trip", "metadata": {"agency": {"skill": "plan_trip"}}}
        )
        assert waiting["state"] == "TASK_STATE_INPUT_REQUIRED", waiting
        # answered through another door: gRPC Resume and MCP resume_task both call this
        done = await agency.resume(waiting["id"], answer="accept")
        assert done.state.value == "completed"
        seen = await a2a(url, {"op": "get", "id": waiting["id"]})
        assert seen["state"] == "TASK_STATE_COMPLETED", seen
        assert seen["artifacts"][0]["name"] == "output"
        assert seen["artifacts"][0]["parts"][0]["value"] == {"plan": "probably plan A"}
        listed = await a2a(url, {"op": "list", "status": "TASK_STATE_COMPLETED"})
        assert [t["id"] for t in listed["tasks"]] == [waiting["id"]]
        late = await a2a(url, {"op": "send", "text": "retry", "taskId": waiting["id"]})
        # -32004, which the JS SDK raises as UnsupportedOperationError: the task is finished
        assert late["error"]["name"] == "UnsupportedOperationError", late
        assert late["error"]["reason"] == "UNSUPPORTED_OPERATION"
    finally:
        await server.stop()


async def test_list_tasks_validates_its_params() -> None:
    """Issue 26: ListTasks with an invalid ``status`` returned every task, unfiltered; unknown
    params were accepted (A2A 1.0 §3.3.2: validate all input)."""
    agency = await hedging_agency()
    server, url = await serve_a2a(agency)
    try:
        await a2a(url, {"op": "send", "text": "plan my trip", "metadata": {"agency": {"skill": "plan_trip"}}})

        def rpc(params: dict[str, Any]) -> dict[str, Any]:
            return {"op": "raw", "body": {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": params}}

        bad = await a2a(url, rpc({"status": "TASK_STATE_BOGUS"}))
        assert bad["body"]["error"]["code"] == -32602 and "status" in bad["body"]["error"]["message"]
        unknown = await a2a(url, rpc({"stauts": "TASK_STATE_COMPLETED"}))
        assert unknown["body"]["error"]["code"] == -32602 and "stauts" in unknown["body"]["error"]["message"]
        ok = await a2a(url, rpc({"status": "TASK_STATE_INPUT_REQUIRED"}))
        assert len(ok["body"]["result"]["tasks"]) == 1
        none = await a2a(url, rpc({"status": "TASK_STATE_COMPLETED"}))
        assert none["body"]["result"].get("tasks", []) == []
        typo = await a2a(
            url,
            {
                "op": "raw",
                "body": {
                    "jsonrpc": "2.0",
                    "id": 8,
                    "method": "GetTask",
                    "params": {"id": "x", "historyLenght": 2},
                },
            },
        )
        assert typo["body"]["error"]["code"] == -32602
    finally:
        await server.stop()


# ---------------------------------------------------------------- MCP (TypeScript SDK)
async def serve_mcp(agency: Agency, *, limits: HttpLimits | None = None) -> tuple[HttpServer, str]:
    from middleware.server.protocols.mcp_server import build_mcp_http_app

    server = HttpServer(build_mcp_http_app(agency), "127.0.0.1:0", name="mcp", limits=limits)
    await server.start()
    return server, f"{server.url}/mcp"


async def mcp(url: str, step: dict[str, Any]) -> Any:
    return await node("mcp_client.mjs", url, "", json.dumps(step))


async def test_an_unknown_mcp_tool_is_a_protocol_error() -> None:
    """Issue 26: calling an unknown tool returned a tool result with isError, not JSON-RPC -32602
    (MCP 2025-11-25)."""
    agency = await hedging_agency()
    server, url = await serve_mcp(agency)
    try:
        got = await mcp(url, {"op": "call", "name": "no_such_tool", "arguments": {}})
    finally:
        await server.stop()
    assert got.get("error", {}).get("code") == -32602, got
    assert "no_such_tool" in got["error"]["message"]


async def test_the_elicitation_form_uses_titled_options_not_enum_names() -> None:
    """Issue 26: the clarification form used the deprecated ``enumNames``."""
    agency = await hedging_agency()
    server, url = await serve_mcp(agency)
    try:
        got = await mcp(url, {"op": "call", "name": "plan_trip", "arguments": {}, "elicit": "accept"})
    finally:
        await server.stop()
    (form,) = got["elicited"]
    answer = form["requestedSchema"]["properties"]["answer"]
    assert "enumNames" not in answer and "enum" not in answer
    assert [o["const"] for o in answer["oneOf"]] == ["accept", "retry"]
    assert all(o["title"] for o in answer["oneOf"])
    assert not got["result"].get("isError"), got
    assert got["result"]["structuredContent"] == {"plan": "probably plan A"}


async def test_concurrent_mcp_calls_all_succeed() -> None:
    """Issue 26: an intermittent "fetch failed" under concurrent load (2 in ~400 calls)."""
    agency = Agency()
    await agency.register(
        {"name": "echo", "can_do": ["echo"], "output_schema": {"type": "object"}},
        ScriptedAgent(*[{"echo": "ok"}] * 500),
    )
    # the per-source cap is not what this test is about (tests/security/test_http_floods.py is):
    # on a starved loop closed keep-alive connections are released late and 32 in flight from
    # one address could reach the default 64
    server, url = await serve_mcp(
        agency, limits=HttpLimits(max_connections_per_source=4096, max_connections=4096)
    )
    try:
        got = await mcp(
            url, {"op": "concurrent", "name": "echo", "arguments": {}, "calls": 200, "clients": 4}
        )
    finally:
        await server.stop()
    assert got["failures"] == [] and got["ok"] == 200, got
