"""Registration and discovery (issue 19, seed 004 §2.2): an agent registers with its name,
capability description and public key; the token is returned once and only its hash kept;
topics declared; search by capability; deregistration revokes the token on every replica;
open / admin / approval modes; last seen."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from middleware import Agency
from middleware.access import Principal, Role
from middleware.audit.record import AuditEventType
from middleware.client.messaging import AgentCredentials, MessagingClient, register_agent
from middleware.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidInput,
    PermissionDenied,
    Unauthenticated,
)
from middleware.messaging import (
    PostOffice,
    SendOptions,
    generate_key,
    public_key_b64,
)
from middleware.messaging.directory import MemoryDirectory, RedisDirectory
from middleware.messaging.subscriptions import MemorySubscriptions, RedisSubscriptions
from middleware.server.grpc_api import build_server

from .helpers import Agent, Env

ADMIN = Principal(name="ops", role=Role.ADMIN)
CLIENT = Principal(name="app", role=Role.CLIENT)


def replicas(env: Env, redis_client: Any, prefix: str, mode: str = "open") -> tuple[PostOffice, PostOffice]:
    """Two post offices over the same mailboxes and, on Redis, the same directory."""
    if env.kind == "redis":
        made = [
            env.office(
                directory=RedisDirectory(redis_client, prefix=prefix),
                subscriptions=RedisSubscriptions(redis_client, prefix=prefix),
                registration=mode,
            )
            for _ in range(2)
        ]
    else:
        directory, subs = MemoryDirectory(), MemorySubscriptions()
        made = [env.office(directory=directory, subscriptions=subs, registration=mode) for _ in range(2)]
    return made[0], made[1]


async def registered(po: PostOffice, name: str, **kw: Any) -> Agent:
    key = generate_key()
    record, token = await po.register_agent(name, public_key_b64(key), **kw)
    assert record.token_sha256 != token and token not in record.model_dump_json()  # only the hash kept
    return Agent(name, token, key, po.clock)


async def test_a_registered_agent_works_on_every_replica_and_deregistration_revokes_it_everywhere(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    one, two = replicas(env, redis_client, redis_prefix)
    alice = await registered(one, "alice", description="Summarises contracts", caller=CLIENT)
    bob = await registered(
        two, "bob", description="Translates German and French", subscribes=["task.translate"]
    )
    msg = alice.message("bob", "übersetze")
    assert (await two.send(alice.token, msg, signature=alice.sign(msg))).recipients == ("bob",)
    (got,) = await one.pull(bob.token)  # bob pulls through the other replica; alice's key is found
    assert got.message.content == "übersetze"
    assert await two.subscribers("task.translate") == ["bob"]  # subscribed at registration

    assert await one.deregister_agent("", token=bob.token) is True
    for po in (one, two):
        with pytest.raises(Unauthenticated):
            await po.pull(bob.token)
    with pytest.raises(Exception, match="no registered agent 'bob'"):
        await one.send(alice.token, alice.message("bob", "x"), signature="")
    assert await one.subscribers("task.translate") == []
    outcomes = [r.outcome for r in env.events(AuditEventType.AGENT_REGISTERED)]
    assert outcomes.count("registered") == 2 and "deregistered" in outcomes


async def test_search_by_capability_and_topic_with_last_seen(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    one, two = replicas(env, redis_client, redis_prefix)
    tr = await registered(one, "translator", description="Translates German and French", publishes=["task.*"])
    await registered(one, "summariser", description="Summarises contracts", subscribes=["docs.new"])
    found = await two.find_agents("german TRANSLATES")
    assert [(r.name, seen) for r, seen in found] == [("translator", None)]  # never called yet
    await two.pull(tr.token)
    ((_record, seen),) = await one.find_agents("translates")
    assert seen == env.clock()  # last seen: that pull, through the other replica
    assert [r.name for r, _ in await one.find_agents(topic="docs.new")] == ["summariser"]
    assert [r.name for r, _ in await one.find_agents(topic="task.run")] == ["translator"]
    # declared topics bind: the translator may publish task.* only
    msg = tr.message("docs.new", "x")
    with pytest.raises(PermissionDenied, match="declared it publishes"):
        await one.publish(
            tr.token, "docs.new", msg, signature=tr.sign(msg, SendOptions(kind="topic", topic="docs.new"))
        )


async def test_modes_closed_admin_and_approval(env: Env, redis_client: Any, redis_prefix: str) -> None:
    key = public_key_b64(generate_key())
    closed = env.office()
    with pytest.raises(FailedPrecondition, match="registration is closed"):
        await closed.register_agent("x", key)
    admin_only, _ = replicas(env, redis_client, redis_prefix + "a:", mode="admin")
    with pytest.raises(PermissionDenied):
        await admin_only.register_agent("x", key, caller=CLIENT)
    with pytest.raises(PermissionDenied):
        await admin_only.register_agent("x", key)  # no gateway auth at all
    assert (await admin_only.register_agent("x", key, caller=ADMIN))[0].registered_by == "ops"

    gate, other = replicas(env, redis_client, redis_prefix + "b:", mode="approval")
    pending = await registered(gate, "newcomer", description="does things")
    assert (await gate.directory.get("newcomer")).status == "pending"
    with pytest.raises(Unauthenticated, match="awaits an admin's approval"):
        await other.pull(pending.token)
    assert [r.name for r, _ in await other.find_agents()] == []
    assert [r.name for r, _ in await other.find_agents(include_pending=True)] == ["newcomer"]
    with pytest.raises(PermissionDenied):
        await other.approve_agent("newcomer", caller=CLIENT)
    await other.approve_agent("newcomer", caller=ADMIN)
    assert await gate.pull(pending.token) == []
    outcomes = [r.outcome for r in env.events(AuditEventType.AGENT_REGISTERED)]
    assert "pending" in outcomes and "approved" in outcomes and outcomes.count("refused") >= 3


async def test_bad_registrations_are_refused_naming_fields_and_audited(env: Env) -> None:
    po = env.office(registration="open")
    with pytest.raises(InvalidInput) as err:
        await po.register_agent("bad name!", "not-a-key", subscribes=["NoTopic"], publishes=["a"])
    assert {p.field for p in err.value.problems} == {"name", "public_key", "subscribes[0]", "publishes[0]"}
    await registered(po, "alice")
    with pytest.raises(AlreadyExists):
        await registered(po, "alice")
    enrolled_key = generate_key()
    await po.enroll("from_file", public_key_b64(enrolled_key), "a" * 64)
    with pytest.raises(AlreadyExists):
        await registered(po, "from_file")
    with pytest.raises(FailedPrecondition, match="definition file"):
        await po.deregister_agent("from_file", caller=ADMIN)
    other = await registered(po, "mallory")
    with pytest.raises(PermissionDenied, match="may deregister itself only"):
        await po.deregister_agent("alice", token=other.token)
    assert len([r for r in env.events(AuditEventType.AGENT_REGISTERED) if r.outcome == "refused"]) == 3


# ---------------------------------------------------------------- over gRPC, with the client
@pytest.fixture
async def served(env: Env) -> AsyncIterator[tuple[str, PostOffice]]:
    # the real clock: the client stamps its messages with it
    po = PostOffice(env.transport, audit=env.audit, subscriptions=env.subscriptions, registration="open")
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=po)
    await server.start()
    yield f"127.0.0.1:{server.port}", po
    await server.stop(0)


async def test_register_find_talk_and_deregister_through_the_public_client(env: Env, served: Any) -> None:
    address, _ = served
    creds, info = await register_agent(
        "translator", address, description="Translates German", subscribes=["task.translate"]
    )
    assert info.status == "active" and info.subscribes == ("task.translate",)
    asker, _ = await register_agent("asker", address, description="Asks")
    async with MessagingClient(asker, address) as a, MessagingClient(creds, address) as t:
        (match,) = await a.find_agents("german")
        assert match.name == "translator"
        await a.send("translator", "hallo")
        assert [r.message.content for r in await t.pull(wait=5)] == ["hallo"]
        (seen,) = await a.find_agents("german")
        assert seen.last_seen is not None
        assert await t.deregister() is True
        with pytest.raises(Unauthenticated):
            await t.pull()
    with pytest.raises(AlreadyExists):
        await register_agent("asker", address)
    with pytest.raises(InvalidInput) as err:
        await register_agent("bad name", address)
    assert err.value.field == "name"


async def test_registration_over_grpc_is_closed_by_default(env: Env) -> None:
    server = build_server(Agency(audit=env.audit), "127.0.0.1:0", post_office=PostOffice(env.transport))
    await server.start()
    try:
        with pytest.raises(FailedPrecondition):
            await register_agent("x", f"127.0.0.1:{server.port}")
        stranger = AgentCredentials.generate("x")
        async with MessagingClient(stranger, f"127.0.0.1:{server.port}") as c:
            with pytest.raises(Unauthenticated):
                await c.deregister()
    finally:
        await server.stop(0)


# ---------------------------------------------------------------- issue 26: names and quotas
async def test_reserved_prefixes_are_refused_in_any_spelling_that_looks_like_them(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    """The report: ``human:eve`` (people's mailboxes) and ``runtime.watcher:x`` were accepted."""
    one, _ = replicas(env, redis_client, redis_prefix)
    for name in ("human:eve", "Human:Eve", "hurnan:eve", "agency:desk", "Agency:Desk", "runtime.watcher:x"):
        with pytest.raises(InvalidInput) as info:
            await registered(one, name, caller=CLIENT)
        assert info.value.field == "name" and "reserved prefix" in str(info.value), name
    await registered(one, "humane", caller=CLIENT)  # a prefix is a prefix, not a word inside


async def test_a_name_that_looks_like_a_taken_one_is_refused_on_every_replica(
    env: Env, redis_client: Any, redis_prefix: str
) -> None:
    """The report: ``AG1`` beside ``ag1``, ``Agency:Desk`` beside ``agency:desk``."""
    one, two = replicas(env, redis_client, redis_prefix)
    await registered(one, "ag1", caller=CLIENT)
    for name in ("AG1", "agl", "AGl", "ag1"):  # case, and UTS #39 confusables (1 ~ l)
        with pytest.raises(AlreadyExists) as info:
            await registered(two, name, caller=CLIENT)
        assert "ag1" in str(info.value), name
    await registered(two, "translator", caller=CLIENT)
    with pytest.raises(AlreadyExists):
        await registered(one, "trans1ator", caller=CLIENT)
    # enrolled agents (the definition's) and people's mailboxes are names in use too
    await one.enroll("Billing", public_key_b64(generate_key()), "a" * 64)
    with pytest.raises(AlreadyExists) as info:
        await registered(one, "bi1ling", caller=CLIENT)
    assert "Billing" in str(info.value)
    # a deregistered name (and what looked like it) is free again
    assert await one.deregister_agent("ag1", caller=ADMIN)
    await registered(two, "AG1", caller=CLIENT)


async def test_one_client_registers_a_bounded_number_of_agents_at_a_bounded_rate(env: Env) -> None:
    """The report: one client registered 4,000 agents in 25 s."""
    from middleware.errors import ResourceExhausted
    from middleware.messaging.registration import RegistrationQuota

    po = env.office(registration="open", registration_quota=RegistrationQuota(max_per_client=3, burst=10))
    for i in range(3):
        await registered(po, f"worker-{i}", caller=CLIENT)
    with pytest.raises(ResourceExhausted) as info:
        await registered(po, "worker-3", caller=CLIENT)
    assert "already registered 3 agents" in str(info.value)
    await registered(po, "other-0", caller=Principal(name="other", role=Role.CLIENT))  # per client
    for i in range(5):  # admins are not limited
        await registered(po, f"ops-{i}", caller=ADMIN)
    assert await po.deregister_agent("worker-0", caller=ADMIN)
    await registered(po, "worker-3", caller=CLIENT)  # deregistering frees a place

    fast = env.office(
        registration="open", registration_quota=RegistrationQuota(per_minute=6, burst=2, max_per_client=100)
    )
    await registered(fast, "a-0", caller=CLIENT)
    await registered(fast, "a-1", caller=CLIENT)
    with pytest.raises(ResourceExhausted) as info:
        await registered(fast, "a-2", caller=CLIENT)
    assert 9_000 <= info.value.details["retry_after_ms"] <= 10_100  # one a 10 s at 6 a minute
    env.clock.advance(10.1)
    await registered(fast, "a-2", caller=CLIENT)
    refused = [r for r in env.events(AuditEventType.AGENT_REGISTERED) if r.outcome == "refused"]
    assert len(refused) >= 2  # every refusal audited
