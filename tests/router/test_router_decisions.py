"""Filtering (every rejection rule), refusal with reasons, indexed lookup, and ranking."""

from __future__ import annotations

from typing import Any

import pytest

from middleware.catalog import CatalogEntry
from middleware.constraints import Constraints
from middleware.contracts import CapabilityContract
from middleware.errors import InvalidInput
from middleware.memory_catalog import MemoryCatalog
from middleware.router import CHECKS, Router, RoutingWeights
from middleware.routing_stats import MemoryRoutingStats
from middleware.testing import ManualClock


def contract(name: str, version: str = "1.0.0", **kw: Any) -> CapabilityContract:
    kw.setdefault("can_do", ["query_metric"])
    return CapabilityContract(name=name, version=version, **kw)


async def router_with(*contracts: CapabilityContract, **kw: Any) -> Router:
    catalog = MemoryCatalog(lease_seconds=kw.pop("lease_seconds", None), clock=kw.pop("clock", ManualClock()))
    for c in contracts:
        await catalog.register(c)
    return Router(catalog, **kw)


# Each rule: the constraints, a contract that fails them, and one that satisfies them.
RULES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "cannot_do": ({}, {"can_do": ["other"], "cannot_do": ["query_metric"]}, {}),
    "name": ({"name": "good"}, {}, {}),
    "version_range": ({"version_range": "^2"}, {"version": "1.9.0"}, {"version": "2.1.0"}),
    "tags": ({"tags": ["realtime"]}, {"tags": ["batch"]}, {"tags": ["realtime", "batch"]}),
    "max_latency_ms": ({"max_latency_ms": 500}, {"slo_latency_ms": 800}, {"slo_latency_ms": 500}),
    "region": ({"region": "shanghai"}, {"regions": ["beijing"]}, {"regions": ["beijing", "shanghai"]}),
    "data_residency": (
        {"data_residency": "china"},
        {"data_residency": ["china", "usa"]},
        {"data_residency": ["china"]},
    ),
    "freshness_tolerance_ms": (
        {"freshness_tolerance_ms": 900_000},
        {"max_data_delay_ms": 3_600_000},
        {"max_data_delay_ms": 300_000},
    ),
    "time_window": (
        {"time_window": "last_24h"},
        {"time_windows": ["last_30d"]},
        {"time_windows": ["today", "last_24h"]},
    ),
    "metric": ({"metric": "refund_rate"}, {"metrics": ["gmv"]}, {"metrics": ["refund_rate"]}),
    "granularity": ({"granularity": "hour"}, {"granularities": ["day"]}, {"granularities": ["hour", "day"]}),
    "needs_human_review": ({"needs_human_review": True}, {"human_review": False}, {"human_review": True}),
}


def test_every_rule_has_a_test() -> None:
    tested = set(RULES) | {"can_do", "liveness", "undeclared"}
    assert {name for name, _ in CHECKS} <= tested


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_each_rule_rejects_the_failing_contract_and_says_why(rule: str) -> None:
    wanted, failing, passing = RULES[rule]
    router = await router_with(contract("bad", **failing), contract("good", **passing))
    decision = await router.decide(Constraints(action="query_metric", **wanted))
    assert decision.chosen == "good@" + (passing.get("version") or "1.0.0")
    assert [(r.agent.split("@")[0], r.constraint) for r in decision.rejected] == [("bad", rule)]
    assert decision.rejected[0].reason


@pytest.mark.parametrize(
    ("wanted", "why"),
    [
        ({"freshness_tolerance_ms": 60_000}, "declares no max_data_delay_ms"),
        ({"data_residency": "eu"}, "declares no data residency"),
    ],
)
async def test_safety_constraints_need_a_declaration(wanted: dict[str, Any], why: str) -> None:
    router = await router_with(contract("silent"))
    decision = await router.decide(Constraints(action="query_metric", **wanted))
    assert decision.refused and why in decision.rejected[0].reason


async def test_undeclared_regions_metrics_windows_mean_any() -> None:
    router = await router_with(contract("general"))
    decision = await router.decide(
        Constraints(
            action="query_metric", region="shanghai", metric="gmv", time_window="today", granularity="hour"
        )
    )
    assert decision.chosen == "general@1.0.0"


async def test_an_action_in_cannot_do_is_never_routed_and_the_refusal_says_so() -> None:
    router = await router_with(
        contract("financial_calculator", can_do=["compound_interest"], cannot_do=["stock_prediction"]),
        contract("unrelated", can_do=["ship"]),
    )
    decision = await router.decide(await router.constraints_for("Predict next quarter's stock price"))
    assert decision.refused and decision.chosen == "" and decision.fallbacks == []
    assert [(r.agent, r.constraint) for r in decision.rejected] == [
        ("financial_calculator@1.0.0", "cannot_do")
    ]
    assert "cannot do stock_prediction" in decision.explanation
    assert decision.considered == 1  # "unrelated" was never looked at


async def test_a_request_without_an_action_is_refused() -> None:
    router = await router_with(contract("any"))
    decision = await router.decide(await router.constraints_for("hello there"))
    assert decision.refused
    assert [r.constraint for r in decision.rejected] == ["action"]
    assert "no action" in decision.explanation


async def test_refusal_lists_which_constraint_excluded_which_candidate() -> None:
    router = await router_with(
        contract("far", regions=["beijing"], max_data_delay_ms=1000),
        contract("slow_data", regions=["shanghai"], max_data_delay_ms=86_400_000),
        contract("refuser", can_do=["other"], cannot_do=["query_metric"]),
    )
    decision = await router.decide(
        await router.constraints_for(
            "帮我查一下昨天上海地区的订单退款率，要精确到小时，如果数据延迟超过15分钟就用前天的"
        )
    )
    assert decision.refused
    reasons = {r.agent: (r.constraint, r.reason) for r in decision.rejected}
    assert reasons["refuser@1.0.0"][0] == "cannot_do"
    assert reasons["far@1.0.0"] == ("region", "serves beijing, not shanghai")
    assert reasons["slow_data@1.0.0"][0] == "freshness_tolerance_ms"
    assert decision.rejected[0].agent == "refuser@1.0.0"  # explicit refusals first
    for agent in reasons:
        assert agent in decision.explanation


async def test_a_candidate_failing_several_constraints_lists_them_all() -> None:
    router = await router_with(contract("x", regions=["beijing"], metrics=["gmv"]))
    decision = await router.decide(
        Constraints(action="query_metric", region="shanghai", metric="refund_rate")
    )
    (rejection,) = decision.rejected
    assert rejection.constraint == "region"
    assert "not shanghai" in rejection.reason and "not refund_rate" in rejection.reason


async def test_stale_agents_are_excluded_until_they_heartbeat() -> None:
    clock = ManualClock()
    router = await router_with(contract("monitor"), contract("backup"), lease_seconds=30, clock=clock)
    clock.advance(20)
    await router.catalog.heartbeat("backup@1.0.0")
    clock.advance(15)
    decision = await router.decide(Constraints(action="query_metric"))
    assert decision.chosen == "backup@1.0.0"
    assert [(r.agent, r.constraint) for r in decision.rejected] == [("monitor@1.0.0", "liveness")]
    await router.catalog.heartbeat("monitor@1.0.0")
    decision = await router.decide(Constraints(action="query_metric"))
    assert {decision.chosen, *decision.fallbacks} == {"monitor@1.0.0", "backup@1.0.0"}


async def test_excluded_agents_are_skipped_for_this_attempt() -> None:
    router = await router_with(contract("a"), contract("b"))
    decision = await router.decide(Constraints(action="query_metric"), exclude=["a@1.0.0"])
    assert decision.chosen == "b@1.0.0"
    assert decision.rejected[0].constraint == "exclude"


async def test_rejections_are_bounded_and_the_rest_counted() -> None:
    router = await router_with(
        *[contract(f"a{i:02d}", regions=["beijing"]) for i in range(12)], max_rejections=5
    )
    decision = await router.decide(Constraints(action="query_metric", region="shanghai"))
    assert len(decision.rejected) == 5 and decision.rejected_omitted == 7
    assert decision.considered == 12
    assert "7 more rejected" in decision.explanation


async def test_decide_uses_the_index_and_never_lists_the_catalog() -> None:
    class NoScan(MemoryCatalog):
        async def all(self) -> list[CatalogEntry]:
            raise AssertionError("the router must not scan the catalog")

        async def query(self, query: Any) -> list[CatalogEntry]:
            raise AssertionError("the router must not scan the catalog")

    catalog = NoScan()
    for i in range(50):
        await catalog.register(contract(f"n{i}", can_do=[f"action_{i % 10}"]))
    decision = await Router(catalog).decide(Constraints(action="action_3"))
    assert decision.considered == 5 and len(decision.candidates) == 5


# ------------------------------------------------------------------- ranking
async def test_the_score_follows_the_documented_formula() -> None:
    stats = MemoryRoutingStats()
    router = await router_with(contract("a", slo_latency_ms=1000), stats=stats)
    for ok in (True, True, True, False):
        await stats.started("a@1.0.0")
        await stats.finished("a@1.0.0", success=ok)
    await stats.started("a@1.0.0")  # one call in flight
    (cand,) = (await router.decide(Constraints(action="query_metric"))).candidates
    # slo_term = 1000/(1000+1000) = 0.5; success = 0.75; load_term = 1/(1+1) = 0.5
    assert cand.score == pytest.approx((0.4 * 0.5 + 0.4 * 0.75 + 0.2 * 0.5) / 1.0)
    assert (cand.success_rate, cand.load, cand.samples) == (0.75, 1.0, 4)


async def test_ranking_prefers_the_faster_slo_when_all_else_is_equal() -> None:
    router = await router_with(contract("slow", slo_latency_ms=2000), contract("fast", slo_latency_ms=200))
    decision = await router.decide(Constraints(action="query_metric"))
    assert (decision.chosen, decision.fallbacks) == ("fast@1.0.0", ["slow@1.0.0"])
    assert decision.candidates[0].score > decision.candidates[1].score


async def test_ranking_moves_when_success_rates_change() -> None:
    stats = MemoryRoutingStats(window=10)
    router = await router_with(
        contract("fast", slo_latency_ms=200), contract("steady", slo_latency_ms=600), stats=stats
    )
    assert (await router.decide(Constraints(action="query_metric"))).chosen == "fast@1.0.0"
    for _ in range(5):
        await stats.started("fast@1.0.0")
        await stats.finished("fast@1.0.0", success=False)
        await stats.started("steady@1.0.0")
        await stats.finished("steady@1.0.0", success=True)
    assert (await router.decide(Constraints(action="query_metric"))).chosen == "steady@1.0.0"
    for _ in range(10):  # fast recovers: its failures leave the window
        await stats.started("fast@1.0.0")
        await stats.finished("fast@1.0.0", success=True)
    assert (await router.decide(Constraints(action="query_metric"))).chosen == "fast@1.0.0"


async def test_ranking_moves_when_load_changes() -> None:
    stats = MemoryRoutingStats()
    router = await router_with(
        contract("a", slo_latency_ms=300), contract("b", slo_latency_ms=400), stats=stats
    )
    assert (await router.decide(Constraints(action="query_metric"))).chosen == "a@1.0.0"
    for _ in range(3):
        await stats.started("a@1.0.0")
    busy = await router.decide(Constraints(action="query_metric"))
    assert busy.chosen == "b@1.0.0" and busy.candidates[1].load == 3.0
    for _ in range(3):
        await stats.finished("a@1.0.0", success=True)
    assert (await router.decide(Constraints(action="query_metric"))).chosen == "a@1.0.0"


async def test_weights_are_configurable() -> None:
    stats = MemoryRoutingStats()
    contracts = [contract("fast_flaky", slo_latency_ms=100), contract("slow_sure", slo_latency_ms=3000)]
    await stats.started("fast_flaky@1.0.0")
    await stats.finished("fast_flaky@1.0.0", success=False)
    await stats.started("fast_flaky@1.0.0")
    await stats.finished("fast_flaky@1.0.0", success=True)
    latency_first = await router_with(
        *contracts, stats=stats, weights=RoutingWeights(slo=1, success=0, load=0)
    )
    assert (await latency_first.decide(Constraints(action="query_metric"))).chosen == "fast_flaky@1.0.0"
    success_first = await router_with(
        *contracts, stats=stats, weights=RoutingWeights(slo=0, success=1, load=0)
    )
    assert (await success_first.decide(Constraints(action="query_metric"))).chosen == "slow_sure@1.0.0"


async def test_why_not_explains_any_named_agent_even_outside_the_index() -> None:
    router = await router_with(
        contract("fits"), contract("elsewhere", can_do=["ship"]), contract("far", regions=["beijing"])
    )
    wanted = Constraints(action="query_metric", region="shanghai")
    assert await router.why_not("fits@1.0.0", wanted) == ""
    assert await router.why_not("elsewhere@1.0.0", wanted) == "query_metric is not in can_do"
    assert await router.why_not("far@1.0.0", wanted) == "serves beijing, not shanghai"
    assert await router.why_not("ghost@1.0.0", wanted) == "not registered"


class _CountingExtractor:
    """Counts the texts it is asked to read (the rule-based extractor underneath)."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def extract(self, text: str) -> Constraints:
        from middleware.constraints import RuleBasedExtractor

        self.read.append(text)
        return await RuleBasedExtractor().extract(text)


SHANGHAI_HOURLY = "帮我查一下昨天上海地区的订单退款率，要精确到小时"


async def test_a_stated_action_is_the_whole_of_the_constraints_and_the_text_is_not_read() -> None:
    extractor = _CountingExtractor()
    router = await router_with(
        contract("report", regions=["beijing"], tags=["realtime"]), extractor=extractor
    )
    stated = await router.constraints_for(SHANGHAI_HOURLY, {"action": "Query_Metric", "tags": ["Realtime"]})
    assert extractor.read == []
    assert stated == Constraints(action="query_metric", tags=["realtime"])  # validated as stated
    assert (
        stated.model_dump()
        == Constraints.parse({"action": "query_metric", "tags": ["realtime"]}).model_dump()
    )
    assert (await router.decide(stated)).chosen == "report@1.0.0"  # no region was read from the text
    with pytest.raises(InvalidInput) as err:  # a stated constraint is still validated
        await router.constraints_for("x", {"action": "query_metric", "max_latency_ms": -1})
    assert err.value.field == "max_latency_ms"


async def test_without_a_stated_action_the_text_is_read_and_the_stated_constraints_override_it() -> None:
    extractor = _CountingExtractor()
    router = await router_with(contract("report", regions=["beijing"]), extractor=extractor)
    merged = await router.constraints_for(SHANGHAI_HOURLY, {"granularity": "day"})
    assert extractor.read == [SHANGHAI_HOURLY]
    assert (merged.action, merged.region, merged.granularity) == ("query_metric", "shanghai", "day")
    assert (await router.decide(merged)).refused  # the region read from the text counts
    assert await router.constraints_for("") == Constraints()


@pytest.mark.parametrize(
    "stated",
    [
        {"action": "query_metric"},
        {"action": "Query Metric", "tags": "Real Time", "region": "Shanghai", "max_latency_ms": 500},
        {"action": "query_metric", "tags": ["a", "b"], "needs_human_review": True, "ticket": "T-1"},
        {"action": "query_metric", "version_range": "^2.1", "freshness_tolerance_ms": 900_000},
    ],
)
def test_stated_constraints_are_the_stated_ones_merged_into_none(stated: dict[str, Any]) -> None:
    assert Constraints.stated(stated).model_dump() == Constraints().merged(stated).model_dump()


@pytest.mark.parametrize(
    "stated",
    [
        {"action": "query_metric", "max_latency_ms": -1, "region": 5},
        {"action": "query_metric", "tags": 7},
        {"action": "query_metric", "version_range": "not a range"},
    ],
)
def test_invalid_stated_constraints_are_refused_as_merging_refuses_them(stated: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as stated_error:
        Constraints.stated(stated)
    with pytest.raises(InvalidInput) as merged_error:
        Constraints().merged(stated)
    assert [str(p) for p in stated_error.value.problems] == [str(p) for p in merged_error.value.problems]
