"""The post office feeds ``agency_mailbox_depth``; Redis mailboxes feed ``agency_redis_errors_total``."""

from __future__ import annotations

import socket

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from middleware.errors import BackendUnavailable
from middleware.messaging import PostOffice, RedisMailbox, SendOptions
from middleware.server.metrics import Metrics

from .helpers import Env, register


def depth(metrics: Metrics, mailbox: str) -> float | None:
    return metrics.registry.get_sample_value("agency_mailbox_depth", {"mailbox": mailbox})


async def test_mailbox_depth_goes_up_on_send_and_down_on_ack(env: Env) -> None:
    metrics = Metrics()
    po = env.office(on_depth=metrics.set_mailbox_depth)
    alice, bob, carol = await register(po, "alice"), await register(po, "bob"), await register(po, "carol")
    assert depth(metrics, "bob") is None  # nothing observed yet

    for n in range(3):
        msg = alice.message("bob", {"n": n})
        await po.send(alice.token, msg, signature=alice.sign(msg))
    assert depth(metrics, "bob") == 3

    got = await po.pull(bob.token, max_messages=2)
    assert len(got) == 2 and depth(metrics, "bob") == 3  # handed out, not yet acknowledged
    await po.ack(bob.token, [got[0].receipt])
    assert depth(metrics, "bob") == 2
    await po.ack(bob.token, [got[1].receipt])
    assert depth(metrics, "bob") == 1

    msg = alice.message("*", "all hands")
    await po.broadcast(alice.token, msg, signature=alice.sign(msg, SendOptions(kind="broadcast")))
    assert depth(metrics, "bob") == 2 and depth(metrics, "carol") == 1  # every copy's mailbox

    msg = alice.message("carol", "soon stale")
    await po.send(alice.token, msg, signature=alice.sign(msg, SendOptions(ttl=1)), ttl=1)
    assert depth(metrics, "carol") == 2
    env.clock.advance(2)  # the 1 s TTL ran out; the broadcast copy (default TTL 1 h) did not
    got = await po.pull(carol.token, max_messages=5)
    assert len(got) == 1 and depth(metrics, "carol") == 1  # the pull dropped the expired one


async def test_without_a_hook_nothing_is_measured(env: Env) -> None:
    metrics = Metrics()
    po = env.office()
    alice, _ = await register(po, "alice"), await register(po, "bob")
    msg = alice.message("bob")
    await po.send(alice.token, msg, signature=alice.sign(msg))
    assert depth(metrics, "bob") is None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_redis_errors_of_the_mailboxes_are_counted_by_operation() -> None:
    metrics = Metrics()
    # nobody listens there; no retries, so the error comes at once
    client = Redis(host="127.0.0.1", port=closed_port(), retry=Retry(NoBackoff(), 0))
    mailbox = RedisMailbox(client, prefix="test:closed:", on_redis_error=metrics.redis_error)
    try:
        with pytest.raises(BackendUnavailable):
            await mailbox.enqueue("bob", b"x", max_len=10)
        with pytest.raises(BackendUnavailable):
            await mailbox.receive("bob", "c1", count=1, visibility_timeout=1)
        with pytest.raises(BackendUnavailable):
            await mailbox.size("bob")

        def errors(op: str) -> float | None:
            return metrics.registry.get_sample_value("agency_redis_errors_total", {"operation": op})

        assert errors("mailbox.enqueue") == 1
        assert errors("mailbox.receive") == 1
        assert errors("mailbox.size") == 1

        # through the post office the failed send is counted once, as the enqueue it was
        po = PostOffice(mailbox, on_depth=metrics.set_mailbox_depth)
        alice = await register(po, "alice")
        await register(po, "bob")
        msg = alice.message("bob")
        with pytest.raises(BackendUnavailable):
            await po.send(alice.token, msg, signature=alice.sign(msg))
        assert errors("mailbox.enqueue") == 2 and errors("mailbox.size") == 1
    finally:
        await client.aclose()
