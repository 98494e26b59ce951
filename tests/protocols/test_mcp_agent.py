"""An MCP server's tools as agents behind contracts: real MCP servers (the SDK's MCPServer over
Streamable HTTP, and ``agency mcp serve`` on stdio) called by the gateway through the SDK client."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from middleware import Agency, FailureType, InvalidInput, TaskState
from middleware.audit.record import AuditEventType
from middleware.server.protocols.common import HttpServer
from middleware.server.protocols.mcp_agent import describe_tool, register_mcp_tool

pytestmark = pytest.mark.asyncio

CONTRACT = {
    "name": "order_lookup",
    "can_do": ["order_lookup"],
    "slo_latency_ms": 5000,
    "input_schema": {"type": "object", "required": ["order_id"]},
    "output_schema": {"type": "object", "required": ["order_id", "status"]},
}


class OrderServer:
    """An MCP server with one tool, on Streamable HTTP on port 0."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.mcp = MCPServer("orders")

        @self.mcp.tool(description="Look an order up by id.")
        def lookup_order(order_id: str) -> dict[str, Any]:
            self.calls.append(order_id)
            if order_id == "broken":
                raise ValueError("order database unreachable")
            return {"order_id": order_id, "status": "shipped"}

        self.sessions = 0  # MCP sessions opened (initialize, or server/discover on 2026-07-28)
        app = self.mcp.streamable_http_app()

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            if b'"method":"initialize"' in body or b'"method":"server/discover"' in body:
                self.sessions += 1
            replay = [{"type": "http.request", "body": body, "more_body": False}]

            async def replayed() -> Any:
                return replay.pop() if replay else await receive()

            await app(scope, replayed, send)

        self.server = HttpServer(counting, "127.0.0.1:0", name="orders")
        self.url = f"{self.server.url}/mcp"

    def change_tool(self) -> None:
        """The same tool name, now promising more (a new optional argument)."""
        self.mcp.remove_tool("lookup_order")

        @self.mcp.tool(description="Look an order up by id, or refund it.")
        def lookup_order(order_id: str, refund: bool = False) -> dict[str, Any]:
            self.calls.append(order_id)
            return {"order_id": order_id, "status": "refunded" if refund else "shipped"}

    async def __aenter__(self) -> OrderServer:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()


async def lookup(agency: Agency, order_id: str):
    return await agency.submit(
        {
            "text": "look up my order",
            "constraints": {"action": "order_lookup"},
            "input": {"order_id": order_id},
        }
    )


async def test_an_mcp_tool_serves_a_governed_step():
    agency = Agency()
    async with OrderServer() as orders:
        await register_mcp_tool(agency, orders.url, "lookup_order", CONTRACT)
        out = await lookup(agency, "o-1")
        broken = await lookup(agency, "broken")
        await agency.close()  # the kept MCP session too
    assert out.state is TaskState.COMPLETED and out.output == {"order_id": "o-1", "status": "shipped"}
    assert (
        broken.failures[0].type is FailureType.TOOL_ERROR
        and "tool lookup_order failed" in broken.failures[0].detail
    )
    assert (await agency.catalog.get("order_lookup@1.0.0")).contract.endpoint == orders.url


async def test_calls_share_one_mcp_session_per_server():
    """Issue 26: outbound MCP opened a new session per call (0.3-0.6 s under load, turning slow
    answers into TOOL_TIMEOUT). One session per server now, shared by concurrent calls."""
    import asyncio

    agency = Agency()
    async with OrderServer() as orders:
        await register_mcp_tool(agency, orders.url, "lookup_order", CONTRACT)
        registered = orders.sessions  # registration lists the tool in a session of its own
        outs = [await lookup(agency, f"o-{i}") for i in range(3)]
        outs += await asyncio.gather(*(lookup(agency, f"p-{i}") for i in range(5)))
        assert all(o.state is TaskState.COMPLETED for o in outs), [o.failures for o in outs]
        assert orders.sessions - registered == 1  # eight calls, one session
        await agency.close()


async def test_an_unreachable_mcp_server_is_tool_unavailable():
    agency = Agency()
    async with OrderServer() as orders:
        await register_mcp_tool(agency, orders.url, "lookup_order", CONTRACT)
    out = await lookup(agency, "o-1")  # the server is gone
    await agency.close()
    assert out.failures[0].type is FailureType.TOOL_UNAVAILABLE


async def test_a_changed_tool_definition_is_caught_not_trusted():
    agency = Agency()
    async with OrderServer() as orders:
        await register_mcp_tool(agency, orders.url, "lookup_order", CONTRACT)
        orders.change_tool()
        out = await lookup(agency, "o-2")
        await agency.close()
    assert out.failures[0].type is FailureType.TOOL_UNAVAILABLE
    assert "definition changed" in out.failures[0].detail
    assert orders.calls == []  # the changed tool was never called
    flags = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.CONTRACT_REVIEW]
    assert [(f.rule, f.actors.agent) for f in flags] == [("mcp_tool_changed", "order_lookup@1.0.0")]


async def test_registration_refuses_a_definition_other_than_the_reviewed_one():
    agency = Agency()
    async with OrderServer() as orders:
        definition, digest = await describe_tool(orders.url, "lookup_order")
        assert definition["inputSchema"]["required"] == ["order_id"]
        orders.change_tool()
        with pytest.raises(InvalidInput) as info:
            await register_mcp_tool(
                agency, orders.url, "lookup_order", CONTRACT, tool_sha256=digest, where="m"
            )
        with pytest.raises(InvalidInput) as missing:
            await register_mcp_tool(agency, orders.url, "no_such_tool", CONTRACT)
    assert info.value.field == "m.tool_sha256"
    assert missing.value.field == "tool"
    assert await agency.catalog.all() == []


async def test_a_stdio_mcp_server_tool_behind_a_contract(tmp_path: Path):
    """The gateway's own governed tools, served on stdio by a subprocess, as a capability here."""
    command = [
        str(Path(sys.executable).parent / "agency"),
        "mcp",
        "serve",
        "--demo",
        "--data-dir",
        str(tmp_path),
    ]
    agency = Agency()
    contract = {"name": "remote_interest", "can_do": ["compound_interest"], "slo_latency_ms": 60_000}
    await register_mcp_tool(agency, command, "compound_interest", contract)
    out = await agency.submit({"text": "compound interest", "constraints": {"action": "compound_interest"}})
    assert out.state is TaskState.COMPLETED, out.failures
    assert out.output == {"monthly_payment": 0.0}
    await agency.close()  # the stdio server it kept running


async def test_a_time_critical_answer_keeps_the_ttl_the_mcp_server_offers(tmp_path: Path):
    """Finance is time-critical (docs/semantics.md): a governed MCP server offers the answer's
    TTL in _meta["agency/governance"] and the adapter keeps it; a server that offers none
    gets no invented one (the answer is refused naming the field)."""
    command = [
        str(Path(sys.executable).parent / "agency"),
        "mcp",
        "serve",
        "--demo",
        "--data-dir",
        str(tmp_path),
    ]
    agency = Agency()
    contract = {
        "name": "remote_interest",
        "tags": ["finance"],
        "can_do": ["compound_interest"],
        "slo_latency_ms": 60_000,
    }
    await register_mcp_tool(agency, command, "compound_interest", contract)
    out = await agency.submit({"text": "compound interest", "constraints": {"action": "compound_interest"}})
    assert out.state is TaskState.COMPLETED, out.failures
    step = out.steps[0]
    # the demo's finance answer is fresh for 300 s; what is left of it when the server answered
    assert step.fresh_until is not None and step.finished_at is not None
    assert step.started_at < step.fresh_until <= step.finished_at + timedelta(seconds=300)
    await agency.close()  # the stdio server it kept running

    bare = Agency()
    async with OrderServer() as orders:
        await register_mcp_tool(bare, orders.url, "lookup_order", {**CONTRACT, "tags": ["finance"]})
        refused = await lookup(bare, "o-1")
        await bare.close()
    assert refused.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert "metadata.freshness_ttl" in refused.failures[0].detail


async def test_cli_mcp_tool_prints_the_definition_and_its_pin(capsys):
    import asyncio
    import json

    from middleware.cli import main

    async with OrderServer() as orders:
        assert (
            await asyncio.to_thread(main, ["mcp", "tool", "--url", orders.url, "--tool", "lookup_order"]) == 0
        )
        _, digest = await describe_tool(orders.url, "lookup_order")
    printed = json.loads(capsys.readouterr().out)
    assert printed["tool_sha256"] == digest and printed["tool"]["name"] == "lookup_order"


async def test_an_unreachable_mcp_server_is_named_with_the_real_cause() -> None:
    import socket

    from middleware.errors import Unavailable

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/mcp"
    with pytest.raises(Unavailable) as info:
        await describe_tool(url, "lookup_order")
    assert url in info.value.message and "TaskGroup" not in info.value.message
