"""Usage across processes: sums shared by replicas in Redis, and usage reported by a remote
worker over gRPC (the ``usage`` field of ``InvokeResult``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from middleware import Agency, AgentReply
from middleware.agency_config import AgencyConfig
from middleware.agents import AgentRegistry
from middleware.audit.record import AuditEventType
from middleware.langchain import wrap_runnable
from middleware.metering import Metering
from middleware.redis.usage_meter import RedisUsageMeter
from middleware.server.grpc_api import build_server
from middleware.server.remote_agent import RemoteAgent
from middleware.server.worker import Worker
from middleware.tasks import TaskState
from middleware.testing import ManualClock, ScriptedAgent
from middleware.usage import Usage
from middleware.usage_meter import Counter

REDIS_URL = "redis://127.0.0.1:6379/15"

SETTINGS: dict[str, Any] = {
    "usage": {
        "prices": {"gpt-test": {"input": 1.0, "output": 4.0}},
        "budgets": [{"scope": "tenant", "name": "acme", "period": "month", "limit": 0.005, "alerts": [0.5]}],
    }
}


@pytest.mark.redis
async def test_replicas_share_sums_so_spending_on_one_stops_the_next_step_on_another(
    redis_prefix: str,
) -> None:
    clock = ManualClock(datetime(2026, 2, 28, 23, 59, tzinfo=UTC))
    config = AgencyConfig.model_validate(SETTINGS)
    meters = [RedisUsageMeter.from_url(REDIS_URL, prefix=redis_prefix) for _ in range(2)]
    replicas = [
        Agency(config=config, clock=clock, metering=Metering(config.usage, meter=m, clock=clock))
        for m in meters
    ]
    reply = AgentReply(
        output={"ok": 1}, usage=[Usage(model="gpt-test", input_tokens=1000, output_tokens=500)]
    )
    for agency in replicas:
        await agency.register({"name": "w", "can_do": ["work"], "tenant": "acme"}, ScriptedAgent(reply))

    from middleware.access import Principal, Role, acting_as

    task = {
        "text": "work",
        "user_id": "u",
        "steps": [{"name": "a", "action": "work"}, {"name": "b", "action": "work"}],
    }
    try:
        with acting_as(Principal(name="shop", role=Role.CLIENT, tenant="acme")):
            first = await replicas[0].submit(task)  # 2 x 0.003: 0.006 >= 0.005 after the task
            assert first.state is TaskState.COMPLETED
            second = await replicas[1].submit(task)  # another replica: stopped before its first step
        assert second.state is TaskState.INPUT_REQUIRED and second.pending["budget"][
            "spent"
        ] == pytest.approx(0.006)
        assert [
            r.detail["name"] for _, r in replicas[1].audit.records() if r.event_type == "budget.exceeded"
        ] == ["acme"]
        # the alert at 50 % was raised once, by the replica that crossed it
        alerts = [
            r
            for agency in replicas
            for _, r in agency.audit.records()
            if r.event_type == AuditEventType.BUDGET_ALERT
        ]
        assert len(alerts) == 1
        # one hash per entity and period, under the entity's hash tag (Redis Cluster slots)
        keys = {k.decode() for k in await meters[0]._r.keys(f"{redis_prefix}*")}
        assert f"{redis_prefix}{{usage:tenant:acme}}:2026-02" in keys
        assert f"{redis_prefix}{{usage:tenant:acme}}:2026-02:marks" in keys
        (spend,) = await meters[1].get([Counter("tenant", "acme", "2026-02")])
        assert (spend.input_tokens, spend.output_tokens, spend.cost_micros) == (2000, 1000, 6000)
        # the next month starts afresh (a minute later: March 1st)
        clock.advance(60)
        with acting_as(Principal(name="shop", role=Role.CLIENT, tenant="acme")):
            assert (await replicas[1].submit(task)).state is TaskState.COMPLETED
    finally:
        for m in meters:
            await m._r.delete(*(await m._r.keys(f"{redis_prefix}*")) or [f"{redis_prefix}none"])
            await m.close()


async def test_a_remote_workers_model_usage_reaches_the_gateway_over_grpc() -> None:
    config = AgencyConfig.model_validate(SETTINGS)
    agency = Agency(config=config, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    content="done",
                    usage_metadata={"input_tokens": 120, "output_tokens": 30, "total_tokens": 150},
                    response_metadata={"model_name": "gpt-test"},
                )
            ]
        )
    )
    agent = wrap_runnable(model, {"name": "remote_writer", "can_do": ["write"], "slo_latency_ms": 5000})
    try:
        async with Worker(agent, gateway=f"127.0.0.1:{server.port}"):
            outcome = await agency.submit({"text": "write", "constraints": {"action": "write"}})
    finally:
        await server.stop(0)
        await agency.close()
    assert outcome.state is TaskState.COMPLETED
    assert outcome.usage is not None
    assert outcome.usage.by_model["gpt-test"] == {"input_tokens": 120, "output_tokens": 30, "cost": 0.00024}
