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
