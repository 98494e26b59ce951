"""A consumer process killed mid-processing (kill -9) loses nothing: another consumer gets the message."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import pytest

from middleware.errors import BackendUnavailable
from middleware.messaging import ManualClock, PostOfficeConfig, RedisMailbox

from .helpers import Env, register

CONSUMER = """
import asyncio, sys
import redis.asyncio as aioredis
from middleware.messaging import RedisMailbox

async def main():
    client = aioredis.Redis.from_url(sys.argv[1])
    box = RedisMailbox(client, prefix=sys.argv[2])
    batch = await box.receive("bob", "doomed", count=10, visibility_timeout=0.2)
    print(len(batch.deliveries), flush=True)
    await asyncio.Event().wait()  # "processing" forever, never acking

asyncio.run(main())
"""


async def test_a_killed_consumer_process_loses_nothing(redis_client: Any, redis_prefix: str) -> None:
    url = "redis://{host}:{port}/{db}".format(**redis_client.connection_pool.connection_kwargs)
    clock = ManualClock()
    transport = RedisMailbox(redis_client, prefix=redis_prefix, clock=clock)
    env = Env("redis", transport, clock)
    po = env.office(config=PostOfficeConfig(visibility_timeout=0.2))
    try:
        a, b = await register(po, "alice"), await register(po, "bob")
        msg = a.message("bob", "ship order 42")
        await po.send(a.token, msg, signature=a.sign(msg))

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CONSUMER, url, redis_prefix, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line.strip() == b"1"  # the doomed consumer holds the message
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()

        # not handed to another consumer while held: asked with a visibility timeout no loaded
        # machine outlasts here (Redis measures the idle time in real milliseconds)
        held = await transport.receive("bob", "survivor", count=10, visibility_timeout=30)
        assert held.deliveries == [] and held.lost == []
        got = await env.after_visibility(lambda: po.pull(b.token, consumer="survivor"), bool)
        assert [(r.message.content, r.delivery_count) for r in got] == [("ship order 42", 2)]
        await po.ack(b.token, [got[0].receipt])
        assert await po.mailbox_size("bob") == 0
    finally:
        await transport.purge()


async def test_a_long_wait_outlasts_the_clients_socket_timeout(redis_prefix: str) -> None:
    """Pull(wait_seconds=...) longer than the Redis client's socket timeout is not an error."""
    from redis.asyncio import Redis

    client = Redis.from_url(
        os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"), socket_timeout=0.5
    )
    mailbox = RedisMailbox(client, prefix=redis_prefix)
    try:
        batch = await mailbox.receive("bob", "bob", count=1, visibility_timeout=30, block=1.2)
        assert batch.deliveries == [] and batch.lost == []
    finally:
        await mailbox.purge()
        await client.aclose()


async def test_a_wait_slice_answered_after_the_socket_timeout_is_a_late_reply_not_an_error(
    redis_prefix: str,
) -> None:
    """A loaded machine can read a slice's reply after the socket timeout: the pull goes on."""
    from redis.asyncio import Redis

    client = Redis.from_url(
        os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"), socket_timeout=0.3
    )
    mailbox = RedisMailbox(client, prefix=redis_prefix)
    mailbox._block_slice = 0.6  # every slice outlasts the socket timeout, as a starved loop makes it
    try:
        batch = await mailbox.receive("bob", "bob", count=1, visibility_timeout=30, block=0.6)
        assert batch.deliveries == [] and batch.lost == []
        await mailbox.enqueue("bob", b"hello", max_len=10)  # the client reconnects for the next call
        batch = await mailbox.receive("bob", "bob", count=1, visibility_timeout=30)
        assert [d.data for d in batch.deliveries] == [b"hello"]
        with pytest.raises(BackendUnavailable):  # twice in one wait: that is an outage, and says so
            await mailbox.receive("bob", "bob", count=1, visibility_timeout=30, block=1.2)
    finally:
        await mailbox.purge()
        await client.aclose()
