"""Rate limits per sender, recipient and topic, and topic ACLs, as definition-file settings
(issue 13 item 9): refused with RESOURCE_EXHAUSTED and a retry-after hint, audited, and
shared by replicas when the buckets are in Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput, PermissionDenied, ResourceExhausted
from middleware.messaging import (
    MemoryBuckets,
    RateLimits,
    RateLimitSettings,
    RedisBuckets,
    SendOptions,
)
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.message_servicer import smf_to_pb

from .helpers import Agent, Env, register


def limits(env: Env, redis_client: Any, prefix: str, **rules: Any) -> RateLimits:
    settings = RateLimitSettings.model_validate(rules)
    if env.kind == "redis":
        return RateLimits(settings, RedisBuckets(redis_client, prefix=prefix))
    return RateLimits(settings, MemoryBuckets(clock=env.clock))


async def send(po: Any, agent: Agent, receiver: str, content: Any = "hi") -> Any:
    msg = agent.message(receiver, content)
    return await po.send(agent.token, msg, signature=agent.sign(msg))


async def test_each_sender_has_its_own_bucket_and_a_refusal_says_when_to_retry(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    po = env.office(
        limits=limits(env, redis_client, redis_prefix, sender=[{"match": "*", "rate": 0.01, "burst": 3}])
    )
    a, b, c = await register(po, "alice"), await register(po, "bob"), await register(po, "carol")
    for _ in range(3):
        await send(po, a, "bob")
    with pytest.raises(ResourceExhausted) as err:
        await send(po, a, "bob", "one too many")
    assert err.value.details["scope"] == "sender" and err.value.details["name"] == "alice"
    assert 90_000 <= err.value.details["retry_after_ms"] <= 100_000  # 1 token at 0.01/s
    await send(po, c, "bob")  # carol's bucket is her own
    (refused,) = env.events(AuditEventType.MESSAGE_REJECTED)
    assert refused.rule == "RESOURCE_EXHAUSTED" and refused.actors.agent == "alice"
    assert "sender 'alice' is over its message rate limit" in refused.detail["why"]
    assert await po.mailbox_size("bob") == 4
    del b


async def test_recipient_and_topic_limits_and_a_refused_message_costs_no_other_bucket(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    po = env.office(
        limits=limits(
            env,
            redis_client,
            redis_prefix,
            sender=[{"match": "*", "rate": 0.01, "burst": 100}],
            recipient=[{"match": "ceo", "rate": 0.01, "burst": 2}],
            topic=[{"match": "billing.*", "rate": 0.01, "burst": 1}],
        )
    )
    a, b = await register(po, "alice"), await register(po, "bob")
    ceo, dev = await register(po, "ceo"), await register(po, "dev")
    await send(po, a, "ceo")
    await send(po, b, "ceo")
    with pytest.raises(ResourceExhausted) as err:
        await send(po, a, "ceo")  # the ceo's mailbox takes 2, whoever sends
    assert err.value.details["scope"] == "recipient" and err.value.details["name"] == "ceo"
    await send(po, a, "dev")  # other recipients: no recipient rule matches
    await po.subscribe(dev.token, "billing.invoice")
    msg = a.message("billing.invoice", {"n": 1})
    await po.publish(
        a.token,
        "billing.invoice",
        msg,
        signature=a.sign(msg, SendOptions(kind="topic", topic="billing.invoice")),
    )
    msg = b.message("billing.invoice", {"n": 2})
    with pytest.raises(ResourceExhausted) as err:
        await po.publish(
            b.token,
            "billing.invoice",
            msg,
            signature=b.sign(msg, SendOptions(kind="topic", topic="billing.invoice")),
        )
    assert err.value.details["scope"] == "topic"
    # alice's sender bucket was charged 3 times (two accepted, the refused one not):
    # refusals charge no bucket, so a sender's other messages are not starved by them
    buckets = po.limits.buckets(sender="alice")
    assert buckets and buckets[0].burst == 100
    del ceo


async def test_two_post_offices_on_one_redis_draw_from_the_same_buckets(
    redis_client: Any, redis_prefix: str
) -> None:
    from middleware.messaging import PostOffice, RedisMailbox

    settings = RateLimitSettings.model_validate({"sender": [{"match": "*", "rate": 0.01, "burst": 3}]})
    mailboxes = RedisMailbox(redis_client, prefix=redis_prefix)
    offices = [
        PostOffice(mailboxes, limits=RateLimits(settings, RedisBuckets(redis_client, prefix=redis_prefix)))
        for _ in range(2)
    ]
    a = await register(offices[0], "alice")
    for office in offices:  # the same agents on every replica
        if office is not offices[0]:
            office.identity = offices[0].identity
    await register(offices[0], "bob")
    await send(offices[0], a, "bob")
    await send(offices[1], a, "bob")
    await send(offices[0], a, "bob")
    for office in offices:
        with pytest.raises(ResourceExhausted):
            await send(office, a, "bob")
    await mailboxes.purge()


def test_definition_file_rate_limits_and_acls_are_validated_by_path() -> None:
    from middleware.messaging import generate_key, public_key_b64
    from middleware.server.settings import hash_token

    agent = {"name": "alice", "public_key": public_key_b64(generate_key()), "token_sha256": hash_token("t")}
    with pytest.raises(ValueError) as err:
        AgencyDefinition.model_validate(
            {
                "version": 1,
                "messaging": {
                    "agents": [agent],
                    "rate_limits": {"sender": [{"match": "*", "rate": float("inf"), "burst": 0}]},
                },
            }
        )
    assert "rate_limits.sender.0.rate" in str(err.value) and "rate_limits.sender.0.burst" in str(err.value)
    with pytest.raises(ValueError) as err:
        AgencyDefinition.model_validate(
            {
                "version": 1,
                "messaging": {
                    "agents": [agent],
                    "acl": {"topics": [{"pattern": "finance.*", "publishers": ["ghost"]}]},
                },
            }
        )
    assert "acl.topics.0.publishers.0" in str(err.value) and "no messaging agent 'ghost'" in str(err.value)


async def test_the_definition_builds_acls_and_limits_into_the_post_office() -> None:
    from middleware.audit import MemoryAuditLog
    from middleware.messaging import generate_key, public_key_b64
    from middleware.server.bootstrap import build_post_office
    from middleware.server.settings import hash_token

    from .helpers import Agent as A

    keys = {n: generate_key() for n in ("cfo", "intern")}
    definition = AgencyDefinition.model_validate(
        {
            "version": 1,
            "messaging": {
                "agents": [
                    {"name": n, "public_key": public_key_b64(k), "token_sha256": hash_token(f"tok-{n}")}
                    for n, k in keys.items()
                ],
                "acl": {
                    "default_open": False,
                    "topics": [{"pattern": "finance.*", "publishers": ["cfo"], "subscribers": ["*"]}],
                },
                "rate_limits": {"sender": [{"match": "intern", "rate": 0.01, "burst": 1}]},
            },
        }
    )
    po = await build_post_office(definition, audit=MemoryAuditLog())
    cfo, intern = (A(n, f"tok-{n}", k) for n, k in keys.items())
    await po.subscribe(intern.token, "finance.report")
    with pytest.raises(PermissionDenied):
        await po.subscribe(intern.token, "hr.salaries")  # no rule: closed
    msg = intern.message("finance.report", "q3")
    with pytest.raises(PermissionDenied):
        await po.publish(
            intern.token,
            "finance.report",
            msg,
            signature=intern.sign(msg, SendOptions("topic", "finance.report")),
        )
    await send(po, intern, "cfo")
    with pytest.raises(ResourceExhausted):
        await send(po, intern, "cfo")
    await send(po, cfo, "intern")  # cfo: no rule, not limited
    await send(po, cfo, "intern")
    with pytest.raises(InvalidInput):  # still validated before anything is charged
        await po.send(intern.token, {"sender": "intern"}, signature="")
    await po.transport.close()


# ---------------------------------------------------------------- over gRPC
@pytest.fixture
async def stub(env: Env, redis_client: Any, redis_prefix: str) -> AsyncIterator[tuple[Any, Any]]:
    po = env.office(
        limits=limits(env, redis_client, redis_prefix, sender=[{"match": "*", "rate": 0.01, "burst": 2}])
    )
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield po, messages_pb2_grpc.MessageServiceStub(channel)
    await channel.close()
    await server.stop(0)


async def test_over_grpc_a_rate_limited_send_is_resource_exhausted_with_a_retry_after_trailer(
    env: Env, stub: tuple[Any, Any]
) -> None:
    po, messages = stub
    a, _ = await register(po, "alice"), await register(po, "bob")
    auth = (("authorization", f"Bearer {a.token}"),)

    def request() -> messages_pb2.SendMessageRequest:
        msg = a.message("bob", "hi")
        return messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg), signature=a.sign(msg), content_type="application/json"
        )

    await messages.Send(request(), metadata=auth)
    await messages.Send(request(), metadata=auth)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await messages.Send(request(), metadata=auth)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(err.value.trailing_metadata() or ())
    assert int(str(trailers["agency-retry-after-ms"])) >= 90_000
    assert "rate limit" in (err.value.details() or "")


async def test_over_grpc_stale_and_future_messages_are_invalid_argument_naming_the_field(
    env: Env, stub: tuple[Any, Any]
) -> None:
    po, messages = stub
    a, _ = await register(po, "alice"), await register(po, "bob")
    auth = (("authorization", f"Bearer {a.token}"),)
    for created_at in ("2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z"):
        msg = a.message("bob", "x", created_at=created_at)
        req = messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg), signature=a.sign(msg), content_type="application/json"
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await messages.Send(req, metadata=auth)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "created_at" in (err.value.details() or "")
    msg = a.message("bob", "x")
    pb = smf_to_pb(msg)
    for ttl in (0.0, float("inf"), float("nan")):
        pb.metadata.freshness_ttl = ttl
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await messages.Send(
                messages_pb2.SendMessageRequest(message=pb, signature="x", content_type="text/plain"),
                metadata=auth,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "freshness_ttl" in (err.value.details() or "")
