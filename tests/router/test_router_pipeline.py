"""The router inside the governance pipeline: the seed's fall-over, the contract that travels
with the message, statistics fed back after each dispatch, refusals before any agent runs."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from middleware.audit.record import AuditEventType
from middleware.contracts import CapabilityContract
from middleware.failures import FailurePolicy
from middleware.pipeline import Agency
from middleware.redis.catalog import RedisCatalog
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.router import Router
from middleware.server.settings import AgencyConfig
from middleware.tasks import TaskState
from middleware.testing import Hang, ScriptedAgent

pytestmark = pytest.mark.timeout(30)

SEED = "帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的"
REPORT = {"type": "object", "required": ["refund_rate"], "properties": {"refund_rate": {"type": "number"}}}

MONITOR = CapabilityContract(
    name="realtime_order_monitor",
    version="3.2.0",
    description="Real-time order monitor (reads the live order database).",
    tags=["orders", "realtime"],
    slo_latency_ms=40,
    can_do=["query_metric", "order_lookup"],
    cannot_do=["issue_refund"],
    regions=["shanghai", "beijing"],
    max_data_delay_ms=1_000,
    metrics=["refund_rate", "order_volume"],
    granularities=["minute", "hour"],
    output_schema=REPORT,
)
NEAR_REALTIME = CapabilityContract(
    name="near_realtime_report",
    version="1.4.0",
    description="Near-real-time report from the 5-minute warehouse sync.",
    tags=["orders", "near_realtime"],
    slo_latency_ms=400,
    can_do=["query_metric"],
    cannot_do=["issue_refund"],
    regions=["shanghai"],
    max_data_delay_ms=300_000,
    metrics=["refund_rate", "gmv"],
    granularities=["hour", "day"],
    output_schema=REPORT,
)
DAILY_BATCH = CapabilityContract(
    name="daily_batch_report",
    tags=["orders"],
    slo_latency_ms=300,
    can_do=["query_metric"],
    max_data_delay_ms=86_400_000,
    metrics=["refund_rate"],
    output_schema=REPORT,
)


async def _no_sleep(_: float) -> None:
    return None


async def seed_agency(**kw: Any) -> tuple[Agency, ScriptedAgent, ScriptedAgent, ScriptedAgent]:
    agency = Agency(sleep=_no_sleep, config=AgencyConfig(failure_policy=FailurePolicy(max_retries=1)), **kw)
    monitor = ScriptedAgent(Hang(), name="monitor")
    report = ScriptedAgent({"refund_rate": 0.031, "source": "warehouse"}, name="report")
    batch = ScriptedAgent({"refund_rate": 0.029}, name="batch")
    await agency.register(MONITOR, monitor)
    await agency.register(NEAR_REALTIME, report)
    await agency.register(DAILY_BATCH, batch)
    return agency, monitor, report, batch


async def test_the_realtime_monitor_times_out_and_the_near_realtime_report_answers() -> None:
    agency, monitor, report, batch = await seed_agency()
    outcome = await agency.submit({"text": SEED, "user_id": "analyst"})

    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == {"refund_rate": 0.031, "source": "warehouse"}
    assert monitor.calls == 2 and report.calls == 1 and batch.calls == 0  # one retry, then the backup
    assert [f.type.value for f in outcome.failures] == ["TOOL_TIMEOUT", "TOOL_TIMEOUT"]

    (decision,) = outcome.routing
    assert decision["chosen"] == MONITOR.key and decision["fallbacks"] == [NEAR_REALTIME.key]
    c = decision["constraints"]
    assert (c["time_window"], c["freshness_tolerance_ms"], c["region"], c["metric"], c["granularity"]) == (
        "last_24h",
        900_000,
        "shanghai",
        "refund_rate",
        "hour",
    )
    assert [(r["agent"], r["constraint"]) for r in decision["rejected"]] == [
        (DAILY_BATCH.key, "freshness_tolerance_ms")
    ]

    # the chosen contract travels with each dispatched message
    assert monitor.requests[0].contract == MONITOR
    assert report.requests[0].contract == NEAR_REALTIME
    assert report.requests[0].contract.max_data_delay_ms == 300_000
    assert report.requests[0].message.receiver == NEAR_REALTIME.key

    # the decision, its candidates and rejections are in the audit log
    routed = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.ROUTING_DECISION.value]
    assert routed[0].actors.agent == MONITOR.key
    assert [x["agent"] for x in routed[0].detail["candidates"]] == [MONITOR.key, NEAR_REALTIME.key]
    assert routed[0].detail["rejected"][0]["constraint"] == "freshness_tolerance_ms"


async def test_dispatch_outcomes_feed_the_ranking() -> None:
    agency, monitor, report, _ = await seed_agency()
    await agency.submit({"text": SEED})
    stats = await agency.router.stats.snapshots([MONITOR.key, NEAR_REALTIME.key])
    assert stats[MONITOR.key].success_rate == 0.0 and stats[MONITOR.key].samples == 2
    assert stats[NEAR_REALTIME.key].success_rate == 1.0 and stats[MONITOR.key].in_flight == 0
    again = await agency.route(SEED)
    assert again.chosen == NEAR_REALTIME.key  # the monitor's timeouts moved it down
    outcome = await agency.submit({"text": SEED})
    assert outcome.state is TaskState.COMPLETED and monitor.calls == 2 and report.calls == 2


async def test_a_request_no_contract_allows_is_refused_before_any_agent_runs() -> None:
    agency, monitor, report, batch = await seed_agency()
    outcome = await agency.submit({"text": "帮我给这个订单退款", "constraints": {"action": "issue_refund"}})
    assert outcome.state is TaskState.REJECTED
    assert monitor.calls == report.calls == batch.calls == 0
    (decision,) = outcome.routing
    assert {r["agent"] for r in decision["rejected"]} == {MONITOR.key, NEAR_REALTIME.key}
    assert {r["constraint"] for r in decision["rejected"]} == {"cannot_do"}
    refused = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.ROUTING_REFUSED.value]
    assert "cannot do issue_refund" in refused[0].detail["explanation"]


async def test_the_pipeline_routes_over_a_shared_redis_catalog_and_stats(redis_client, redis_prefix) -> None:
    catalog = RedisCatalog(redis_client, prefix=redis_prefix + "catalog:")
    stats = RedisRoutingStats(redis_client, prefix=redis_prefix + "stats:")
    agency, _, report, _ = await seed_agency(catalog=catalog, router=Router(catalog, stats=stats))
    try:
        outcome = await agency.submit({"text": SEED})
        assert outcome.state is TaskState.COMPLETED and report.calls == 1
        # another replica on the same Redis sees the same stats, so ranks the same way
        other_client = aioredis.Redis.from_url(_url())
        other = Router(
            RedisCatalog(other_client, prefix=redis_prefix + "catalog:"),
            stats=RedisRoutingStats(other_client, prefix=redis_prefix + "stats:"),
        )
        decision = await other.decide(await other.constraints_for(SEED))
        assert decision.chosen == NEAR_REALTIME.key
        await other_client.aclose()
    finally:
        await catalog.clear()
        async for key in redis_client.scan_iter(match=redis_prefix + "stats:*"):
            await redis_client.delete(key)


def _url() -> str:
    import os

    return os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
