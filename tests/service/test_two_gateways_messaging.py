"""Two ``agency serve --config`` processes on one Redis share the mailboxes: delivered once.

Both gateways read the same definition file (Redis storage under a unique key prefix,
two messaging agents, the flow ``alice > bob``); ``AGENCY_NODE_ID`` and
``AGENCY_AUDIT_DIR`` give each its own audit log, as a deployment's environment would.
Delivery is at-least-once: a pulled message is hidden from every consumer until it is
acknowledged (through either gateway) or its visibility timeout runs out.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from gateway_processes import GatewayProcess, start_gateway, start_gateways

from middleware._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from middleware.messaging import SendOptions, generate_key, public_key_b64, sign_message
from middleware.redis.keys import subscriptions as subscription_keys
from middleware.server.grpc_api.message_servicer import smf_to_pb
from middleware.server.settings import hash_token
from middleware.smf import SMFMessage

pytestmark = pytest.mark.timeout(90)

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: Seconds a pulled, unacknowledged message stays hidden (short, for the redelivery test).
VISIBILITY = 2.0


@dataclass
class Agent:
    name: str
    token: str = field(repr=False)
    key: Any = field(repr=False)

    @property
    def auth(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def publish_request(self, topic: str, content: Any) -> messages_pb2.SendMessageRequest:
        request = self.send_request(topic, content, SendOptions(kind="topic", topic=topic))
        request.topic = topic
        return request

    def send_request(
        self, receiver: str, content: Any, options: SendOptions | None = None
    ) -> messages_pb2.SendMessageRequest:
        msg = SMFMessage.parse(
            {
                "sender": self.name,
                "receiver": receiver,
                "content": content,
                "metadata": {
                    "provenance": {"source": self.name, "reliability_score": 0.9},
                    "freshness_ttl": 600,
                    "confidence_score": 0.9,
                    "intention_trace": ["GOAL_TEST_001"],
                },
            }
        )
        return messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg),
            signature=sign_message(self.key, msg, options),
            content_type="application/json",
        )


@dataclass
class Gateway:
    """A running gateway process with a channel to its MessageService and its /metrics."""

    process: GatewayProcess
    channel: grpc.aio.Channel

    @property
    def name(self) -> str:
        return self.process.node

    @property
    def messages(self) -> messages_pb2_grpc.MessageServiceStub:
        return messages_pb2_grpc.MessageServiceStub(self.channel)

    async def metric(self, name: str, labels: str) -> float | None:
        found = re.search(r"metrics on (\S+)", self.process.output())
        assert found, self.process.output()
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(found.group(1), timeout=10).read())
        match = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text.decode(), re.M)
        return float(match.group(1)) if match else None


@pytest.fixture
async def gateways(
    tmp_path: Path, redis_client: Any, redis_prefix: str
) -> AsyncIterator[tuple[Gateway, Gateway, Agent, Agent, Agent]]:
    alice = Agent("alice", f"tok-{uuid.uuid4().hex}", generate_key())
    bob = Agent("bob", f"tok-{uuid.uuid4().hex}", generate_key())
    carol = Agent("carol", f"tok-{uuid.uuid4().hex}", generate_key())
    definition = tmp_path / "agency.yaml"
    definition.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "server": {"address": "127.0.0.1:0", "metrics_address": "127.0.0.1:0"},
                "storage": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix},
                "messaging": {
                    "agents": [
                        {
                            "name": a.name,
                            "public_key": public_key_b64(a.key),
                            "token_sha256": hash_token(a.token),
                        }
                        for a in (alice, bob, carol)
                    ],
                    "flows": ["alice > bob", "carol > bob"],
                    "registration": {"mode": "open"},
                    "delivery": {"visibility_timeout": VISIBILITY},
                    # carol may send 3 messages, then one per 100 s: whichever gateway she uses
                    "rate_limits": {"sender": [{"match": "carol", "rate": 0.01, "burst": 3}]},
                },
            }
        )
    )
    processes = await start_gateways(definition, ["gw-1", "gw-2"], tmp_path)
    gws = [Gateway(p, grpc.aio.insecure_channel(p.address)) for p in processes]
    try:
        for gw in gws:
            assert "mailboxes: redis" in gw.process.output()
        yield gws[0], gws[1], alice, bob, carol
    finally:
        for gw in gws:
            await gw.channel.close()
        for gw in gws:
            assert await gw.process.stop() == 0, gw.process.output()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
    for gw in gws:  # each gateway kept its own audit log
        assert list((tmp_path / gw.name / "audit" / gw.name).glob("*.wal*"))


async def test_messages_sent_through_one_gateway_are_delivered_once_across_both(gateways) -> None:
    gw1, gw2, alice, bob, _ = gateways
    bob_pull = messages_pb2.PullRequest

    # One message, sent through gateway 1, is in the shared mailbox: gateway 2 hands it out ...
    sent = await gw1.messages.Send(alice.send_request("bob", {"n": 0}), metadata=alice.auth)
    assert list(sent.recipients) == ["bob"]
    assert await gw1.metric("agency_mailbox_depth", 'mailbox="bob"') == 1
    got = await gw2.messages.Pull(
        bob_pull(max_messages=5, wait_seconds=5, consumer="bob@gw-2"), metadata=bob.auth
    )
    (first,) = got.messages
    assert first.message.message_id == sent.message_id and first.delivery_count == 1
    # ... and while it is in flight gateway 1 has nothing for bob
    assert not (await gw1.messages.Pull(bob_pull(consumer="bob@gw-1"), metadata=bob.auth)).messages
    # the acknowledgement may go through either gateway: it removes the message for both
    ack = await gw1.messages.Ack(messages_pb2.AckRequest(receipts=[first.receipt]), metadata=bob.auth)
    assert ack.acknowledged == 1
    assert await gw1.metric("agency_mailbox_depth", 'mailbox="bob"') == 0

    # Many messages, consumers on both gateways at once: each message reaches exactly one.
    ids = []
    for n in range(1, 21):
        ids.append(
            (await gw1.messages.Send(alice.send_request("bob", {"n": n}), metadata=alice.auth)).message_id
        )
    received: list[tuple[str, str, int]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30

    async def consume(gw: Gateway) -> None:
        while len(received) < len(ids) and loop.time() < deadline:
            reply = await gw.messages.Pull(
                bob_pull(max_messages=3, wait_seconds=0.5, consumer=f"bob@{gw.name}"), metadata=bob.auth
            )
            for m in reply.messages:
                received.append((m.message.message_id, gw.name, m.delivery_count))
            if reply.messages:
                receipts = [m.receipt for m in reply.messages]
                done = await gw.messages.Ack(messages_pb2.AckRequest(receipts=receipts), metadata=bob.auth)
                assert done.acknowledged == len(receipts)

    await asyncio.gather(consume(gw1), consume(gw2))
    assert sorted(r[0] for r in received) == sorted(ids)  # none lost, none twice
    assert {r[2] for r in received} == {1}  # nothing was handed out a second time
    for gw in (gw1, gw2):
        assert not (await gw.messages.Pull(bob_pull(consumer=f"bob@{gw.name}"), metadata=bob.auth)).messages

    # the flows hold on every replica: bob may not message alice
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gw2.messages.Send(bob.send_request("alice", "hi"), metadata=bob.auth)
    assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED


async def test_an_unacknowledged_message_is_redelivered_by_the_other_gateway(gateways) -> None:
    gw1, gw2, alice, bob, _ = gateways
    sent = await gw1.messages.Send(alice.send_request("bob", "pay invoice 7"), metadata=alice.auth)
    got = await gw1.messages.Pull(
        messages_pb2.PullRequest(wait_seconds=5, consumer="bob@gw-1"), metadata=bob.auth
    )
    (lost,) = got.messages  # bob's consumer on gateway 1 takes it and never acknowledges it

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10 * VISIBILITY
    again: list[Any] = []
    while not again:  # poll the other gateway (a separate process) until the timeout runs out
        assert loop.time() < deadline, "never redelivered"
        reply = await gw2.messages.Pull(
            messages_pb2.PullRequest(wait_seconds=0.5, consumer="bob@gw-2"), metadata=bob.auth
        )
        again = list(reply.messages)
    (redelivered,) = again
    assert redelivered.message.message_id == sent.message_id == lost.message.message_id
    assert redelivered.delivery_count == 2
    done = await gw2.messages.Ack(messages_pb2.AckRequest(receipts=[redelivered.receipt]), metadata=bob.auth)
    assert done.acknowledged == 1
    # the first consumer's late ack finds nothing pending: the message took effect once
    late = await gw1.messages.Ack(messages_pb2.AckRequest(receipts=[lost.receipt]), metadata=bob.auth)
    assert late.acknowledged == 0
    for gw in (gw1, gw2):
        reply = await gw.messages.Pull(messages_pb2.PullRequest(consumer=f"bob@{gw.name}"), metadata=bob.auth)
        assert not reply.messages
    assert json.loads(redelivered.message.content_json) == "pay invoice 7"


async def test_rate_limits_are_shared_by_the_gateways(gateways) -> None:
    gw1, gw2, _, bob, carol = gateways
    for gw in (gw1, gw2, gw1):  # the burst of 3, spread over both gateways
        await gw.messages.Send(carol.send_request("bob", "status"), metadata=carol.auth)
    for gw in (gw2, gw1):  # then each gateway refuses her: they share one bucket in Redis
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gw.messages.Send(carol.send_request("bob", "status"), metadata=carol.auth)
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(err.value.trailing_metadata() or ())
        assert int(str(trailers["agency-retry-after-ms"])) > 1000
    got = await gw2.messages.Pull(
        messages_pb2.PullRequest(max_messages=10, wait_seconds=5), metadata=bob.auth
    )
    assert len(got.messages) == 3


async def test_a_subscription_made_through_one_gateway_holds_on_the_other_and_after_a_restart(
    gateways, tmp_path: Path, redis_client: Any, redis_prefix: str
) -> None:
    gw1, gw2, alice, bob, _ = gateways
    # bob subscribes through gateway 1 (and reads his mailbox through that stream)
    stream = gw1.messages.Subscribe(messages_pb2.SubscribeRequest(topics=["task.execute"]), metadata=bob.auth)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not await redis_client.sismember(subscription_keys.topic(redis_prefix, "task.execute"), "bob"):
        assert loop.time() < deadline, "the subscription never reached the shared store"
        await asyncio.sleep(0.02)

    # published through gateway 2, which never saw the Subscribe call: bob gets his copy
    sent = await gw2.messages.Send(alice.publish_request("task.execute", {"n": 1}), metadata=alice.auth)
    assert list(sent.recipients) == ["bob"]
    copy = await asyncio.wait_for(stream.read(), 10)
    assert copy.kind == "topic" and copy.message.message_id == sent.message_id
    await gw1.messages.Ack(messages_pb2.AckRequest(receipts=[copy.receipt]), metadata=bob.auth)
    stream.cancel()  # the subscription outlives the stream

    # a restarted gateway still knows it (the subscription is in Redis, not in a process)
    assert await gw2.process.stop() == 0
    restarted = await start_gateway(tmp_path / "agency.yaml", "gw-3", tmp_path)
    try:
        async with grpc.aio.insecure_channel(restarted.address) as channel:
            messages = messages_pb2_grpc.MessageServiceStub(channel)
            again = await messages.Send(alice.publish_request("task.execute", {"n": 2}), metadata=alice.auth)
            assert list(again.recipients) == ["bob"]
            drifted = await messages.Send(
                alice.publish_request("task.execute.v2", {"n": 3}), metadata=alice.auth
            )
            assert list(drifted.recipients) == []  # nobody subscribes there: drift, as before
    finally:
        assert await restarted.stop() == 0, restarted.output()


async def test_an_agent_registered_through_one_gateway_works_through_the_other_until_deregistered(
    gateways,
) -> None:
    from middleware.client.messaging import MessagingClient, register_agent
    from middleware.errors import Unauthenticated

    gw1, gw2, alice, _, _ = gateways
    creds, info = await register_agent(
        "newcomer", gw1.process.address, description="Checks invoices", subscribes=["invoice.new"]
    )
    assert info.status == "active"
    # the flows bind direct messages to the file's agents; a registered agent is reached by topic
    sent = await gw2.messages.Send(alice.publish_request("invoice.new", "invoice 7"), metadata=alice.auth)
    assert list(sent.recipients) == ["newcomer"]
    async with (
        MessagingClient(creds, gw2.process.address) as on_two,
        MessagingClient(creds, gw1.process.address) as on_one,
    ):
        (got,) = await on_two.pull(wait=5)
        assert got.message.content == "invoice 7"
        (found,) = await on_one.find_agents("invoices")
        assert found.name == "newcomer" and found.last_seen is not None
        assert await on_one.deregister() is True
        with pytest.raises(Unauthenticated):
            await on_two.pull()
