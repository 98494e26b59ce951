"""An ``agency serve`` process pushes a webhook agent's messages to a real HTTP server that is
down at first: the health detail, the metric and the audit record say so, then it recovers."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_processes import free_port, start_gateway, write_definition
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webhook_server import HookServer

from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.messaging.webhooks import verify_signature

pytestmark = pytest.mark.timeout(90)


async def _until(check: Any, what: str, within: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await check()
        if value:
            return value
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_served_gateway_pushes_to_a_webhook_and_reports_it_failing_then_recovered(
    tmp_path: Path,
) -> None:
    alice, bob = AgentCredentials.generate("alice"), AgentCredentials.generate("bob")
    secret = tmp_path / "bob-hook.secret"
    secret.write_text(f"secret-{uuid.uuid4().hex}\n")
    hook = HookServer(free_port())
    bob_entry = {
        **bob.enrollment(),
        "webhooks": [
            {
                "url": hook.url,
                "secret_file": str(secret),
                "initial_backoff": 0.05,
                "max_backoff": 0.2,
                "max_attempts": 100,
                "failing_after": 2,
            }
        ],
    }
    config = write_definition(
        tmp_path / "agency.json",
        {
            "version": 1,
            "server": {"address": "127.0.0.1:0", "metrics_address": "127.0.0.1:0"},
            "messaging": {"agents": [alice.enrollment(), bob_entry]},
        },
    )
    gateway = await start_gateway(config, "gw-hooks", tmp_path)
    try:
        metrics_url = re.search(r"metrics on (\S+)", gateway.output())
        assert metrics_url, gateway.output()

        async def metric(name: str, labels: str) -> float | None:
            text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(metrics_url.group(1), timeout=10).read()
            )
            found = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text.decode(), re.M)
            return float(found.group(1)) if found else None

        async with grpc.aio.insecure_channel(gateway.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                request = health_pb2.HealthCheckRequest(service="agency.webhooks/bob")
                return int((await health.Check(request, timeout=5)).status)

            assert await status() == health_pb2.HealthCheckResponse.SERVING
            async with MessagingClient(alice, gateway.address) as client:
                sent = await client.send("bob", {"order": 42})

            async def not_serving() -> bool:
                return await status() == health_pb2.HealthCheckResponse.NOT_SERVING

            await _until(not_serving, "the health detail never said failing")
            assert (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == (
                health_pb2.HealthCheckResponse.SERVING  # the gateway itself still serves
            )
            assert await metric("agency_webhook_failing", 'agent="bob"') == 1
            assert (await metric("agency_webhook_deliveries_total", 'agent="bob",outcome="failed"') or 0) >= 2

            hook.start()  # the endpoint comes up

            async def serving() -> bool:
                return await status() == health_pb2.HealthCheckResponse.SERVING

            await _until(serving, "never recovered")
            assert hook.answered("ok")
            assert await metric("agency_webhook_failing", 'agent="bob"') == 0
            assert await metric("agency_webhook_deliveries_total", 'agent="bob",outcome="delivered"') == 1
            messages = messages_pb2_grpc.MessageServiceStub(channel)
            left = await messages.Pull(messages_pb2.PullRequest(), metadata=(("agency-token", bob.token),))
            assert not left.messages  # acknowledged by the push
    finally:
        hook.stop()
        assert await gateway.stop() == 0, gateway.output()
    _, headers, body = hook.answered("ok")[0]
    assert verify_signature(secret.read_bytes().strip(), headers, body)
    assert json.loads(body)["message_id"] == sent.message_id
    assert "is failing" in gateway.output() and "answers again" in gateway.output()
