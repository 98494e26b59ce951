"""``agency serve`` with the protocols section: a real gateway process serving A2A and MCP next
to gRPC, with a remote A2A agent (a real SDK server in this test) registered from the file."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_message_text
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from gateway_processes import start_gateway, write_definition
from mcp import Client

from middleware.errors import InvalidInput
from middleware.server.settings import load_definition

from .test_a2a_agent import CONTRACT, RemoteAgent

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ecommerce.yaml"


def definition(remote_url: str) -> dict[str, object]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["server"] = {"address": "127.0.0.1:0", "metrics_address": ""}
    data["protocols"] = {
        "a2a": {"address": "127.0.0.1:0"},
        "mcp": {"address": "127.0.0.1:0"},
        "a2a_agents": [{"card_url": remote_url, "contract": CONTRACT}],
    }
    return data


async def test_a_gateway_process_serves_a2a_and_mcp_and_calls_a_remote_a2a_agent(tmp_path: Path):
    async with RemoteAgent() as remote:
        config = write_definition(tmp_path / "agency.yaml", definition(remote.url))
        gateway = await start_gateway(config, "n1", tmp_path)
        try:
            out = gateway.output()
            a2a_url = re.search(r"A2A on (http://\S+)", out).group(1)  # type: ignore[union-attr]
            mcp_url = re.search(r"MCP \(Streamable HTTP\) on (http://\S+)", out).group(1)  # type: ignore[union-attr]
            assert "A2A agent quote_agent@1.0.0" in out

            async with httpx.AsyncClient(timeout=60) as http:
                client = await create_client(a2a_url, ClientConfig(streaming=False, httpx_client=http))
                msg = Message(
                    role=Role.ROLE_USER,
                    message_id=uuid.uuid4().hex,
                    parts=[Part(text="Predict next quarter's stock price for ACME.")],
                )
                events = [e async for e in client.send_message(SendMessageRequest(message=msg))]
                await client.close()
            refused = events[-1].task
            assert refused.status.state == TaskState.TASK_STATE_REJECTED
            assert "stock_prediction" in get_message_text(refused.status.message)

            async with Client(mcp_url) as mcp:
                tools = {t.name for t in (await mcp.list_tools()).tools}
                quoted = await mcp.call_tool("stock_quote", {"symbol": "ACME"})
            assert {"warranty_claim", "stock_quote"} <= tools
            assert not quoted.is_error and quoted.structured_content == {"symbol": "ACME", "price": 101.5}
        finally:
            assert await gateway.stop() == 0
    assert len(remote.executor.seen) == 1  # the MCP call reached the remote A2A agent, governed


def test_the_protocols_section_is_checked_by_path(tmp_path: Path):
    bad = {
        "version": 1,
        "protocols": {
            "a2a": {"address": "nowhere"},
            "a2a_agents": [{"card_url": "ftp://x", "contract": CONTRACT, "card_sha256": "abc"}],
        },
    }
    with pytest.raises(InvalidInput) as info:
        load_definition(write_definition(tmp_path / "bad.yaml", bad))
    fields = [p.field for p in info.value.problems]
    assert fields == [
        "protocols.a2a.address",
        "protocols.a2a_agents[0].card_url",
        "protocols.a2a_agents[0].card_sha256",
    ]


async def test_serve_demo_with_the_a2a_flag_serves_the_card(tmp_path: Path):
    import asyncio
    import os
    import signal
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "middleware", "serve", "--demo", "--address", "127.0.0.1:0"),
        *("--metrics-address", "", "--data-dir", str(tmp_path), "--a2a", "127.0.0.1:0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    assert proc.stdout is not None
    try:
        said = ""
        while "serving on" not in said:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, f"the gateway exited:\n{said}"
            said += line.decode()
        found = re.search(r"A2A on (http://\S+)", said)
        assert found, said
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{found.group(1)}/.well-known/agent-card.json")).json()
        assert "warranty_claim" in {s["id"] for s in card["skills"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.communicate()
        assert proc.returncode == 0
