"""No single call stalls the gateway (issue 14, items 1-4): while each attack runs, a health
check with a 2-second deadline succeeds and another client's Submit completes.

Real gRPC server on port 0 in its own thread; the attacker (bob, a client, or mallory, an
agent) sends the hostile call over and over from two threads while alice checks liveness.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.contracts import CapabilityContract
from middleware.grants import AgentGrant
from middleware.grpc_api.convert import contract_to_pb
from middleware.schema_guard import schema_limits
from tests.security.liveness import Gateway, auth, check_live, check_live_while


@pytest.fixture
def gw(tmp_path: Path) -> Any:
    with Gateway(tmp_path, grants={"mallory": AgentGrant(actions=["x"])}) as gateway:
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
