"""A Subscribe stream survives a Redis outage: it backs off, counts the errors, and delivers
again once a (restarted, empty) Redis server is back (issue 13 item 1, mailbox loops)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import grpc
import pytest
from gateway_processes import free_port, start_redis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from middleware import Agency
from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.audit import MemoryAuditLog
from middleware.errors import BackendUnavailable
from middleware.messaging import PostOffice, RedisMailbox
from middleware.server.grpc_api import build_server

from .helpers import register

pytestmark = pytest.mark.timeout(60)


async def _until(predicate: Any, what: str, within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def test_a_subscribe_stream_outlives_a_redis_restart(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    redis_proc = start_redis(port)
    errors: Counter[str] = Counter()
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=2)
    transport = RedisMailbox(client, prefix="outage:", on_redis_error=lambda op: errors.update([op]))
    audit = MemoryAuditLog()
    po = PostOffice(transport, audit=audit)
    server = build_server(Agency(audit=audit), "127.0.0.1:0", post_office=po)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = messages_pb2_grpc.MessageServiceStub(channel)
    try:
        alice, bob = await register(po, "alice"), await register(po, "bob")
        stream = stub.Subscribe(
            messages_pb2.SubscribeRequest(), metadata=(("authorization", f"Bearer {bob.token}"),)
        )

        async def send(text: str) -> None:
            msg = alice.message("bob", text)
            await po.send(alice.token, msg, signature=alice.sign(msg))

        await send("before")
        first = await asyncio.wait_for(stream.read(), 10)
        assert first.message.content_json == '"before"'

        with caplog.at_level(logging.WARNING, logger="agency.messaging"):
            redis_proc.terminate()
            redis_proc.wait(10)
            await _until(lambda: errors["mailbox.receive"] >= 3, "the stream never retried")
            assert stream.done() is False  # still open while Redis is down
            redis_proc = start_redis(port)  # back, empty (no persistence)
            await _until(
                lambda: any("backend back" in r.getMessage() for r in caplog.records),
                "the stream never recovered",
            )
        outage_lines = [r for r in caplog.records if "retrying with backoff" in r.getMessage()]
        assert len(outage_lines) == 1  # logged once per outage, not once per retry

        for attempt in range(5):  # a pooled connection from before the restart may fail once
            try:
                await send("after")
                break
            except (RedisConnectionError, BackendUnavailable):
                assert attempt < 4
        second = await asyncio.wait_for(stream.read(), 10)
        assert second.message.content_json == '"after"'
        stream.cancel()
    finally:
        await channel.close()
        await server.stop(0)
        await client.aclose()
        redis_proc.kill()
        redis_proc.wait(10)
