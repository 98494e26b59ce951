"""A remote worker's AgentWorker/Invoke takes the same abuse as the gateway's RPCs: random
bytes, random well-formed InvokeRequests, truncated and oversized messages end in a client
error status or an answer -- never INTERNAL or UNKNOWN -- and the worker keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st
from proto_strategies import CLIENT_ERRORS, FUZZ, messages_of
from served_in_thread import ServedInThread

from middleware import Agency, AgentReply, AgentRequest
from middleware._proto.agency.v1 import worker_pb2
from middleware.agents import AgentRegistry
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.server import MAX_MESSAGE_BYTES
from middleware.server.remote_agent import RemoteAgent
from middleware.server.worker import Worker

INVOKE = "/agency.v1.AgentWorker/Invoke"
CONTRACT = {
    "name": "fuzz_echo",
    "version": "1.0.0",
    "can_do": ["echo"],
    "slo_latency_ms": 2000,
    "input_schema": {"type": "object"},
    "output_schema": {"type": "object"},
}


async def echo(request: AgentRequest) -> AgentReply:
    return AgentReply(output={"echo": request.message.content})


class Served(ServedInThread):
    """A gateway and one worker on their own loop in a thread."""

    def __init__(self) -> None:
        super().__init__()

    async def start(self) -> None:
        self.agency = Agency(agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
        self.gateway = build_server(self.agency, "127.0.0.1:0")
        await self.gateway.start()
        self.worker = Worker(echo, CONTRACT, gateway=f"127.0.0.1:{self.gateway.port}")
        await self.worker.start()

    async def stop(self) -> None:  # type: ignore[override]
        await self.worker.stop()
        await self.gateway.stop(0)
        await self.agency.close()


@pytest.fixture(scope="module")
def worker_channel() -> Iterator[grpc.Channel]:
    with (
        Served() as served,
        grpc.insecure_channel(served.worker.endpoint, options=[("grpc.max_send_message_length", -1)]) as ch,
    ):
        yield ch
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _invoke(ch: grpc.Channel, payload: bytes) -> Any:
    try:
        return ch.unary_unary(INVOKE)(payload, timeout=15)
    except grpc.RpcError as err:
        assert err.code() in CLIENT_ERRORS, f"{err.code()} {err.details()}"
        return err.code()


@FUZZ
@given(payload=st.binary(max_size=300))
def test_random_bytes(worker_channel: grpc.Channel, payload: bytes) -> None:
    _invoke(worker_channel, payload)


@FUZZ
@given(data=st.data())
def test_random_well_formed_invocations(worker_channel: grpc.Channel, data: st.DataObject) -> None:
    request = data.draw(messages_of(worker_pb2.InvokeRequest.DESCRIPTOR))
    _invoke(worker_channel, request.SerializeToString())


def test_undecodable_and_oversized_invocations_are_refused(worker_channel: grpc.Channel) -> None:
    assert _invoke(worker_channel, b"\xff\xff\xff") is grpc.StatusCode.INVALID_ARGUMENT
    oversized = b"\x0a\xff\xff\xff\x07" + b"x" * (MAX_MESSAGE_BYTES + 10)
    assert _invoke(worker_channel, oversized) is grpc.StatusCode.RESOURCE_EXHAUSTED
