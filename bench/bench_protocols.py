"""Overhead of the A2A and MCP bindings over a native gRPC Submit, as ratios in one run.

One governed agency (the durable ``WalAuditLog``, an echo agent behind a contract, a goal
verified on every task) is served at once over gRPC, A2A (JSON-RPC and HTTP+JSON) and MCP
(Streamable HTTP), all on loopback. Each binding's client sends the same governed task
(same text, input, goal) with the official SDK client — the grpc stubs, ``a2a-sdk``'s
client, ``mcp``'s ``Client`` on one session — first one at a time (latency), then with
``--concurrency`` callers (throughput), the bindings interleaved in rounds so that the load of
a shared machine weighs on all of them alike. The in-process ``Agency.submit`` is the floor.
Clients run in a separate process from the servers (no shared GIL); every figure is
relative to gRPC in the same run, so the ratios carry across machines, the absolute
numbers do not. ``a2a_sdk_bare`` is not the gateway: it is the A2A SDK's own server answering
the same message with an echo and no governance at all (issue 32 compares the governed gRPC
Submit with it: target >= 3x its throughput).

    python -m bench.bench_protocols                      # 300 calls per binding, 8 callers
    python -m bench.bench_protocols --calls 1000 --concurrency 16 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ECHO_CONTRACT = {
    "name": "echo",
    "version": "1.0.0",
    "description": "Echoes its input.",
    "can_do": ["echo"],
    "slo_latency_ms": 5000,
    "input_schema": {
        "type": "object",
        "required": ["payload"],
        "properties": {"payload": {"type": "string"}},
    },
    "output_schema": {
        "type": "object",
        "required": ["payload"],
        "properties": {"payload": {"type": "string"}},
    },
}
ECHO_GOAL = {
    "id": "GOAL_ECHO",
    "description": "The payload comes back.",
    "verification_steps": [{"kind": "json_path", "path": "$.payload"}],
    "timeout_seconds": 30,
}
TEXT = "echo this payload"
BINDINGS = ("grpc", "a2a_jsonrpc", "a2a_rest", "mcp_http")
# Not a binding of the gateway: the A2A SDK's own server, no governance (issue 32's comparison).
SDK_BARE = "a2a_sdk_bare"
SDK_TARGET = 3.0  # issue 32: the governed gRPC Submit >= 3x the bare A2A SDK server's throughput


# ------------------------------------------------------------------ servers (this process)
async def serve(data_dir: Path, ready: Any, stop: Any) -> None:
    from middleware import Agency
    from middleware.audit import WalAuditLog
    from middleware.server.grpc_api import build_server
    from middleware.server.protocols.a2a_server import build_a2a_app
    from middleware.server.protocols.common import HttpServer
    from middleware.server.protocols.mcp_server import build_mcp_http_app

    async def echo(request: Any) -> Any:
        return request.input

    agency = Agency(audit=WalAuditLog(data_dir / "audit", "bench"))
    await agency.register(ECHO_CONTRACT, echo)
    agency.register_goal(ECHO_GOAL)
    grpc_server = build_server(agency, "127.0.0.1:0")
    await grpc_server.start()
    a2a = HttpServer(None, "127.0.0.1:0", name="a2a")
    a2a.set_app(build_a2a_app(agency, url=a2a.url))
    await a2a.start()
    mcp = HttpServer(build_mcp_http_app(agency), "127.0.0.1:0", name="mcp")
    await mcp.start()
    bare = HttpServer(None, "127.0.0.1:0", name="a2a-sdk")
    bare.set_app(bare_a2a_app(bare.url))
    await bare.start()
    ready.send(
        {
            "grpc": f"127.0.0.1:{grpc_server.port}",
            "a2a": a2a.url,
            "mcp": f"{mcp.url}/mcp",
            "a2a_sdk": bare.url,
        }
    )
    await asyncio.get_running_loop().run_in_executor(None, stop.recv)
    await bare.stop()
    await mcp.stop()
    await a2a.stop()
    await grpc_server.stop(0)
    await agency.close()


def bare_a2a_app(url: str) -> Any:
    """The A2A SDK's own server with no governance at all (issue 32's comparison): the SDK's
    request handler, task store and JSON-RPC routes around an executor that answers the message's
    data part as the task's artifact and completes it."""
    from a2a.helpers import get_data_parts, new_data_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Task,
        TaskState,
        TaskStatus,
    )
    from starlette.applications import Starlette

    class EchoExecutor(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            message, task_id, context_id = context.message, context.task_id or "", context.context_id or ""
            assert message is not None
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )
            updater = TaskUpdater(event_queue, task_id, context_id)
            data = get_data_parts(message.parts)
            await updater.add_artifact([new_data_part(data[0] if data else {})], name="output")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError("the echo is not cancellable")

    card = AgentCard(
        name="echo",
        description="Echoes the message's data part (no governance).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{url}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes its input.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])


def _serve(data_dir: str, ready: Any, stop: Any) -> None:
    asyncio.run(serve(Path(data_dir), ready, stop))


# ------------------------------------------------------------------ clients (a child process)
Call = Callable[[], Awaitable[None]]


async def grpc_caller(address: str, payload: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import grpc

    from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    request = agency_pb2.SubmitRequest(
        text=TEXT,
        goal_id="GOAL_ECHO",
        constraints_json=json.dumps({"action": "echo"}),
        input_json=json.dumps({"payload": payload}),
        user_id="bench",
    )

    async def call() -> None:
        outcome = await stub.Submit(request, timeout=30)
        assert outcome.state == "completed", outcome.state

    return call, channel.close


async def a2a_caller(url: str, payload: str, binding: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
    from google.protobuf.json_format import ParseDict
    from google.protobuf.struct_pb2 import Struct, Value

    http = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=256))
    config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=[binding])
    client = await create_client(url, config)
    meta = Struct()
    meta.update({"agency": {"goal_id": "GOAL_ECHO", "skill": "echo", "user_id": "bench"}})
    data = ParseDict({"payload": payload}, Value())

    async def call() -> None:
        message = Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=[Part(text=TEXT), Part(data=data)],
            metadata=meta,
        )
        last = None
        async for event in client.send_message(SendMessageRequest(message=message)):
            last = event
        assert last is not None and last.task.status.state == TaskState.TASK_STATE_COMPLETED

    async def close() -> None:
        await client.close()
        await http.aclose()

    return call, close


async def mcp_caller(url: str, payload: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from contextlib import AsyncExitStack

    from mcp import Client

    stack = AsyncExitStack()
    client = await stack.enter_async_context(Client(url))
    meta = {"agency/governance": {"goal_id": "GOAL_ECHO", "user_id": "bench"}}

    async def call() -> None:
        result = await client.call_tool("echo", {"payload": payload}, meta=meta)  # type: ignore[arg-type]
        assert not result.is_error, result.content

    return call, stack.aclose


async def _burst(call: Call, calls: int, concurrency: int) -> float:
    """``calls`` calls by ``concurrency`` callers; the seconds it took."""
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def measure_all(
    callers: dict[str, Call], calls: int, concurrency: int, rounds: int = 10
) -> dict[str, dict[str, float]]:
    """Every binding, interleaved in ``rounds`` (a shared machine's load then weighs on all alike):
    sequential calls for latency, then bursts of ``concurrency`` callers for throughput."""
    for call in callers.values():
        for _ in range(min(30, calls)):  # warm-up: connections, sessions, compiled schemas
            await call()
    latencies: dict[str, list[float]] = {name: [] for name in callers}
    busy: dict[str, float] = dict.fromkeys(callers, 0.0)
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for name, call in callers.items():
            for _ in range(per_round):
                t0 = time.perf_counter()
                await call()
                latencies[name].append((time.perf_counter() - t0) * 1000)
        for name, call in callers.items():
            busy[name] += await _burst(call, per_round, concurrency)
    results = {}
    for name, values in latencies.items():
        values.sort()
        results[name] = {
            "p50_ms": statistics.median(values),
            "p99_ms": values[min(len(values) - 1, int(len(values) * 0.99))],
            "mean_ms": statistics.fmean(values),
            "throughput_per_s": per_round * rounds / busy[name],
        }
    return results


async def run_clients(addresses: dict[str, str], calls: int, concurrency: int, size: int) -> dict[str, Any]:
    payload = "x" * size
    made = [
        ("grpc", await grpc_caller(addresses["grpc"], payload)),
        ("a2a_jsonrpc", await a2a_caller(addresses["a2a"], payload, "JSONRPC")),
        ("a2a_rest", await a2a_caller(addresses["a2a"], payload, "HTTP+JSON")),
        ("mcp_http", await mcp_caller(addresses["mcp"], payload)),
        ("a2a_sdk_bare", await a2a_caller(addresses["a2a_sdk"], payload, "JSONRPC")),
    ]
    try:
        return await measure_all({name: call for name, (call, _) in made}, calls, concurrency)
    finally:
        for name, (_, close) in reversed(made):
            try:
                await close()
            except Exception as exc:  # a session torn down at exit changes no figure
                print(f"closing the {name} client: {type(exc).__name__}", file=sys.stderr)


def _clients(addresses: dict[str, str], calls: int, concurrency: int, size: int, conn: Any) -> None:
    conn.send(asyncio.run(run_clients(addresses, calls, concurrency, size)))
    conn.close()


async def in_process(calls: int, concurrency: int, size: int, data_dir: Path) -> dict[str, float]:
    """The floor: ``Agency.submit`` with no transport."""
    from middleware import Agency
    from middleware.audit import WalAuditLog

    async def echo(request: Any) -> Any:
        return request.input

    agency = Agency(audit=WalAuditLog(data_dir / "floor", "bench"))
    await agency.register(ECHO_CONTRACT, echo)
    agency.register_goal(ECHO_GOAL)
    request = {
        "text": TEXT,
        "goal_id": "GOAL_ECHO",
        "constraints": {"action": "echo"},
        "input": {"payload": "x" * size},
    }

    async def call() -> None:
        assert (await agency.submit(request)).state.value == "completed"

    try:
        return (await measure_all({"in_process": call}, calls, concurrency))["in_process"]
    finally:
        await agency.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300, help="calls per binding and phase (default 300)")
    parser.add_argument(
        "--concurrency", type=int, default=8, help="callers in the throughput phase (default 8)"
    )
    parser.add_argument("--size", type=int, default=256, help="payload size in characters (default 256)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="agency-bench-protocols-") as tmp:
        ready_parent, ready_child = ctx.Pipe()
        stop_parent, stop_child = ctx.Pipe()
        server = ctx.Process(target=_serve, args=(tmp, ready_child, stop_child))
        server.start()
        addresses = ready_parent.recv()
        out_parent, out_child = ctx.Pipe()
        clients = ctx.Process(
            target=_clients, args=(addresses, args.calls, args.concurrency, args.size, out_child)
        )
        clients.start()
        out_child.close()  # the child's end: a client process that dies ends recv() (EOFError)
        try:
            results = out_parent.recv()
        finally:
            clients.join()
            stop_parent.send("stop")
            server.join()
        results["in_process"] = asyncio.run(in_process(args.calls, args.concurrency, args.size, Path(tmp)))
    base = results["grpc"]
    for figures in results.values():
        figures["p50_vs_grpc"] = figures["p50_ms"] / base["p50_ms"]
        figures["throughput_vs_grpc"] = figures["throughput_per_s"] / base["throughput_per_s"]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"{args.calls} calls per binding, payload {args.size} chars, "
        f"{args.concurrency} callers for throughput\n"
    )
    print(f"{'binding':<13}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'p50 x gRPC':>12}{'calls/s x gRPC':>16}")
    for name in ("in_process", *BINDINGS, SDK_BARE):
        f = results[name]
        print(
            f"{name:<13}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['throughput_per_s']:>10.0f}"
            f"{f['p50_vs_grpc']:>12.2f}{f['throughput_vs_grpc']:>16.2f}"
        )
    vs_sdk = base["throughput_per_s"] / results[SDK_BARE]["throughput_per_s"]
    verdict = "met" if vs_sdk >= SDK_TARGET else "MISSED"
    print(
        f"\ngoverned gRPC Submit vs the A2A SDK's own server with no governance ({SDK_BARE}, same echo, "
        f"its official client): {vs_sdk:.2f}x the throughput "
        f"(issue 32 target >= {SDK_TARGET:.0f}x: {verdict})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
