"""The post office over both transports: delivery, redelivery, dedupe, dead letters, TTL, trust."""

from __future__ import annotations

import asyncio

import pytest

from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput, NotFound, PermissionDenied, ResourceExhausted, Unauthenticated
from middleware.messaging import (
    BROADCAST,
    Envelope,
    Flows,
    PostOfficeConfig,
    RateLimiter,
    SendOptions,
    TopicACL,
    generate_key,
    sign_message,
)
from middleware.smf import SMFMessage

from .helpers import VISIBILITY, Agent, Env, register


def config(**overrides: object) -> PostOfficeConfig:
    return PostOfficeConfig(visibility_timeout=VISIBILITY, **overrides)  # type: ignore[arg-type]


async def test_point_to_point_roundtrip_is_audited_and_acked(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", {"task": "review", "id": 7})
    result = await po.send(
        a.token,
        msg,
        signature=a.sign(msg, SendOptions(params={"priority": "high"})),
        params={"priority": "high"},
    )
    assert result.recipients == ("bob",)

    got = await po.pull(b.token)
    assert [r.message for r in got] == [msg]
    assert got[0].delivery_count == 1 and got[0].kind == "direct" and got[0].params == {"priority": "high"}
    assert await po.ack(b.token, [got[0].receipt]) == 1
    assert await po.mailbox_size("bob") == 0
    assert await po.pull(b.token) == []

    accepted = env.events(AuditEventType.MESSAGE_ACCEPTED)
    assert [r.detail["message_id"] for r in accepted] == [msg.message_id]
    assert accepted[0].actors.agent == "alice" and accepted[0].trace_id == msg.trace_id


async def test_unacked_message_is_redelivered_to_another_consumer_after_the_visibility_timeout(
    env: Env,
) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob")
    await po.send(a.token, msg, signature=a.sign(msg))

    first = await po.pull(b.token, consumer="worker-1")  # worker-1 dies holding it
    assert [r.message.message_id for r in first] == [msg.message_id]
    assert await po.pull(b.token, consumer="worker-2") == []  # still invisible

    again = await env.after_visibility(lambda: po.pull(b.token, consumer="worker-2"), bool)
    assert [(r.message.message_id, r.delivery_count) for r in again] == [(msg.message_id, 2)]
    assert await po.ack(b.token, [again[0].receipt]) == 1
    await env.pass_visibility()
    assert await po.pull(b.token, consumer="worker-3") == []


async def test_a_message_already_processed_is_skipped_when_it_arrives_again(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "charge the card once")
    await po.send(a.token, msg, signature=a.sign(msg))
    effects = []
    for r in await po.pull(b.token):
        effects.append(r.message.content)
        await po.ack(b.token, [r.receipt])

    # The sender retried (or a failover replayed it): the same message id arrives again.
    await po.send(a.token, msg, signature=a.sign(msg))
    for r in await po.pull(b.token):
        effects.append(r.message.content)
    assert effects == ["charge the card once"]
    assert await po.mailbox_size("bob") == 0  # the copy was acknowledged, not left to rot
    dup = env.events(AuditEventType.MESSAGE_DUPLICATE)
    assert [d.detail["message_id"] for d in dup] == [msg.message_id]


async def test_after_max_deliveries_a_message_goes_to_the_dead_letter_list_with_the_reason(env: Env) -> None:
    po = env.office(config=config(max_deliveries=2))
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob")
    await po.send(a.token, msg, signature=a.sign(msg))

    assert len(await po.pull(b.token)) == 1
    second = await env.after_visibility(lambda: po.pull(b.token), bool)
    assert [r.delivery_count for r in second] == [2]
    third = await env.after_visibility(
        lambda: po.pull(b.token), lambda _: bool(env.events(AuditEventType.MESSAGE_DEAD_LETTERED))
    )
    assert third == []
    dead = await po.dead_letters(b.token)
    assert [(d.message.message_id if d.message else None, d.reason) for d in dead] == [
        (msg.message_id, "not acknowledged after 2 deliveries")
    ]
    assert await po.mailbox_size("bob") == 0
    (record,) = env.events(AuditEventType.MESSAGE_DEAD_LETTERED)
    assert record.detail["message_id"] == msg.message_id and record.detail["delivery_count"] == 3


async def test_resending_an_unacknowledged_message_does_not_reset_its_delivery_count(env: Env) -> None:
    """Issue 26: a retrying sender reset the count to 1 and kept a poison message from the DLQ."""
    po = env.office(config=config(max_deliveries=2))
    a, b = await register(po, "alice"), await register(po, "bob")
    poison = a.message("bob", "crashes every consumer")
    await po.send(a.token, poison, signature=a.sign(poison))
    assert [r.delivery_count for r in await po.pull(b.token)] == [1]  # the consumer dies
    await po.send(a.token, poison, signature=a.sign(poison))  # the sender retries, not knowing
    assert await po.mailbox_size("bob") == 1  # still one message, not a fresh copy
    second = await env.after_visibility(lambda: po.pull(b.token), bool)
    assert [r.delivery_count for r in second] == [2]
    await po.send(a.token, poison, signature=a.sign(poison))  # and again
    third = await env.after_visibility(
        lambda: po.pull(b.token), lambda _: bool(env.events(AuditEventType.MESSAGE_DEAD_LETTERED))
    )
    assert third == []
    dead = await po.dead_letters(b.token)
    assert [(d.message.message_id if d.message else None) for d in dead] == [poison.message_id]
    assert await po.mailbox_size("bob") == 0
    # once dead-lettered (or acknowledged), the same id may be sent again as a new message
    await po.send(a.token, poison, signature=a.sign(poison))
    assert [r.delivery_count for r in await env.after_visibility(lambda: po.pull(b.token), bool)] == [1]
    other = await register(po, "carol")  # another sender's message with the same id is its own
    same_id = other.message("bob", "mine").model_copy(update={"message_id": poison.message_id})
    await po.send(other.token, same_id, signature=other.sign(same_id))
    assert await po.mailbox_size("bob") == 2


async def test_an_expired_message_is_dropped_and_recorded(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    old = a.message("bob", "stale")
    await po.send(a.token, old, signature=a.sign(old, SendOptions(ttl=10)), ttl=10)
    env.clock.advance(11)
    fresh = a.message("bob", "fresh")  # the TTL counts from created_at
    await po.send(a.token, fresh, signature=a.sign(fresh, SendOptions(ttl=10)), ttl=10)

    got = await po.pull(b.token)
    assert [r.message.content for r in got] == ["fresh"]
    (expired,) = env.events(AuditEventType.MESSAGE_EXPIRED)
    assert expired.detail["message_id"] == old.message_id
    assert await po.mailbox_size("bob") == 1  # only the fresh one, still unacknowledged


async def test_ttl_must_be_positive_and_bounded(env: Env) -> None:
    po = env.office(config=config(max_ttl=100))
    a, _ = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob")
    for bad in (0, -1, 101):
        with pytest.raises(InvalidInput) as err:
            await po.send(a.token, msg, signature=a.sign(msg, SendOptions(ttl=bad)), ttl=bad)
        assert err.value.field == "ttl"


async def test_a_full_mailbox_refuses_with_resource_exhausted(env: Env) -> None:
    po = env.office(config=config(mailbox_max=2))
    a, b = await register(po, "alice"), await register(po, "bob")
    for i in range(2):
        m = a.message("bob", i)
        await po.send(a.token, m, signature=a.sign(m))
    m = a.message("bob", "one too many")
    with pytest.raises(ResourceExhausted) as err:
        await po.send(a.token, m, signature=a.sign(m))
    assert "full" in err.value.message or "bound" in err.value.message
    assert env.events(AuditEventType.MESSAGE_REJECTED)[-1].detail["message_id"] == m.message_id
    # Acknowledging makes room again.
    got = await po.pull(b.token)
    await po.ack(b.token, [r.receipt for r in got])
    await po.send(a.token, m, signature=a.sign(m))


async def test_an_oversized_payload_is_refused_with_advice_to_send_a_reference(env: Env) -> None:
    po = env.office(config=config(max_payload_bytes=1024))
    a, _ = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "x" * 2000)
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, msg, signature=a.sign(msg))
    assert err.value.field == "content"
    text = err.value.message
    assert "1024-byte limit" in text and "url" in text and "sha256" in text
    assert await po.mailbox_size("bob") == 0


async def test_forged_and_altered_messages_are_refused_and_audited(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "pay 10")
    with pytest.raises(PermissionDenied):  # signed with someone else's key
        await po.send(a.token, msg, signature=sign_message(generate_key(), msg))
    altered = msg.model_copy(update={"content": "pay 1000"})
    with pytest.raises(PermissionDenied) as err:  # signature of the original, content changed
        await po.send(a.token, altered, signature=a.sign(msg))
    assert err.value.details["cause"] == "BAD_SIGNATURE"
    with pytest.raises(PermissionDenied):  # unsigned
        await po.send(a.token, msg)
    assert await po.mailbox_size("bob") == 0
    forged = env.events(AuditEventType.MESSAGE_FORGED)
    assert len(forged) == 3 and {f.detail["stage"] for f in forged} == {"send"}
    assert await po.pull(b.token) == []


async def test_a_message_altered_inside_the_transport_is_rejected_on_receipt(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "pay 10")
    tampered = Envelope(
        message=msg.model_copy(update={"content": "pay 1000"}),
        signature=a.sign(msg),
        expires_at=env.clock() + 60,
    )
    await env.transport.enqueue("bob", tampered.model_dump_json().encode(), max_len=10)
    assert await po.pull(b.token) == []
    (forged,) = env.events(AuditEventType.MESSAGE_FORGED)
    assert forged.detail["stage"] == "receive" and forged.detail["claimed_sender"] == "alice"
    assert [d.reason for d in await po.dead_letters(b.token)] == ["signature does not verify"]


async def test_every_call_needs_a_valid_token_and_the_sender_must_be_the_tokens_agent(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob")
    for bad in (None, "", "agt_not-a-real-token"):
        with pytest.raises(Unauthenticated):
            await po.send(bad, msg, signature=a.sign(msg))
        with pytest.raises(Unauthenticated):
            await po.pull(bad)
        with pytest.raises(Unauthenticated):
            await po.ack(bad, ["1|x"])
    as_bob = b.message("alice")
    with pytest.raises(PermissionDenied, match="cannot send as"):
        await po.send(a.token, as_bob, signature=b.sign(as_bob))
    with pytest.raises(NotFound):
        m = a.message("nobody")
        await po.send(a.token, m, signature=a.sign(m))
    # Only the token's hash is kept.
    assert a.token not in repr(vars(po.identity.get("alice")))


async def test_agents_enrolled_with_an_out_of_band_token_hash_authenticate_with_the_token(env: Env) -> None:
    from middleware.errors import AlreadyExists
    from middleware.messaging import public_key_b64
    from middleware.server.settings import hash_token

    po = env.office()
    key = generate_key()
    await po.enroll("alice", public_key_b64(key), hash_token("alice-secret").upper(), description="d")
    b = await register(po, "bob")
    msg = Agent("alice", "alice-secret", key, env.clock).message("bob")
    assert (await po.send("alice-secret", msg, signature=sign_message(key, msg))).recipients == ("bob",)
    assert (await po.pull(b.token))[0].message.message_id == msg.message_id
    with pytest.raises(AlreadyExists):  # the name is taken
        po.identity.enroll("alice", public_key_b64(generate_key()), hash_token("other"))
    with pytest.raises(AlreadyExists):  # the token belongs to someone else
        po.identity.enroll("carol", public_key_b64(generate_key()), hash_token("alice-secret"))
    with pytest.raises(InvalidInput) as err:
        po.identity.enroll("carol", public_key_b64(generate_key()), "not-a-hash")
    assert err.value.field == "token_sha256"
    assert [r.outcome for r in env.events(AuditEventType.AGENT_REGISTERED)] == ["enrolled", "registered"]


async def test_invalid_smf_is_refused_naming_the_fields(env: Env) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, {"sender": "alice", "receiver": "bob", "content": "x"}, signature="")
    assert "metadata" in {p.field for p in err.value.problems}
    assert env.events(AuditEventType.MESSAGE_REJECTED)


async def test_topics_give_each_subscriber_its_own_copy(env: Env) -> None:
    po = env.office()
    pub, s1, s2 = await register(po, "planner"), await register(po, "exec-1"), await register(po, "exec-2")
    await po.subscribe(s1.token, "task.execute")
    await po.subscribe(s2.token, "task.execute")
    msg = pub.message("task.execute", {"action": "generate_image"})
    result = await po.publish(
        pub.token,
        "task.execute",
        msg,
        signature=pub.sign(msg, SendOptions(kind="topic", topic="task.execute")),
    )
    assert sorted(result.recipients) == ["exec-1", "exec-2"]
    for sub in (s1, s2):
        (got,) = await po.pull(sub.token)
        assert got.kind == "topic" and got.topic == "task.execute" and got.message == msg
        await po.ack(sub.token, [got.receipt])
    # One subscriber acking does not take the other's copy.
    assert await po.mailbox_size("exec-1") == await po.mailbox_size("exec-2") == 0


async def test_a_full_subscriber_mailbox_does_not_cost_the_others_their_copy(env: Env) -> None:
    po = env.office(config=config(mailbox_max=1))
    pub, s1, s2 = await register(po, "planner"), await register(po, "exec-1"), await register(po, "exec-2")
    for sub in (s1, s2):
        await po.subscribe(sub.token, "task.execute")
    first = pub.message("exec-1", "fills exec-1")
    await po.send(pub.token, first, signature=pub.sign(first))
    msg = pub.message("task.execute", "for everyone")
    result = await po.publish(
        pub.token,
        "task.execute",
        msg,
        signature=pub.sign(msg, SendOptions(kind="topic", topic="task.execute")),
    )
    assert result.recipients == ("exec-2",)
    skipped = [
        r for r in env.events(AuditEventType.MESSAGE_REJECTED) if r.detail.get("recipient") == "exec-1"
    ]
    assert skipped and skipped[0].detail["message_id"] == msg.message_id


async def test_publishing_to_a_topic_nobody_subscribes_to_is_reported_as_drift(env: Env) -> None:
    drifted: list[tuple[str, str]] = []
    po = env.office(on_drift=lambda topic, sender: drifted.append((topic, sender)))
    pub = await register(po, "planner")
    sub = await register(po, "executor")
    await po.subscribe(sub.token, "task.execute")
    msg = pub.message("task.execute.v2")
    result = await po.publish(
        pub.token,
        "task.execute.v2",
        msg,
        signature=pub.sign(msg, SendOptions(kind="topic", topic="task.execute.v2")),
    )
    assert result.copies == 0
    assert drifted == [("task.execute.v2", "planner")] and po.drift["task.execute.v2"] == 1
    (record,) = env.events(AuditEventType.TOPIC_DRIFT)
    assert record.detail["topic"] == "task.execute.v2" and record.detail["message_id"] == msg.message_id


async def test_topic_names_follow_domain_action(env: Env) -> None:
    po = env.office()
    sub = await register(po, "executor")
    for bad in ("general", "Task.Execute", "task..x", ""):
        with pytest.raises(InvalidInput) as err:
            await po.subscribe(sub.token, bad)
        assert err.value.field == "topic"


async def test_topic_acls_decide_who_may_publish_and_subscribe(env: Env) -> None:
    acl = TopicACL()
    acl.allow("finance.*", publishers=["cfo"], subscribers=["auditor"])
    po = env.office(acl=acl)
    cfo, intern, auditor = (
        await register(po, "cfo"),
        await register(po, "intern"),
        await register(po, "auditor"),
    )
    with pytest.raises(PermissionDenied):
        await po.subscribe(intern.token, "finance.review")
    await po.subscribe(auditor.token, "finance.review")
    msg = intern.message("finance.review")
    with pytest.raises(PermissionDenied):
        await po.publish(
            intern.token,
            "finance.review",
            msg,
            signature=intern.sign(msg, SendOptions(kind="topic", topic="finance.review")),
        )
    msg = cfo.message("finance.review", "Q3 numbers")
    assert (
        await po.publish(
            cfo.token,
            "finance.review",
            msg,
            signature=cfo.sign(msg, SendOptions(kind="topic", topic="finance.review")),
        )
    ).recipients == ("auditor",)
    refused = [
        r for r in env.events(AuditEventType.MESSAGE_REJECTED) if r.detail.get("topic") == "finance.review"
    ]
    assert refused and refused[0].actors.agent == "intern"


async def test_broadcast_reaches_every_agent_but_the_sender(env: Env) -> None:
    po = env.office()
    ops, x, y = await register(po, "ops"), await register(po, "x"), await register(po, "y")
    msg = ops.message(BROADCAST, "maintenance at 02:00")
    assert sorted(
        (
            await po.broadcast(ops.token, msg, signature=ops.sign(msg, SendOptions(kind="broadcast")))
        ).recipients
    ) == ["x", "y"]
    for agent in (x, y):
        (got,) = await po.pull(agent.token)
        assert got.kind == "broadcast" and got.message.content == "maintenance at 02:00"
    assert await po.pull(ops.token) == []


async def test_rate_limit_refuses_with_a_retry_hint_then_recovers(env: Env) -> None:
    po = env.office(rate_limiter=RateLimiter(rate=2, burst=2, clock=env.clock))
    a, _ = await register(po, "alice"), await register(po, "bob")
    for _ in range(2):
        m = a.message("bob")
        await po.send(a.token, m, signature=a.sign(m))
    m = a.message("bob")
    with pytest.raises(ResourceExhausted) as err:
        await po.send(a.token, m, signature=a.sign(m))
    assert err.value.details["retry_after_ms"] == 500
    assert err.value.retryable
    env.clock.advance(0.5)
    await po.send(a.token, m, signature=a.sign(m))


async def test_a_pending_entry_trimmed_away_is_recorded_not_crashed_on(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    m1, m2 = a.message("bob", 1), a.message("bob", 2)
    await po.send(a.token, m1, signature=a.sign(m1))
    await po.send(a.token, m2, signature=a.sign(m2))
    assert len(await po.pull(b.token, consumer="dies")) == 2
    assert await env.transport.trim("bob", 1) == 1  # retention drops m1 while it is pending

    got = await env.after_visibility(
        lambda: po.pull(b.token, consumer="survivor"), lambda r: bool(r) and bool(env.events("message.lost"))
    )
    assert [r.message.content for r in got] == [2]
    (lost,) = env.events(AuditEventType.MESSAGE_LOST)
    assert lost.detail["mailbox"] == "bob" and lost.detail["entry"]
    await po.ack(b.token, [r.receipt for r in got])
    m3 = a.message("bob", 3)
    await po.send(a.token, m3, signature=a.sign(m3))
    assert [r.message.content for r in await po.pull(b.token)] == [3]


async def test_direct_messages_outside_the_communication_flows_are_refused_and_audited(env: Env) -> None:
    flows = Flows()
    ceo, dev = flows.agent("ceo"), flows.agent("dev")
    _ = ceo > dev
    po = env.office(flows=flows)
    c, d = await register(po, "ceo"), await register(po, "dev")
    m = c.message("dev")
    await po.send(c.token, m, signature=c.sign(m))
    back = d.message("ceo")
    with pytest.raises(PermissionDenied, match="no such communication flow"):
        await po.send(d.token, back, signature=d.sign(back))
    refused = env.events(AuditEventType.MESSAGE_REJECTED)[-1]
    assert refused.actors.agent == "dev" and refused.detail["receiver"] == "ceo"
    assert refused.rule == "PERMISSION_DENIED"


async def test_pull_can_wait_for_the_next_message(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    waiting = asyncio.ensure_future(po.pull(b.token, wait=2.0))
    await asyncio.sleep(0)  # let the pull start waiting
    m = a.message("bob", "wake up")
    await po.send(a.token, m, signature=a.sign(m))
    got = await asyncio.wait_for(waiting, 3.0)
    assert [r.message.content for r in got] == ["wake up"]


async def test_bad_receipts_are_refused(env: Env) -> None:
    po = env.office()
    b = await register(po, "bob")
    with pytest.raises(InvalidInput) as err:
        await po.ack(b.token, ["garbage"])
    assert err.value.field == "receipts[0]"


async def test_a_time_critical_message_without_a_ttl_is_refused(env: Env) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    meta = {"provenance": {"source": "alice", "reliability_score": 0.9}, "intention_trace": ["GOAL_A_001"]}
    message = {
        "sender": "alice",
        "receiver": "bob",
        "content": "quote",
        "metadata": {**meta, "domain": "finance"},
    }
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, message, signature="")
    assert err.value.field == "metadata.freshness_ttl"
    assert "time-critical domain 'finance'" in str(err.value)
    # the minimum viable set alone is enough outside a time-critical domain
    minimal = SMFMessage.parse({**message, "metadata": meta})
    await po.send(a.token, minimal, signature=a.sign(minimal))
