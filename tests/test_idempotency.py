"""The ``idempotency`` declaration of a contract: through the definition file, the gRPC converters
and a registration, and the idempotency key a remote worker's agent receives with each call."""

from __future__ import annotations

import pytest

from middleware import Agency, AgentRequest, CapabilityContract
from middleware.agents import AgentRegistry
from middleware.dispatcher import idempotency_key
from middleware.errors import InvalidInput
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.convert import contract_from_pb, contract_to_pb
from middleware.server.remote_agent import RemoteAgent
from middleware.server.settings import definition_from
from middleware.server.worker import Worker


def test_the_declaration_round_trips_and_a_bad_value_is_named() -> None:
    contract = CapabilityContract(name="refunder", can_do=["refund"], idempotency="key")
    assert contract_from_pb(contract_to_pb(contract)).idempotency == "key"
    assert contract_from_pb(contract_to_pb(CapabilityContract(name="x", can_do=["y"]))).idempotency == ""
    with pytest.raises(InvalidInput) as info:
        CapabilityContract.parse({"name": "x", "can_do": ["y"], "idempotency": "maybe"}, what="contract")
    assert info.value.field == "idempotency"
    definition = definition_from(
        {"agents": [{"agent": "middleware.demo:demo_agent", "contract": {**contract.model_dump()}}]}, env={}
    )
    assert definition.agents[0].contract.idempotency == "key"


def test_the_key_is_the_same_for_the_same_input_and_differs_otherwise() -> None:
    key = idempotency_key("t1", "refund", {"order": 42, "amount": 10})
    assert key == idempotency_key("t1", "refund", {"amount": 10, "order": 42})  # key order does not count
    assert len(key) == 32
    others = {
        idempotency_key("t2", "refund", {"order": 42, "amount": 10}),
        idempotency_key("t1", "ship", {"order": 42, "amount": 10}),
        idempotency_key("t1", "refund", {"order": 42, "amount": 11}),
    }
    assert key not in others and len(others) == 3


async def test_a_remote_worker_gets_the_key_with_each_call_only_when_declared() -> None:
    seen: dict[str, list[str]] = {"refunder": [], "reader": []}

    def agent(name: str):
        async def call(request: AgentRequest) -> dict[str, str]:
            seen[name].append(request.idempotency_key)
            return {"ok": name}

        return call

    agency = Agency(agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{server.port}"
    refunder = Worker(
        agent("refunder"), {"name": "refunder", "can_do": ["refund"], "idempotency": "key"}, gateway=address
    )
    reader = Worker(agent("reader"), {"name": "reader", "can_do": ["read"]}, gateway=address)
    try:
        async with refunder, reader:
            registered = await agency.catalog.get("refunder@1.0.0")
            assert registered.contract.idempotency == "key"  # declared by the worker, kept by the gateway
            done = await agency.submit(
                {"text": "refund it", "constraints": {"action": "refund"}, "input": {"n": 1}}
            )
            plain = await agency.submit({"text": "read it", "constraints": {"action": "read"}})
    finally:
        await server.stop(0)
        await agency.close()
    assert done.state.value == "completed" and plain.state.value == "completed"
    assert seen["refunder"] == [idempotency_key(done.task_id, "main", {"n": 1})]
    assert seen["reader"] == [""]
