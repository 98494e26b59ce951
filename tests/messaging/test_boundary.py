"""What the post office refuses at its boundaries: stale or future messages, unsigned
delivery fields, messages found in the wrong mailbox (issue 13 item 8, issue 14 item 11)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from middleware.audit.record import AuditEventType
from middleware.errors import InvalidInput, PermissionDenied
from middleware.messaging import Envelope, PostOfficeConfig, SendOptions

from .helpers import VISIBILITY, Env, register


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def test_a_stale_message_is_refused_naming_created_at_and_audited(env: Env) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    old = a.message("bob", "old news", created_at="2020-01-01T00:00:00Z")  # fresh for 600 s
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, old, signature=a.sign(old))
    assert err.value.field == "created_at" and "stale" in err.value.message
    assert err.value.details["cause"] == "STALE"
    (refused,) = env.events(AuditEventType.MESSAGE_REJECTED)
    assert refused.detail["message_id"] == old.message_id and refused.rule == "INVALID_INPUT"
    assert "stale" in refused.detail["why"]
    assert await po.mailbox_size("bob") == 0


async def test_a_message_from_the_future_beyond_the_clock_skew_is_refused(env: Env) -> None:
    po = env.office(config=PostOfficeConfig(visibility_timeout=VISIBILITY, max_clock_skew=30))
    a, b = await register(po, "alice"), await register(po, "bob")
    far = a.message("bob", "from 2099", created_at="2099-01-01T00:00:00Z")
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, far, signature=a.sign(far))
    assert err.value.field == "created_at" and "in the future" in err.value.message
    assert err.value.details["cause"] == "FROM_THE_FUTURE"
    just_over = a.message("bob", "31 s ahead", created_at=_at(env.clock() + 31))
    with pytest.raises(InvalidInput):
        await po.send(a.token, just_over, signature=a.sign(just_over))
    # within the skew, either way: accepted
    ahead = a.message("bob", "29 s ahead", created_at=_at(env.clock() + 29))
    behind = a.message("bob", "sender's clock 29 s behind", created_at=_at(env.clock() - 600 - 29))
    for m in (ahead, behind):
        assert (await po.send(a.token, m, signature=a.sign(m))).recipients == ("bob",)
    assert len(await po.pull(b.token)) == 2
    assert len(env.events(AuditEventType.MESSAGE_REJECTED)) == 2


@pytest.mark.parametrize("ttl", [0.0, float("inf"), float("nan"), 10 * 366 * 86400.0])
async def test_a_freshness_ttl_of_zero_infinity_nan_or_too_long_is_refused(env: Env, ttl: float) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "x")
    # model_construct: the value as a remote client could put it on the wire (a proto double)
    bad = msg.model_copy(update={"metadata": msg.metadata.model_copy(update={"freshness_ttl": ttl})})
    with pytest.raises(InvalidInput) as err:
        await po.send(a.token, bad, signature=a.sign(bad))
    assert err.value.field == "metadata.freshness_ttl"
    (refused,) = env.events(AuditEventType.MESSAGE_REJECTED)
    assert refused.detail["message_id"] == msg.message_id


async def test_content_that_goes_stale_in_the_mailbox_is_dropped_as_expired(env: Env) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "quote valid 10 min")  # freshness_ttl 600 s; TTL default 1 h
    await po.send(a.token, msg, signature=a.sign(msg))
    env.clock.advance(600 + po.config.max_clock_skew + 1)
    assert await po.pull(b.token) == []
    (expired,) = env.events(AuditEventType.MESSAGE_EXPIRED)
    assert expired.detail["message_id"] == msg.message_id


# ---------------------------------------------------------------- issue 14 item 11
@pytest.mark.parametrize(
    "tamper",
    [
        {"trigger_turn": True},
        {"params": {"priority": "high", "approve": True}},
        {"ttl": 7 * 86400.0, "expires_at": 4_000_000_000.0},
        {"kind": "broadcast"},
    ],
    ids=["trigger_turn", "params", "ttl", "kind"],
)
async def test_delivery_fields_altered_in_the_transport_are_refused_on_receipt(
    env: Env, tamper: dict[str, object]
) -> None:
    po = env.office()
    a, b = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "for your information")
    if tamper.get("kind") == "broadcast":  # a broadcast names "*" as receiver
        msg = a.message("*", "for your information")
    signed = Envelope(
        message=msg, signature=a.sign(msg), expires_at=env.clock() + 60, trigger_turn=False, params={}
    )
    altered = signed.model_copy(update=tamper)
    await env.transport.enqueue("bob", altered.model_dump_json().encode(), max_len=100)
    assert await po.pull(b.token) == []
    (dead,) = await po.dead_letters(b.token)
    assert dead.reason == "signature does not verify"
    (forged,) = env.events(AuditEventType.MESSAGE_FORGED)
    assert forged.detail["stage"] == "receive"


async def test_a_signed_message_found_in_another_agents_mailbox_is_not_delivered(env: Env) -> None:
    po = env.office()
    a, b, _ = await register(po, "alice"), await register(po, "bob"), await register(po, "carol")
    for_carol = a.message("carol", "carol's salary")
    envelope = Envelope(message=for_carol, signature=a.sign(for_carol), expires_at=env.clock() + 60)
    await env.transport.enqueue("bob", envelope.model_dump_json().encode(), max_len=100)
    assert await po.pull(b.token) == []
    (dead,) = await po.dead_letters(b.token)
    assert dead.reason == "addressed to 'carol', found in 'bob''s mailbox"
    (forged,) = env.events(AuditEventType.MESSAGE_FORGED)
    assert forged.detail["cause"] == "MISADDRESSED" and forged.detail["mailbox"] == "bob"


async def test_a_signature_made_for_other_delivery_fields_is_refused_on_send(env: Env) -> None:
    po = env.office()
    a, _ = await register(po, "alice"), await register(po, "bob")
    msg = a.message("bob", "run the report")
    notify_only = a.sign(msg)  # signed as notify, sent as wake
    with pytest.raises(PermissionDenied) as err:
        await po.send(a.token, msg, signature=notify_only, trigger_turn=True)
    assert err.value.details["cause"] == "BAD_SIGNATURE"
    with pytest.raises(PermissionDenied):  # params added by someone in between
        await po.send(a.token, msg, signature=notify_only, params={"amount": 10_000})
    with pytest.raises(PermissionDenied):  # a longer life than signed
        await po.send(a.token, msg, signature=a.sign(msg, SendOptions(ttl=60)), ttl=3600)
    ok = await po.send(a.token, msg, signature=a.sign(msg, SendOptions(ttl=60.0)), ttl=60)
    assert ok.recipients == ("bob",)
