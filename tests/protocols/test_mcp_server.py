"""Governed capabilities as MCP tools: the real mcp SDK client over Streamable HTTP and stdio."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from middleware import Agency, AgentReply
from middleware.access import Principal, Role
from middleware.demo import WARRANTY_GOAL, warranty_request
from middleware.server.protocols.common import HttpServer
from middleware.server.protocols.mcp_server import build_mcp_http_app
from middleware.testing import ScriptedAgent

pytestmark = pytest.mark.asyncio


async def serve(agency: Agency, tokens: dict[str, Principal] | None = None) -> tuple[HttpServer, str]:
    server = HttpServer(build_mcp_http_app(agency, token_hashes=tokens), "127.0.0.1:0", name="mcp")
    await server.start()
    return server, f"{server.url}/mcp"


def warranty_arguments() -> dict[str, Any]:
    req = warranty_request()
    return {
        "text": req.text,
        "goal_id": WARRANTY_GOAL.id,
        "input": req.input,
        "steps": [s.model_dump(exclude_defaults=True) for s in req.steps],
    }


async def test_tools_are_the_contracts_actions_with_their_input_schemas(demo_agency):
    server, url = await serve(demo_agency)
    try:
        async with Client(url) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    finally:
        await server.stop()
    assert {"governed_task", "resume_task", "warranty_claim", "ship_replacement", "compound_interest"} <= set(
        tools
    )
    assert "stock_prediction" not in tools
    warranty = tools["warranty_claim"]
    assert warranty.input_schema["required"] == ["user_id", "device_model"]  # the contract's input schema
    assert warranty.output_schema is not None and "in_warranty" in warranty.output_schema["properties"]
    assert "warranty_agent@2.1.0" in (warranty.description or "")


async def test_warranty_case_and_a_single_capability_are_governed_tasks(demo_agency):
    server, url = await serve(demo_agency)
    try:
        async with Client(url) as client:
            done = await client.call_tool("governed_task", warranty_arguments())
            # the warranty agent judges the context the greeting agent extracted (docs/semantics.md)
            claim = {"user_id": "u_1", "device_model": "PhoneX", "fault_type": "screen_shattered"}
            check = await client.call_tool("warranty_claim", claim)
            bad = await client.call_tool("warranty_claim", {"user_id": "u_1"})  # no device_model
    finally:
        await server.stop()
    assert not done.is_error and done.structured_content["tracking_number"] == "EXP123456"
    assert not check.is_error and check.structured_content["fault_type"] == "screen_shattered"
    assert bad.is_error  # refused before the agent runs: the contract's input schema
    texts = [record for _, record in demo_agency.audit.records() if record.event_type == "task.submitted"]
    assert len(texts) >= 2  # each call audited as a task


async def test_refusal_is_a_tool_error_with_the_reason(demo_agency):
    server, url = await serve(demo_agency)
    try:
        async with Client(url) as client:
            refused = await client.call_tool(
                "governed_task", {"text": "Predict next quarter's stock price for ACME."}
            )
    finally:
        await server.stop()
    assert refused.is_error
    assert refused.content[0].text.startswith("Refused:") and "stock_prediction" in refused.content[0].text
    assert refused.structured_content["state"] == "rejected"


async def test_a_clarification_comes_back_as_an_error_and_is_answered_with_resume_task():
    agency = Agency()
    unsure = ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5))
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    server, url = await serve(agency)
    try:
        async with Client(url) as client:
            waiting = await client.call_tool("plan_trip", {})
            task_id = waiting.structured_content["task_id"]
            done = await client.call_tool("resume_task", {"task_id": task_id, "answer": "accept"})
    finally:
        await server.stop()
    assert waiting.is_error and waiting.structured_content["state"] == "input_required"
    assert "resume_task" in waiting.content[0].text
    assert not done.is_error and done.structured_content == {"plan": "probably plan A"}


async def test_streamable_http_needs_a_known_bearer_token_and_records_the_client(demo_agency):
    tokens = {hashlib.sha256(b"tok-carol").hexdigest(): Principal(name="carol", role=Role.CLIENT)}
    server, url = await serve(demo_agency, tokens)
    try:
        async with httpx.AsyncClient() as http:
            assert (await http.post(url, json={})).status_code == 401
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer tok-carol"}) as http2,
            Client(streamable_http_client(url, http_client=http2)) as client,
        ):
            done = await client.call_tool("compound_interest", {"principal": 1000, "rate": 5})
    finally:
        await server.stop()
    assert not done.is_error
    record = await demo_agency.tasks.get(done.meta["agency/governance"]["task_id"])
    assert record.client == "carol" and record.request.provenance.source == "mcp:carol"


async def test_stdio_server_subprocess_lists_and_calls_governed_tools(tmp_path: Path):
    agency_bin = Path(sys.executable).parent / "agency"
    params = StdioServerParameters(
        command=str(agency_bin), args=["mcp", "serve", "--demo", "--data-dir", str(tmp_path)]
    )
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        done = await client.call_tool("governed_task", warranty_arguments())
        refused = await client.call_tool("governed_task", {"text": "Predict next quarter's stock price."})
    assert {"governed_task", "warranty_claim"} <= names
    assert not done.is_error and done.structured_content["tracking_number"] == "EXP123456"
    assert refused.is_error and refused.structured_content["state"] == "rejected"
    assert any((tmp_path / "audit").iterdir())  # audited in the subprocess's own log


async def test_a_clarification_is_asked_through_elicitation_when_the_client_has_it():
    import mcp_types as types

    agency = Agency()
    unsure = ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5))
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    asked: list[types.ElicitRequestParams] = []

    async def choose(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "accept"})

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    server, url = await serve(agency)
    try:
        async with Client(url, mode="legacy", elicitation_callback=choose) as client:
            done = await client.call_tool("plan_trip", {})
        async with Client(url, mode="legacy", elicitation_callback=decline) as client:
            waiting = await client.call_tool("plan_trip", {})
    finally:
        await server.stop()
    assert not done.is_error and done.structured_content == {"plan": "probably plan A"}
    [question] = asked
    assert [o["const"] for o in question.requested_schema["properties"]["answer"]["oneOf"]] == [
        "accept",
        "retry",
    ]
    assert (
        waiting.is_error and waiting.structured_content["state"] == "input_required"
    )  # declined: still waiting


async def test_another_clients_task_cannot_be_resumed_and_the_refusal_is_audited():
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    agency = Agency()
    unsure = ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5))
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    tokens = {
        hashlib.sha256(b"tok-carol").hexdigest(): Principal(name="carol", role=Role.CLIENT),
        hashlib.sha256(b"tok-dave").hexdigest(): Principal(name="dave", role=Role.CLIENT),
    }
    server, url = await serve(agency, tokens)
    try:
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer tok-carol"}) as carol_http,
            Client(streamable_http_client(url, http_client=carol_http)) as carol,
        ):
            waiting = await carol.call_tool("plan_trip", {})
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer tok-dave"}) as dave_http,
            Client(streamable_http_client(url, http_client=dave_http)) as dave,
        ):
            stolen = await dave.call_tool(
                "resume_task", {"task_id": waiting.structured_content["task_id"], "answer": "accept"}
            )
    finally:
        await server.stop()
    assert stolen.is_error and stolen.structured_content["error"] == "PERMISSION_DENIED"
    refusals = [
        r for _, r in agency.audit.records() if r.outcome == "refused" and r.rule == "PERMISSION_DENIED"
    ]
    assert len(refusals) == 1 and "dave" in str(refusals[0].detail)
    assert unsure.calls == 1


async def test_cancel_task_cancels_a_waiting_task_once_and_refuses_a_finished_one():
    agency = Agency()
    unsure = ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5))
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    server, url = await serve(agency)
    try:
        async with Client(url) as client:
            assert "cancel_task" in {t.name for t in (await client.list_tools()).tools}
            waiting = await client.call_tool("plan_trip", {})
            task_id = waiting.structured_content["task_id"]
            canceled = await client.call_tool("cancel_task", {"task_id": task_id, "reason": "not needed"})
            again = await client.call_tool("cancel_task", {"task_id": task_id})
            done = await client.call_tool("resume_task", {"task_id": task_id, "answer": "accept"})
            missing = await client.call_tool("cancel_task", {"task_id": "task-nope"})
    finally:
        await server.stop()
    assert not canceled.is_error and canceled.structured_content["state"] == "canceled"
    assert "not needed" in canceled.content[0].text
    assert not again.is_error and again.structured_content["state"] == "canceled"
    assert done.is_error and done.structured_content["error"] == "FAILED_PRECONDITION"
    assert missing.is_error and missing.structured_content["error"] == "NOT_FOUND"
    [record] = [r for _, r in agency.audit.records() if r.event_type == "task.resumed"]
    assert record.outcome == "cancel" and record.detail["why"] == "not needed"
