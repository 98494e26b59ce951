"""The W3C trace context reaches a remote worker's agent in gRPC metadata, with no OTel
involved: the gateway sends ``AgentRequest.traceparent`` and the worker passes it on."""

from __future__ import annotations

from typing import Any

import grpc
from worker_requests import ECHO, agent_request

from middleware import AgentRequest
from middleware._proto.agency.v1 import worker_pb2_grpc
from middleware.server.grpc_api.worker_servicer import AgentWorkerServicer
from middleware.server.remote_agent import RemoteAgent

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class MetadataRecorder(grpc.aio.ServerInterceptor):
    """Keeps the invocation metadata of every call, as the worker received it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        self.calls.append({k: v for k, v in details.invocation_metadata or () if isinstance(v, str)})
        return await continuation(details)


async def test_the_traceparent_travels_in_metadata_and_reaches_the_agent_unchanged() -> None:
    seen: list[str] = []

    async def agent(request: AgentRequest) -> dict[str, str]:
        seen.append(request.traceparent)
        return {"ok": "yes"}

    recorder = MetadataRecorder()
    server = grpc.aio.server(interceptors=[recorder])
    worker_pb2_grpc.add_AgentWorkerServicer_to_server(  # type: ignore[no-untyped-call]
        AgentWorkerServicer({ECHO.key: (ECHO, agent)}), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    remote = RemoteAgent(f"127.0.0.1:{port}")
    try:
        reply = await remote(agent_request(traceparent=TRACEPARENT))
        assert reply.output == {"ok": "yes"}
        assert recorder.calls[-1]["traceparent"] == TRACEPARENT  # on the wire
        assert "tracestate" not in recorder.calls[-1]  # no span here, so no vendor state either
        assert seen == [TRACEPARENT]  # and handed to the agent as it came

        # no trace context: nothing is sent, and the agent gets none (not the worker's own)
        await remote(agent_request(traceparent=""))
        assert "traceparent" not in recorder.calls[-1]
        assert seen[-1] == ""
    finally:
        await remote.aclose()
        await server.stop(0)
