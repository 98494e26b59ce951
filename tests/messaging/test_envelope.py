"""The envelope around a message (issue 19): content type (required on the wire), correlation
id, a message hash computed by the post office, and a trace link."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput, PermissionDenied
from middleware.messaging import PostOfficeConfig, SendOptions, signing_bytes
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.message_servicer import smf_to_pb

from .helpers import VISIBILITY, Env, register


async def test_content_type_and_correlation_id_travel_signed_and_the_hash_is_the_post_offices(
    env: Env,
) -> None:
    po = env.office(
        config=PostOfficeConfig(
            visibility_timeout=VISIBILITY, trace_link="https://console.example/trace/{trace_id}"
        )
    )
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "# Review\nplease")
    options = SendOptions(content_type="text/markdown", correlation_id="conv-7")
    sent = await po.send(
        a.token, msg, signature=a.sign(msg, options), content_type="text/markdown", correlation_id="conv-7"
    )
    assert sent.message_hash == hashlib.sha256(signing_bytes(msg, options)).hexdigest()
    assert sent.trace_link == f"https://console.example/trace/{msg.trace_id}"
    (got,) = await po.pull(b.token)
    assert (got.content_type, got.correlation_id, got.message_hash) == (
        "text/markdown",
        "conv-7",
        sent.message_hash,
    )
    assert po.identity.verify(got.message, got.signature, got.options())
    (accepted,) = env.events(AuditEventType.MESSAGE_ACCEPTED)
    assert accepted.detail["message_hash"] == sent.message_hash
    assert accepted.detail["correlation_id"] == "conv-7"
    # signed for one content type, sent as another: refused
    with pytest.raises(PermissionDenied):
        await po.send(
            a.token, msg, signature=a.sign(msg, options), content_type="text/html", correlation_id="conv-7"
        )


@pytest.mark.parametrize("bad", ["", "json", "text/", "a b/c", "x/" + "y" * 200])
async def test_a_bad_content_type_is_refused_naming_the_field(env: Env, bad: str) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "x")
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, msg, signature=a.sign(msg), content_type=bad)
    assert err.value.field == "content_type"


def test_a_trace_link_template_with_unknown_fields_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        PostOfficeConfig.parse({"trace_link": "https://x/{task}"})
    assert err.value.field == "trace_link"


@pytest.fixture
async def stub(env: Env) -> AsyncIterator[tuple[Any, Any]]:
    po = env.office()
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield po, messages_pb2_grpc.MessageServiceStub(channel)
    await channel.close()
    await server.stop(0)


async def test_over_grpc_content_type_is_required_and_the_reply_carries_hash_and_link(
    env: Env, stub: tuple[Any, Any]
) -> None:
    po, messages = stub
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", {"n": 1})
    request = messages_pb2.SendMessageRequest(message=smf_to_pb(msg), signature=a.sign(msg))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await messages.Send(request, metadata=(("agency-token", a.token),))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata() or ())["agency-field"] == "content_type"

    options = SendOptions(correlation_id="c-1")
    request = messages_pb2.SendMessageRequest(
        message=smf_to_pb(msg),
        signature=a.sign(msg, options),
        content_type="application/json",
        correlation_id="c-1",
    )
    reply = await messages.Send(request, metadata=(("agency-token", a.token),))
    assert reply.message_hash == hashlib.sha256(signing_bytes(msg, options)).hexdigest()
    assert reply.trace_link == f"agency trace show {msg.trace_id}"
    pulled = await messages.Pull(messages_pb2.PullRequest(), metadata=(("agency-token", b.token),))
    (got,) = pulled.messages
    assert (got.content_type, got.correlation_id, got.message_hash) == (
        "application/json",
        "c-1",
        reply.message_hash,
    )
