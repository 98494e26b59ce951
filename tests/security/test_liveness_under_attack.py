"""No single call stalls the gateway (issue 14, items 1-4): while each attack runs, a health
check with a 2-second deadline succeeds and another client's Submit completes.

Real gRPC server on port 0 in its own thread; the attacker (bob, a client, or mallory, an
agent) sends the hostile call over and over from two threads while alice checks liveness.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.caller_limits import CallerLimits
from middleware.contracts import CapabilityContract
from middleware.errors import InvalidInput
from middleware.grants import AgentGrant
from middleware.schema_guard import schema_limits
from middleware.server.grpc_api.convert import contract_to_pb
from middleware.server.settings import caller_limits_from_env
from tests.security.liveness import Gateway, auth, check_live, check_live_while


@pytest.fixture
def gw(tmp_path: Path) -> Any:
    # write limits out of the way: these attacks are about the cost of each call
    lax = CallerLimits(catalog_writes_per_second=1e6, catalog_write_burst=10**6)
    with Gateway(tmp_path, grants={"mallory": AgentGrant(actions=["x"])}, limits=lax) as gateway:
        yield gateway


def test_live_without_an_attack(gw: Gateway) -> None:
    check_live(gw)


def test_live_while_a_client_routes_and_submits_long_digit_runs(gw: Gateway) -> None:
    """Item 1: the freshness pattern was quadratic in a run of digits (10k digits: 17.8 s)."""
    digits = "1" * 100_000
    with gw.channel() as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)

        def attack() -> None:
            stub.Route(agency_pb2.RouteRequest(text=digits), metadata=auth("bob"), timeout=60)
            stub.Submit(
                agency_pb2.SubmitRequest(text="数据" + " " * 99_000), metadata=auth("bob"), timeout=60
            )

        check_live_while(gw, attack)


REDOS_GOAL = {
    "id": "GOAL_REDOS_001",
    "description": "a client's inline goal with a backtracking regex",
    "verification_steps": [{"kind": "regex", "pattern": "(.|.)*\u0000"}],
}


def test_live_while_a_client_sends_a_backtracking_goal_regex(gw: Gateway) -> None:
    """Item 2: ``(.|.)*\\x00`` on the output wedged the loop (the goal timeout cannot stop ``re``)."""
    request = agency_pb2.SubmitRequest(
        text="My phone bought last week has a shattered screen, I want a replacement.",
        goal_json=json.dumps(REDOS_GOAL),
        input_json=json.dumps({"user_id": "u_" + "x" * 200, "device_model": "PhoneX" * 50}),
    )
    with gw.channel() as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)

        def attack() -> None:
            outcome = stub.Submit(request, metadata=auth("bob"), timeout=60)
            assert outcome.task_id and not outcome.goal_verdict.passed, outcome

        check_live_while(gw, attack)


def test_live_while_an_agent_schema_pattern_backtracks_at_dispatch(gw: Gateway) -> None:
    """Item 2: an ``input_schema`` pattern re-checked with ``re`` grew 4-5x per two characters."""

    async def register() -> None:
        contract = CapabilityContract.parse(
            {
                "name": "mallory",
                "version": "1.0.0",
                "can_do": ["evil_check"],
                "input_schema": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}},
                },
            }
        )

        async def agent(request: Any) -> dict[str, Any]:
            return {}

        await gw.agency.register(contract, agent)

    gw.run(register())
    request = agency_pb2.SubmitRequest(
        text="check this",
        constraints_json=json.dumps({"action": "evil_check"}),
        input_json=json.dumps({"code": "a" * 60 + "!"}),
    )
    with gw.channel() as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)

        def attack() -> None:
            outcome = stub.Submit(request, metadata=auth("bob"), timeout=60)
            assert outcome.state != "completed", outcome  # the input does not match

        check_live_while(gw, attack)


def _schema_of(nodes: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(nodes)}}


def test_live_while_an_agent_registers_huge_schemas(gw: Gateway) -> None:
    """Item 3: a 1.1 MB schema cost ~2 s of loop time per Register (refused by its size now)."""
    huge = contract_to_pb(CapabilityContract.parse({"name": "mallory", "version": "1.0.1", "can_do": ["x"]}))
    huge.input_schema_json = json.dumps(_schema_of(40_000))
    assert len(huge.input_schema_json) > 1_000_000
    with gw.channel() as channel:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)

        def attack() -> None:
            with pytest.raises(grpc.RpcError) as info:
                stub.Register(
                    catalog_pb2.RegisterRequest(contract=huge), metadata=auth("mallory"), timeout=60
                )
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "contract.input_schema_json" in (info.value.details() or "")

        check_live_while(gw, attack)


def test_live_while_an_agent_updates_the_largest_allowed_schema(gw: Gateway) -> None:
    """Item 3: schemas within the limits are checked and compiled off the event loop."""
    nodes = schema_limits().max_nodes // 3 - 10
    big = contract_to_pb(CapabilityContract.parse({"name": "mallory", "version": "1.0.2", "can_do": ["x"]}))
    big.input_schema_json = json.dumps(_schema_of(nodes))
    assert len(big.input_schema_json) < schema_limits().max_bytes
    with gw.channel() as channel:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        stub.Register(
            catalog_pb2.RegisterRequest(contract=big, replace=True), metadata=auth("mallory"), timeout=60
        )

        def attack() -> None:
            stub.Update(catalog_pb2.UpdateRequest(contract=big), metadata=auth("mallory"), timeout=60)

        check_live_while(gw, attack)


# ------------------------------------------------------------------ item 4: Watch streams


def _big_contract(version: str = "1.0.0") -> Any:
    big = contract_to_pb(CapabilityContract.parse({"name": "bulky", "version": version, "can_do": ["x"]}))
    props = {f"p{i}": {"type": "string", "description": "d" * 70} for i in range(1_000)}
    big.input_schema_json = json.dumps({"type": "object", "properties": props})  # ~100 KB: > a window
    return big


def _stalled_watch(channel: grpc.Channel, who: str) -> Any:
    """A Watch that has heard its first event and is then never read again."""
    call = catalog_pb2_grpc.CatalogServiceStub(channel).Watch(
        catalog_pb2.WatchRequest(include_existing=True), metadata=auth(who), timeout=90
    )
    assert next(call).type == "existing"
    return call


def test_live_while_stalled_watchers_hear_big_updates_and_are_dropped(tmp_path: Path) -> None:
    """Item 4: three unread Watch streams grew the gateway's memory without bound."""
    limits = CallerLimits(watch_queue=8, catalog_writes_per_second=1e6, catalog_write_burst=10**6)
    # the watchers' channel keeps its flow-control window small (no BDP probing), as a
    # consumer that stopped reading leaves it: the gateway can then no longer send
    slow = [("grpc.http2.bdp_probe", 0)]
    with Gateway(tmp_path, limits=limits) as gw, gw.channel() as channel:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        stub.Register(catalog_pb2.RegisterRequest(contract=_big_contract()), metadata=auth("ops"), timeout=30)
        watching = grpc.insecure_channel(gw.address, options=slow)
        watchers = [_stalled_watch(watching, who) for who in ("bob", "bob", "alice")]

        def attack() -> None:
            stub.Update(catalog_pb2.UpdateRequest(contract=_big_contract()), metadata=auth("ops"), timeout=60)

        check_live_while(gw, attack)
        for _ in range(20):  # more than the backlog of 8 however few the attack made
            attack()
        for call in watchers:  # each slow consumer was dropped, saying why
            with pytest.raises(grpc.RpcError) as info:
                for _ in call:
                    pass
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "fell more than 8 events or" in (info.value.details() or "")
        watching.close()


def test_a_caller_holds_a_bounded_number_of_watch_streams(tmp_path: Path) -> None:
    with Gateway(tmp_path, limits=CallerLimits(watch_streams=2)) as gw, gw.channel() as channel:
        held = [_stalled_watch(channel, "bob") for _ in range(2)]
        call = catalog_pb2_grpc.CatalogServiceStub(channel).Watch(
            catalog_pb2.WatchRequest(include_existing=True), metadata=auth("bob")
        )
        with pytest.raises(grpc.RpcError) as info:
            next(call)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "already holds 2 Watch streams" in (info.value.details() or "")
        _stalled_watch(channel, "alice").cancel()  # another caller is not affected
        held[0].cancel()  # a closed stream frees its place
        for _ in range(100):  # the server notices the cancellation shortly
            try:
                _stalled_watch(channel, "bob").cancel()
                break
            except grpc.RpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                threading.Event().wait(0.05)
        else:
            pytest.fail("the cancelled stream's place was never freed")


def test_catalog_writes_are_rate_limited_per_caller(tmp_path: Path) -> None:
    limits = CallerLimits(catalog_writes_per_second=0.001, catalog_write_burst=3)
    grants = {"mallory": AgentGrant(actions=["x"])}
    with Gateway(tmp_path, grants=grants, limits=limits) as gw, gw.channel() as channel:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        mine = contract_to_pb(
            CapabilityContract.parse({"name": "mallory", "version": "1.0.0", "can_do": ["x"]})
        )
        stub.Register(catalog_pb2.RegisterRequest(contract=mine), metadata=auth("mallory"), timeout=10)
        for _ in range(2):
            stub.Heartbeat(
                catalog_pb2.HeartbeatRequest(key="mallory@1.0.0"), metadata=auth("mallory"), timeout=10
            )
        with pytest.raises(grpc.RpcError) as info:
            stub.Heartbeat(
                catalog_pb2.HeartbeatRequest(key="mallory@1.0.0"), metadata=auth("mallory"), timeout=10
            )
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many catalog writes" in (info.value.details() or "")
        for _ in range(5):  # admins are not limited
            stub.Heartbeat(
                catalog_pb2.HeartbeatRequest(key="mallory@1.0.0"), metadata=auth("ops"), timeout=10
            )


def test_caller_limits_come_from_the_environment() -> None:
    env = {"AGENCY_WATCH_QUEUE": "16", "AGENCY_CATALOG_WRITES_PER_SECOND": "2.5"}
    limits = caller_limits_from_env(env)
    assert limits.watch_queue == 16 and limits.catalog_writes_per_second == 2.5
    with pytest.raises(InvalidInput) as info:
        caller_limits_from_env({"AGENCY_WATCH_STREAMS_PER_CALLER": "many"})
    assert info.value.field == "AGENCY_WATCH_STREAMS_PER_CALLER"


# ------------------------------------------------------------------ issue 26: schema CPU


def _patterned(version: str, nodes: int = 1_500) -> Any:
    contract = contract_to_pb(
        CapabilityContract.parse({"name": "mallory", "version": version, "can_do": ["x"]})
    )
    props = {f"p{i}": {"type": "string", "pattern": f"^[a-z]{{1,{i % 50 + 1}}}-{i}$"} for i in range(nodes)}
    contract.input_schema_json = json.dumps({"type": "object", "properties": props})
    return contract


def test_schema_compilation_is_charged_to_the_caller_and_refused_past_its_budget(tmp_path: Path) -> None:
    """Issue 26: the largest schemas allowed cost ~1.3 s of CPU per Register; 60 fit under the
    write limit, so one agent kept a core busy. Now each caller has a CPU budget per minute."""
    limits = CallerLimits(
        schema_cpu_seconds_per_minute=0.001, catalog_writes_per_second=1e6, catalog_write_burst=10**6
    )
    grants = {"mallory": AgentGrant(actions=["x"])}
    with Gateway(tmp_path, grants=grants, limits=limits) as gw, gw.channel() as channel:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        stub.Register(
            catalog_pb2.RegisterRequest(contract=_patterned("1.0.0")), metadata=auth("mallory"), timeout=60
        )
        with pytest.raises(grpc.RpcError) as info:  # its budget is spent: refused before compiling
            stub.Register(
                catalog_pb2.RegisterRequest(contract=_patterned("1.0.1")),
                metadata=auth("mallory"),
                timeout=60,
            )
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "schema compilation budget" in (info.value.details() or "")
        trailers = dict(info.value.trailing_metadata() or ())
        assert int(trailers["agency-retry-after-ms"]) > 0
        # an admin is not limited (deployment tooling registers whole catalogs)
        stub.Register(
            catalog_pb2.RegisterRequest(contract=_patterned("1.0.2")), metadata=auth("ops"), timeout=60
        )


def test_a_cpu_budget_refills_over_a_minute() -> None:
    from middleware.caller_limits import CpuBudget
    from middleware.errors import ResourceExhausted

    now = [0.0]
    budget = CpuBudget(6.0, clock=lambda: now[0])
    budget.check("mallory", operation="op")
    budget.charge("mallory", 9.0)  # one costly call overdraws it by 3 s
    with pytest.raises(ResourceExhausted) as info:
        budget.check("mallory", operation="op")
    assert 30_000 <= info.value.details["retry_after_ms"] <= 30_200  # 3 s at 6 s a minute
    budget.check("alice", operation="op")  # another caller is not affected
    now[0] += 31
    budget.check("mallory", operation="op")
