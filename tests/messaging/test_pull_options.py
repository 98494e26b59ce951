"""Pull options (issue 19, seed 004 §2.3): max_messages, message_type (private / public),
include_read with next_cursor paging."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.errors import InvalidInput
from middleware.messaging import PostOfficeConfig, SendOptions
from middleware.server.grpc_api import build_server

from .helpers import Agent, Env, register


async def direct(po: Any, a: Agent, to: str, content: Any) -> str:
    msg = a.message(to, content)
    await po.send(a.token, msg, signature=a.sign(msg))
    return msg.message_id


async def topic(po: Any, a: Agent, name: str, content: Any) -> str:
    msg = a.message(name, content)
    await po.publish(a.token, name, msg, signature=a.sign(msg, SendOptions(kind="topic", topic=name)))
    return msg.message_id


async def test_message_type_takes_only_private_or_public_and_leaves_the_rest_untouched(env: Env) -> None:
    po = env.office(config=PostOfficeConfig(visibility_timeout=30))  # what is taken stays taken
    a, b = await register(po, "alice"), await register(po, "bob")
    await po.subscribe(b.token, "news.daily")
    order = [
        await topic(po, a, "news.daily", "p1"),
        await topic(po, a, "news.daily", "p2"),
        await direct(po, a, "bob", "d1"),
        await topic(po, a, "news.daily", "p3"),
        await direct(po, a, "bob", "d2"),
    ]
    private = await po.pull(b.token, max_messages=5, message_type="private")
    assert [r.message.content for r in private] == ["d1", "d2"]
    public = await po.pull(b.token, max_messages=2, message_type="public")
    assert [r.message.content for r in public] == ["p1", "p2"]
    assert all(r.delivery_count == 1 for r in private + public)  # the skipped ones were not counted
    (last,) = await po.pull(b.token, max_messages=5)
    assert last.message.content == "p3" and last.delivery_count == 1
    assert len(order) == 5
    with pytest.raises(InvalidInput) as err:
        await po.pull(b.token, message_type="secret")
    assert err.value.field == "message_type"


async def test_include_read_browses_read_and_unread_messages_page_by_page(env: Env) -> None:
    po = env.office(config=PostOfficeConfig(visibility_timeout=30))
    a, b = await register(po, "alice"), await register(po, "bob")
    for n in range(5):
        await direct(po, a, "bob", f"m{n}")
    (taken,) = await po.pull(b.token, max_messages=1)  # m0 is now read (in flight, not acked)
    page, cursor = await po.browse(b.token, max_messages=2)
    assert [(r.message.content, r.delivery_count) for r in page] == [("m0", 1), ("m1", 0)]
    assert cursor
    page2, cursor2 = await po.browse(b.token, max_messages=2, cursor=cursor)
    assert [r.message.content for r in page2] == ["m2", "m3"]
    page3, cursor3 = await po.browse(b.token, max_messages=2, cursor=cursor2)
    assert [r.message.content for r in page3] == ["m4"] and cursor3 == ""
    # browsing took nothing: the unread ones are still handed out, in order
    assert [r.message.content for r in await po.pull(b.token, max_messages=10)] == ["m1", "m2", "m3", "m4"]
    # a browsed receipt acknowledges (removes) the message
    assert await po.ack(b.token, [taken.receipt]) == 1
    page, _ = await po.browse(b.token, max_messages=10)
    assert "m0" not in [r.message.content for r in page]


@pytest.fixture
async def stub(env: Env) -> AsyncIterator[tuple[Any, Any]]:
    po = env.office()
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield po, messages_pb2_grpc.MessageServiceStub(channel)
    await channel.close()
    await server.stop(0)


async def test_over_grpc_pull_options_and_their_errors(env: Env, stub: Any) -> None:
    po, messages = stub
    a, b = await register(po, "alice"), await register(po, "bob")
    await po.subscribe(b.token, "news.daily")
    await topic(po, a, "news.daily", "p1")
    await direct(po, a, "bob", "d1")
    auth = (("agency-token", b.token),)
    got = await messages.Pull(messages_pb2.PullRequest(message_type="public"), metadata=auth)
    assert [m.kind for m in got.messages] == ["topic"] and got.next_cursor == ""
    page = await messages.Pull(messages_pb2.PullRequest(include_read=True, max_messages=1), metadata=auth)
    assert len(page.messages) == 1 and page.next_cursor
    rest = await messages.Pull(
        messages_pb2.PullRequest(include_read=True, max_messages=5, cursor=page.next_cursor), metadata=auth
    )
    assert len(rest.messages) == 1 and rest.next_cursor == ""
    for bad in (
        messages_pb2.PullRequest(message_type="all"),
        messages_pb2.PullRequest(cursor="123"),
        messages_pb2.PullRequest(wait_seconds=float("nan")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await messages.Pull(bad, metadata=auth)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
