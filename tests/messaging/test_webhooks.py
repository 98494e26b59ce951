"""Webhooks against a real local HTTP server that is down, slow, answers 500, then recovers
(issue 19): signed bodies, retries with backoff, at-least-once with the message id,
dead-lettering after the configured attempts, and failures made loud (metric hook, audit
record, health detail)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from gateway_processes import free_port
from webhook_server import HookServer

from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput
from middleware.messaging import PostOffice, PostOfficeConfig, SendOptions
from middleware.messaging.webhooks import (
    WEBHOOK_FAILING,
    WEBHOOK_RECOVERED,
    WebhookDispatcher,
    WebhookSettings,
    verify_signature,
)

from .helpers import Env, register

SECRET = b"s3cret-shared-with-the-receiver"


async def until(predicate: Callable[[], bool], what: str, within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "hook.secret"
    path.write_bytes(SECRET + b"\n")
    return path


@pytest.fixture
async def hook() -> AsyncIterator[HookServer]:
    server = HookServer(free_port())
    yield server
    server.stop()


class Observed:
    """What the metric and health hooks were told."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, str]] = []
        self.failing: list[tuple[str, bool]] = []

    def on_attempt(self, agent: str, outcome: str) -> None:
        self.attempts.append((agent, outcome))

    async def on_failing(self, agent: str, failing: bool) -> None:
        self.failing.append((agent, failing))


def office(env: Env) -> PostOffice:
    # the retry schedule stays well inside the visibility timeout
    return env.office(config=PostOfficeConfig(visibility_timeout=30))


async def test_a_webhook_that_is_down_then_500_then_slow_then_back_gets_the_message(
    env: Env, hook: HookServer, secret_file: Path
) -> None:
    po = office(env)
    alice, _ = await register(po, "alice"), await register(po, "bob")
    settings = WebhookSettings(
        url=hook.url,
        secret_file=secret_file,
        max_attempts=100,
        initial_backoff=0.01,
        max_backoff=0.05,
        timeout=0.3,
        failing_after=3,
    )
    seen = Observed()
    dispatcher = WebhookDispatcher(
        po,
        {"bob": [settings]},
        consumer="webhook@test",
        on_attempt=seen.on_attempt,
        on_failing=seen.on_failing,
    )
    await dispatcher.start()
    try:
        msg = alice.message("bob", {"invoice": 7})
        options = SendOptions(params={"priority": "high"}, correlation_id="conv-1")
        await po.send(
            alice.token,
            msg,
            signature=alice.sign(msg, options),
            params={"priority": "high"},
            correlation_id="conv-1",
        )
        # down: connection refused, again and again -> failing (audit, metric, health detail)
        await until(lambda: ("bob", True) in seen.failing, "never reported failing while down")
        assert dispatcher.failing() == {"bob": [hook.url]}
        (failing,) = env.events(WEBHOOK_FAILING)
        assert failing.actors.agent == "bob" and failing.detail["url"] == hook.url
        assert failing.detail["message_id"] == msg.message_id and "Connect" in failing.detail["last_error"]

        hook.mode = "500"
        hook.start()
        await until(lambda: len(hook.answered("500")) >= 2, "the server never answered 500")
        hook.mode = "slow"  # answers after the webhook's timeout
        await until(lambda: len(hook.answered("slow")) >= 1, "the server was never slow")
        assert await po.mailbox_size("bob") == 1  # not acknowledged while failing
        hook.mode = "ok"
        await until(lambda: len(hook.answered("ok")) >= 1, "never delivered once back")
        await until(lambda: ("bob", False) in seen.failing, "never reported recovered")
    finally:
        await dispatcher.stop()

    assert await po.mailbox_size("bob") == 0  # acknowledged after the 2xx
    assert dispatcher.failing() == {}
    (recovered,) = env.events(WEBHOOK_RECOVERED)
    assert recovered.detail["failed_attempts"] >= 5
    # every attempt carried the same message id (at-least-once: the receiver dedupes on it)
    assert {r[1]["agency-message-id"] for r in hook.requests} == {msg.message_id}
    _, headers, body = hook.answered("ok")[0]
    assert verify_signature(SECRET, headers, body)
    assert not verify_signature(b"another secret", headers, body)
    assert not verify_signature(SECRET, headers, body.replace(b"7", b"8"))
    payload = json.loads(body)
    assert payload["content"] == {"invoice": 7} and payload["params"] == {"priority": "high"}
    assert payload["correlation_id"] == "conv-1" and payload["sender"] == "alice"
    assert payload["delivery"] == recovered.detail["failed_attempts"] + 1  # the attempt number
    assert ("bob", "delivered") in seen.attempts
    # every failed attempt counted: those the server saw (500, slow) and those it could not (down)
    assert seen.attempts.count(("bob", "failed")) >= len(hook.requests) - 1 + 3
    acked = env.events(AuditEventType.MESSAGE_ACKED)
    assert acked and acked[-1].detail["message_ids"] == [msg.message_id]


async def test_after_the_configured_attempts_the_message_is_dead_lettered(
    env: Env, hook: HookServer, secret_file: Path
) -> None:
    po = office(env)
    alice, bob = await register(po, "alice"), await register(po, "bob")
    hook.mode = "500"
    hook.start()
    settings = WebhookSettings(
        url=hook.url, secret_file=secret_file, max_attempts=3, initial_backoff=0.01, max_backoff=0.02
    )
    seen = Observed()
    dispatcher = WebhookDispatcher(
        po, {"bob": [settings]}, on_attempt=seen.on_attempt, on_failing=seen.on_failing
    )
    await dispatcher.start()
    try:
        msg = alice.message("bob", "never answered well")
        await po.send(alice.token, msg, signature=alice.sign(msg))
        await until(lambda: ("bob", "dead_lettered") in seen.attempts, "never dead-lettered")
    finally:
        await dispatcher.stop()
    assert len(hook.requests) == 3
    (dead,) = await po.dead_letters(bob.token)
    assert dead.reason == f"webhook {hook.url} failed 3 attempts: HTTP 500"
    assert dead.message is not None and dead.message.message_id == msg.message_id
    (record,) = env.events(AuditEventType.MESSAGE_DEAD_LETTERED)
    assert record.detail["message_id"] == msg.message_id
    assert seen.attempts.count(("bob", "failed")) == 3
    assert await po.mailbox_size("bob") == 0
    assert dispatcher.stats() == {"bob": {"delivered": 0, "dead_lettered": 1}}


async def test_a_webhook_per_subscription_takes_its_topics_and_the_default_the_rest(
    env: Env, tmp_path: Path, secret_file: Path
) -> None:
    po = office(env)
    alice, bob = await register(po, "alice"), await register(po, "bob")
    billing, default = HookServer(free_port()), HookServer(free_port())
    billing.start()
    default.start()
    hooks = [
        WebhookSettings(url=billing.url, secret_file=secret_file, topics=["billing.*"]),
        WebhookSettings(url=default.url, secret_file=secret_file),
    ]
    dispatcher = WebhookDispatcher(po, {"bob": hooks})
    await dispatcher.start()
    try:
        await po.subscribe(bob.token, "billing.invoice")
        invoice = alice.message("billing.invoice", {"n": 1})
        topic = SendOptions(kind="topic", topic="billing.invoice")
        await po.publish(alice.token, "billing.invoice", invoice, signature=alice.sign(invoice, topic))
        direct = alice.message("bob", "hi")
        await po.send(alice.token, direct, signature=alice.sign(direct))
        await until(lambda: billing.requests and default.requests, "both webhooks called")
    finally:
        await dispatcher.stop()
        billing.stop()
        default.stop()
    assert [json.loads(r[2])["message_id"] for r in billing.requests] == [invoice.message_id]
    assert [json.loads(r[2])["message_id"] for r in default.requests] == [direct.message_id]


def test_webhook_settings_name_bad_fields(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        WebhookSettings.parse(
            {"url": "ftp://example.com/x", "secret_file": str(tmp_path / "s"), "max_attempts": 0}
        )
    assert {p.field for p in err.value.problems} == {"url", "max_attempts"}
    with pytest.raises(InvalidInput) as err:
        WebhookSettings(url="http://127.0.0.1:1/x", secret_file=tmp_path / "missing").read_secret()
    assert err.value.field == "secret_file"
