"""Moderation (issue 19, seed 004 §3.3): explicit rules hold messages on a quarantine board,
reports by distinct agents quarantine a message, a person with the admin role releases or
deletes it; everything audited; and the rules do not over-block (false-positive tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.access import Principal, Role
from middleware.errors import NotFound, PermissionDenied
from middleware.messaging import PostOfficeConfig, SendOptions
from middleware.messaging.moderation import (
    MESSAGE_DELETED,
    MESSAGE_QUARANTINED,
    MESSAGE_RELEASED,
    MESSAGE_REPORTED,
    DenyPhrases,
    MemoryBoard,
    ModerationSettings,
    RedisBoard,
    RepeatedContent,
)
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.message_servicer import smf_to_pb
from middleware.server.settings import hash_token

from .helpers import VISIBILITY, Env, register

ADMIN = Principal(name="moderator", role=Role.ADMIN)
CLIENT = Principal(name="app", role=Role.CLIENT)


def board(env: Env, redis_client: Any, prefix: str) -> Any:
    return RedisBoard(redis_client, prefix=prefix) if env.kind == "redis" else MemoryBoard()


async def send(po: Any, agent: Any, receiver: str, content: Any) -> Any:
    msg = agent.message(receiver, content)
    return await po.send(agent.token, msg, signature=agent.sign(msg))


async def test_a_denied_phrase_holds_the_message_and_an_admin_releases_it(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    po = env.office(
        moderation=[DenyPhrases(["wire the money"])], board=board(env, redis_client, redis_prefix)
    )
    a, b = await register(po, "alice"), await register(po, "bob")
    held = await send(po, a, "bob", {"note": "Please WIRE the   money to account 7!"})
    assert held.quarantined == "denied phrase 'wire the   money'" and held.recipients == ()
    assert await po.pull(b.token) == []
    (item,) = await po.quarantine(caller=ADMIN)
    assert (item.message_id, item.sender, item.rule, item.recipients) == (
        held.message_id,
        "alice",
        "deny_phrases",
        ["bob"],
    )
    with pytest.raises(PermissionDenied):
        await po.quarantine(caller=CLIENT)
    with pytest.raises(PermissionDenied):
        await po.release(held.message_id, caller=None)
    assert await po.release(held.message_id, caller=ADMIN) == ["bob"]
    (got,) = await po.pull(b.token)  # delivered as sent: its signature still verifies
    assert got.message.message_id == held.message_id
    with pytest.raises(NotFound):
        await po.release(held.message_id, caller=ADMIN)
    (q,) = env.events(MESSAGE_QUARANTINED)
    (r,) = env.events(MESSAGE_RELEASED)
    assert q.rule == "deny_phrases" and r.detail["by"] == "moderator" and r.detail["recipients"] == ["bob"]


@pytest.mark.parametrize(
    "text",
    [
        "rewire the moneybags",  # the phrase inside longer words
        "wire the\u00a0money-transfer form is attached",  # (non-breaking space is whitespace: matches below)
        "we will not wire money",  # other words
        "wire, the money",  # punctuation in between
    ],
)
def test_deny_phrases_do_not_over_block(text: str) -> None:
    rule = DenyPhrases(["wire the money"])
    message = _message(text)
    verdict = rule.check("alice", message, 0.0)
    if "\u00a0" in text:
        assert verdict is not None  # whitespace of any kind between the words still counts
    else:
        assert verdict is None


def _message(content: Any) -> Any:
    from middleware.smf import SMFMessage

    return SMFMessage.parse(
        {
            "sender": "alice",
            "receiver": "bob",
            "content": content,
            "metadata": {
                "provenance": {"source": "a", "reliability_score": 1},
                "freshness_ttl": 60,
                "confidence_score": 1,
                "intention_trace": ["GOAL_MODERATION"],
            },
        }
    )


def test_a_deny_phrase_is_a_literal_not_a_regular_expression() -> None:
    rule = DenyPhrases(["(a+)+$", "."])
    assert rule.check("x", _message("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"), 0) is None
    assert rule.check("x", _message("see (a+)+$ here"), 0) is not None


async def test_repeated_content_is_marked_spam_per_sender_and_window(env: Env) -> None:
    po = env.office(moderation=[RepeatedContent(max_repeats=3, window=60)])
    a, b, c = await register(po, "alice"), await register(po, "bob"), await register(po, "carol")
    for _ in range(3):
        assert not (await send(po, a, "bob", "BUY NOW")).quarantined
    assert (await send(po, a, "bob", "BUY NOW")).quarantined.startswith("spam")
    assert not (await send(po, c, "bob", "BUY NOW")).quarantined  # another sender: its own count
    assert not (await send(po, a, "bob", "status report")).quarantined  # other content
    env.clock.advance(61)
    assert not (await send(po, a, "bob", "BUY NOW")).quarantined  # the window moved on
    assert len(await po.pull(b.token, max_messages=100)) == 6


async def test_reports_by_distinct_agents_quarantine_a_message_and_hold_back_copies(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    po = env.office(board=board(env, redis_client, redis_prefix), reports_to_quarantine=2)
    spammer = await register(po, "spammer")
    subs = [await register(po, n) for n in ("s1", "s2", "s3")]
    for s in subs:
        await po.subscribe(s.token, "market.offers")
    msg = spammer.message("market.offers", "cheap pills")
    await po.publish(
        spammer.token,
        "market.offers",
        msg,
        signature=spammer.sign(msg, SendOptions(kind="topic", topic="market.offers")),
    )
    first = (await po.pull(subs[0].token))[0]
    assert await po.report(subs[0].token, msg.message_id, "spam") == (1, False)
    assert await po.report(subs[0].token, msg.message_id, "spam again") == (1, False)  # counted once
    await po.pull(subs[1].token)
    assert await po.report(subs[1].token, msg.message_id, "spam") == (2, True)
    assert await po.pull(subs[2].token) == []  # its copy was held back
    (item,) = await po.quarantine(caller=ADMIN)
    assert item.rule == "reports" and item.recipients == ["s3"] and item.sender == "spammer"
    await po.delete_quarantined(msg.message_id, caller=ADMIN)
    assert await po.quarantine(caller=ADMIN) == []
    assert await po.pull(subs[2].token) == []
    assert len(env.events(MESSAGE_REPORTED)) == 3
    assert [r.detail["stage"] for r in env.events(MESSAGE_QUARANTINED)] == ["report", "pull"]
    assert env.events(MESSAGE_DELETED)[0].detail["by"] == "moderator"
    assert first.message.message_id == msg.message_id


async def test_without_rules_nothing_is_moderated(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    for text in ("wire the money", "BUY NOW", "BUY NOW", "BUY NOW", "BUY NOW"):
        assert not (await send(po, a, "bob", text)).quarantined
    assert len(await po.pull(b.token, max_messages=10)) == 5
    assert await po.report(b.token, "msg_x", "meh") == (1, False)  # recorded, nothing held


def test_moderation_settings_build_the_rules() -> None:
    settings = ModerationSettings.parse(
        {"deny_phrases": ["wire the money"], "repeated_content": {"max_repeats": 5, "window_seconds": 60}}
    )
    assert [r.name for r in settings.rules()] == ["deny_phrases", "repeated_content"]
    with pytest.raises(Exception, match="deny_phrases"):
        ModerationSettings.parse({"deny_phrases": [" "]})


# ---------------------------------------------------------------- over gRPC with roles
@pytest.fixture
async def served(env: Env) -> AsyncIterator[tuple[Any, Any]]:
    po = env.office(
        config=PostOfficeConfig(visibility_timeout=VISIBILITY), moderation=[DenyPhrases(["free money"])]
    )
    tokens = {hash_token("admin-tok"): ADMIN, hash_token("client-tok"): CLIENT}
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po, token_hashes=tokens)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield po, messages_pb2_grpc.MessageServiceStub(channel)
    await channel.close()
    await server.stop(0)


async def test_over_grpc_quarantine_report_and_decisions_need_the_admin_role(env: Env, served: Any) -> None:
    po, stub = served
    a, b = await register(po, "alice"), await register(po, "bob")
    as_client = lambda agent: (("authorization", "Bearer client-tok"), ("agency-token", agent.token))  # noqa: E731
    admin = (("authorization", "Bearer admin-tok"),)
    msg = a.message("bob", "free money inside")
    request = messages_pb2.SendMessageRequest(
        message=smf_to_pb(msg),
        signature=a.sign(msg, SendOptions(content_type="text/plain")),
        content_type="text/plain",
    )
    sent = await stub.Send(request, metadata=as_client(a))
    assert sent.quarantined and not sent.recipients
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ListQuarantine(
            messages_pb2.ListQuarantineRequest(), metadata=(("authorization", "Bearer client-tok"),)
        )
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    board_ = await stub.ListQuarantine(messages_pb2.ListQuarantineRequest(), metadata=admin)
    (item,) = board_.messages
    assert item.message.content_json == '"free money inside"' and item.recipients == ["bob"]
    released = await stub.ReleaseQuarantined(
        messages_pb2.QuarantineDecision(message_id=msg.message_id), metadata=admin
    )
    assert list(released.recipients) == ["bob"]
    report = await stub.Report(
        messages_pb2.ReportMessageRequest(message_id=msg.message_id, reason="spam"), metadata=as_client(b)
    )
    assert report.reporters == 1 and not report.quarantined
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.DeleteQuarantined(messages_pb2.QuarantineDecision(message_id="msg_nope"), metadata=admin)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
