"""The sub-agent events of ``send_message`` reach a gRPC client through the task's event stream.

A governed agent (a contract with ``stream_progress``) runs a messaging conversation; the agents
it asks with ``send_message`` — and those they ask in turn — report ``turn_started``, what they
``ctx.emit``, ``turn_finished`` and their ``final`` answer. A client following the task over
gRPC (``WatchTask``) sees each of them once, in order, as ``agent.progress`` events of kind
``subagent``; none of them is audited as a task record.
"""

from __future__ import annotations

from typing import Any

import pytest

from middleware import Agency, AgentRequest
from middleware.client import AgencyClient
from middleware.messaging import Flows, Runtime, Turn
from middleware.server.grpc_api import build_server
from middleware.task_events import PROGRESS

pytestmark = pytest.mark.timeout(60)


async def test_send_message_sub_agent_events_are_followed_over_grpc() -> None:
    flows = Flows()
    lead, analyst, quant = flows.agent("lead"), flows.agent("analyst"), flows.agent("quant")
    _ = lead > analyst > quant
    runtime = Runtime(flows)

    async def lead_fn(turn: Turn) -> Any:
        return {"verdict": await turn.ctx.send_message("analyst", "risk of plan B?")}

    async def analyst_fn(turn: Turn) -> str:
        turn.ctx.emit("progress", {"percent": 50})
        figure = await turn.ctx.send_message("quant", "volatility?")
        return f"low (volatility {figure})"

    async def quant_fn(turn: Turn) -> str:
        turn.ctx.emit("progress", {"computing": "volatility"})
        return "0.2"

    await runtime.add_agent(lead, lead_fn)
    await runtime.add_agent(analyst, analyst_fn)
    await runtime.add_agent(quant, quant_fn)

    async def governed(request: AgentRequest) -> Any:  # the governed agent runs the conversation
        return await runtime.conversation("lead").user_turn(str(request.text))

    agency = Agency()
    contract = {"name": "lead", "can_do": ["assess"], "slo_latency_ms": 10_000, "stream_progress": True}
    await agency.register(contract, governed)
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    try:
        async with AgencyClient(f"127.0.0.1:{server.port}") as client:
            accepted = await client.submit("assess plan B", constraints={"action": "assess"}, wait=False)
            events = [e async for e in client.watch(accepted.task_id)]
    finally:
        await server.stop(0)
        await agency.close()
        await runtime.close()

    sub = [e.detail["data"] for e in events if e.type == PROGRESS and e.outcome == "subagent"]
    assert [(s["agent"], s["kind"]) for s in sub] == [
        ("analyst", "turn_started"),
        ("analyst", "progress"),
        ("quant", "turn_started"),
        ("quant", "progress"),
        ("quant", "turn_finished"),
        ("quant", "final"),
        ("analyst", "turn_finished"),
        ("analyst", "final"),
    ]
    assert sub[1]["data"] == {"percent": 50} and sub[5]["data"] == "0.2"
    assert sub[7]["data"] == "low (volatility 0.2)"
    quant_turn = sub[2]["run_id"]
    assert sub[2]["parent_run_id"] == sub[0]["run_id"] and sub[3]["run_id"] == quant_turn  # the call tree
    assert all(e.agent == "lead@1.0.0" and e.audit_index == 0 for e in events if e.type == PROGRESS)
    kinds = [e.type for e in events]
    assert kinds.index("agent.dispatch") < kinds.index(PROGRESS) and kinds[-1] == "task.outcome"
    assert events[-1].final is not None and events[-1].final.output == {"verdict": "low (volatility 0.2)"}
