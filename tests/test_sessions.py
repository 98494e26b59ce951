"""Conversation state by session (seed sections 4.1 problem 3, 4.2, 5.1)."""

from __future__ import annotations

import asyncio

import pytest

from middleware import Agency, PermissionDenied, TaskState
from middleware.demo import build_demo_agency, tracking_request, warranty_request
from middleware.errors import ConcurrentUpdate
from middleware.memory_session_store import MemorySessionStore
from middleware.redis.session_store import RedisSessionStore
from middleware.sessions import ConversationState, SessionStore


async def no_sleep(_: float) -> None:
    return None


def test_both_stores_are_session_stores(redis_client):
    assert isinstance(MemorySessionStore(), SessionStore)
    assert isinstance(RedisSessionStore(redis_client), SessionStore)


async def _second_task_sees_the_first_ones_context(agency: Agency, session: str) -> None:
    first = await agency.submit(warranty_request(session), client="shop-app")
    assert first.state is TaskState.COMPLETED
    state = await agency.sessions.get(session)
    assert state is not None and state.client == "shop-app"
    assert state.intent_id == "warranty_replacement" and state.current_goal.id == "GOAL_WARRANTY_001"
    assert state.language == "zh"
    # each fact and each step's result, as the SMF message that established it
    assert state.context_map["device_model"]["content"] == "PhoneX"
    assert state.context_map["device_model"]["metadata"]["provenance"]["source"] == "greeting_agent"
    assert state.context_map["warranty"]["sender"] == "warranty_agent@2.1.0"
    assert [f.type.value for f in state.failure_history] == ["TOOL_TIMEOUT"] * 3
    assert not state.human_handoff_requested

    second = await agency.submit(tracking_request(session), client="shop-app")
    assert second.state is TaskState.COMPLETED, second.reason
    asked = agency.agents.get("logistics_agent@1.0.0").requests[0].input
    # the order number and the shipment were not asked again: they came from the session
    assert asked["order"]["order_id"] == "ORD-20481"
    assert asked["shipping"]["tracking_number"] == "EXP123456"
    assert second.output["status"] == "in_transit"
    state = await agency.sessions.get(session)
    assert state.task_ids == [first.task_id, second.task_id]
    assert "track" in state.context_map


async def test_a_second_task_of_a_session_reuses_the_first_ones_context_in_memory():
    agency = await build_demo_agency(Agency(sleep=no_sleep))
    await _second_task_sees_the_first_ones_context(agency, "s_mem")
    await agency.close()


async def test_a_second_task_of_a_session_reuses_the_first_ones_context_over_redis(
    redis_client, redis_prefix
):
    store = RedisSessionStore(redis_client, prefix=redis_prefix, ttl_s=3600)
    agency = await build_demo_agency(Agency(sleep=no_sleep, sessions=store))
    await _second_task_sees_the_first_ones_context(agency, "s_redis")
    ttl = await redis_client.pttl(store.key("s_redis"))
    assert 0 < ttl <= 3600 * 1000
    # a second gateway sharing the Redis store sees the same conversation
    other = await build_demo_agency(
        Agency(sleep=no_sleep, sessions=RedisSessionStore(redis_client, prefix=redis_prefix))
    )
    again = await other.submit(tracking_request("s_redis"), client="shop-app")
    assert other.agents.get("logistics_agent@1.0.0").requests[0].input["order"]["order_id"] == "ORD-20481"
    assert again.state is TaskState.COMPLETED
    await agency.close()
    await other.close()


async def test_the_session_ttl_is_configurable(redis_client, redis_prefix):
    store = RedisSessionStore(redis_client, prefix=redis_prefix, ttl_s=120)
    await store.save(ConversationState(session_id="s1"))
    assert 0 < await redis_client.pttl(store.key("s1")) <= 120_000
    default = RedisSessionStore(redis_client, prefix=redis_prefix)
    await default.save(ConversationState(session_id="s2"))
    assert 23 * 3600_000 < await redis_client.pttl(default.key("s2")) <= 24 * 3600_000


async def test_another_clients_task_may_not_use_the_session():
    agency = await build_demo_agency(Agency(sleep=no_sleep))
    await agency.submit(warranty_request("s_owned"), client="shop-app")
    with pytest.raises(PermissionDenied) as err:
        await agency.submit(tracking_request("s_owned"), client="intruder")
    assert "s_owned" in str(err.value)
    assert agency.agents.get("logistics_agent@1.0.0").calls == 0
    await agency.close()


async def test_the_redis_lock_serialises_changes_of_one_session(redis_client, redis_prefix):
    store = RedisSessionStore(redis_client, prefix=redis_prefix)
    order: list[str] = []
    inside = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with store.lock("s"):
            order.append("first in")
            inside.set()
            await release.wait()
            order.append("first out")

    async def second() -> None:
        await inside.wait()
        async with store.lock("s"):
            order.append("second in")

    t1, t2 = asyncio.create_task(first()), asyncio.create_task(second())
    await inside.wait()
    with pytest.raises(ConcurrentUpdate):
        async with store.lock("s", wait_s=0.05):
            pass
    release.set()
    await asyncio.gather(t1, t2)
    assert order == ["first in", "first out", "second in"]


async def test_concurrent_tasks_of_one_session_both_leave_their_mark(redis_client, redis_prefix):
    store = RedisSessionStore(redis_client, prefix=redis_prefix)
    agency = await build_demo_agency(Agency(sleep=no_sleep, sessions=store))
    a, b = await asyncio.gather(
        agency.submit(warranty_request("s_both"), client="c"),
        agency.submit(warranty_request("s_both"), client="c"),
    )
    state = await store.get("s_both")
    assert sorted(state.task_ids) == sorted([a.task_id, b.task_id])
    await agency.close()


async def test_the_memory_store_keeps_at_most_max_sessions():
    store = MemorySessionStore(max_sessions=2)
    for name in ("a", "b", "c"):
        await store.save(ConversationState(session_id=name))
    assert await store.get("a") is None
    assert (await store.get("c")).session_id == "c"


async def test_a_session_store_that_fails_does_not_lose_the_outcome(caplog):
    class Broken(MemorySessionStore):
        async def save(self, state: ConversationState) -> None:
            raise ConnectionError("store down")

    agency = await build_demo_agency(Agency(sleep=no_sleep, sessions=Broken()))
    outcome = await agency.submit(warranty_request("s_broken"))
    assert outcome.state is TaskState.COMPLETED
    assert "conversation state not updated" in caplog.text
    await agency.close()
