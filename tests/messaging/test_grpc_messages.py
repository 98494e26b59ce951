"""MessageService through a real gRPC server on port 0, over both transports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.messaging import (
    PostOffice,
    PostOfficeConfig,
    RateLimiter,
    SendOptions,
    generate_key,
    sign_message,
)
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.message_servicer import smf_from_pb, smf_to_pb

from .helpers import Agent, Env, register


@pytest.fixture
async def gateway(env: Env) -> AsyncIterator[tuple[PostOffice, messages_pb2_grpc.MessageServiceStub]]:
    po = env.office(
        config=PostOfficeConfig(visibility_timeout=5, max_payload_bytes=1024),
        rate_limiter=RateLimiter(rate=1, burst=5, clock=env.clock),
    )
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield po, messages_pb2_grpc.MessageServiceStub(channel)
    await channel.close()
    await server.stop(0)


def auth(agent: Agent) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {agent.token}"),)


def send_request(agent: Agent, receiver: str, content: Any, **kw: Any) -> messages_pb2.SendMessageRequest:
    msg = agent.message(receiver, content)
    options = SendOptions(
        kind="broadcast" if kw.get("broadcast") else "topic" if kw.get("topic") else "direct",
        topic=kw.get("topic", ""),
        ttl=kw.get("ttl_seconds"),
        trigger_turn=kw.get("trigger_turn", False),
        params=json.loads(kw["params_json"]) if kw.get("params_json") else {},
    )
    kw.setdefault("content_type", "application/json")
    return messages_pb2.SendMessageRequest(message=smf_to_pb(msg), signature=agent.sign(msg, options), **kw)


async def test_send_pull_ack_over_grpc(env: Env, gateway: Any) -> None:
    po, stub = gateway
    a, b = await register(po, "alice"), await register(po, "bob")
    req = send_request(a, "bob", {"task": "review"}, params_json=json.dumps({"priority": "high"}))
    resp = await stub.Send(req, metadata=auth(a))
    assert list(resp.recipients) == ["bob"] and resp.message_id == req.message.message_id

    pulled = await stub.Pull(messages_pb2.PullRequest(max_messages=5), metadata=auth(b))
    (got,) = pulled.messages
    assert json.loads(got.message.content_json) == {"task": "review"}
    assert got.delivery_count == 1 and json.loads(got.params_json) == {"priority": "high"}
    # The message survives the round trip bit for bit: its signature still verifies.
    assert got.signature == req.signature
    signed = SendOptions(params={"priority": "high"})
    assert po.identity.verify(smf_from_pb(got.message), got.signature, signed)
    ack = await stub.Ack(messages_pb2.AckRequest(receipts=[got.receipt]), metadata=auth(b))
    assert ack.acknowledged == 1
    assert not (await stub.Pull(messages_pb2.PullRequest(), metadata=auth(b))).messages


async def test_errors_map_to_status_codes_with_reasons(env: Env, gateway: Any) -> None:
    po, stub = gateway
    a, _ = await register(po, "alice"), await register(po, "bob")

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Pull(messages_pb2.PullRequest())
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    msg = a.message("bob", "pay 10")
    forged = messages_pb2.SendMessageRequest(
        message=smf_to_pb(msg), signature=sign_message(generate_key(), msg), content_type="text/plain"
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Send(forged, metadata=auth(a))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Send(send_request(a, "bob", "x" * 5000), metadata=auth(a))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(err.value.trailing_metadata() or ())
    assert trailers["agency-field"] == "content" and "sha256" in err.value.details()

    # burst 5: the forged send was charged (the limit comes before the costly signature check),
    # the oversized one was not (refused before the limits)
    for _ in range(4):
        await stub.Send(send_request(a, "bob", "hi"), metadata=auth(a))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Send(send_request(a, "bob", "hi"), metadata=auth(a))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(err.value.trailing_metadata() or ())["agency-retry-after-ms"] == "1000"


async def test_subscribe_streams_topic_copies_and_reports_drift(env: Env, gateway: Any) -> None:
    po, stub = gateway
    pub, sub = await register(po, "planner"), await register(po, "executor")
    stream = stub.Subscribe(messages_pb2.SubscribeRequest(topics=["task.execute"]), metadata=auth(sub))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await po.subscribers("task.execute"):  # the subscription is registered server-side
        assert loop.time() < deadline, "subscription never registered"
        await asyncio.sleep(0.01)

    resp = await stub.Send(
        send_request(pub, "task.execute", {"n": 1}, topic="task.execute"), metadata=auth(pub)
    )
    assert list(resp.recipients) == ["executor"]
    got = await asyncio.wait_for(stream.read(), 5)
    assert (
        got.kind == "topic"
        and got.topic == "task.execute"
        and json.loads(got.message.content_json) == {"n": 1}
    )
    await stub.Ack(messages_pb2.AckRequest(receipts=[got.receipt]), metadata=auth(sub))
    stream.cancel()

    drift = await stub.Send(
        send_request(pub, "task.execute.v2", {}, topic="task.execute.v2"), metadata=auth(pub)
    )
    assert list(drift.recipients) == [] and po.drift["task.execute.v2"] == 1


async def test_subscribe_refuses_a_bad_topic_or_token(env: Env, gateway: Any) -> None:
    po, stub = gateway
    sub = await register(po, "executor")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Subscribe(messages_pb2.SubscribeRequest(topics=["Nope"]), metadata=auth(sub)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata() or ())["agency-field"] == "topics[0]"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Subscribe(messages_pb2.SubscribeRequest()):
            pass
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
