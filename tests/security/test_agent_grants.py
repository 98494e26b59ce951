"""An agent cannot claim what it was not granted (issue 14, item 5).

The reproduction: mallory (an ``agent`` token) registered ``mallory@1.0.1`` declaring
``can_do: [warranty_check, warranty_claim]``, a 200 ms SLO and an endpoint it controls;
a client's warranty task was routed there. Now what an agent may declare is granted by
an admin (the definition's ``grants``); anything outside is PERMISSION_DENIED and audited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.contracts import CapabilityContract
from middleware.grants import AgentGrant
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api.convert import contract_to_pb
from tests.security.liveness import WARRANTY, Gateway, auth

GRANTS = {
    "mallory": AgentGrant(
        actions=["lint_code"], tags=["batch"], endpoints=["127.0.0.1:50999", "workers.internal"]
    )
}


def rogue(**over: Any) -> catalog_pb2.CapabilityContract:
    data: dict[str, Any] = {
        "name": "mallory",
        "version": "1.0.1",
        "can_do": ["warranty_check", "warranty_claim"],
        "slo_latency_ms": 200,
        "endpoint": "127.0.0.1:50999",
    }
    data.update(over)
    return contract_to_pb(CapabilityContract.parse(data))


@pytest.fixture
def gw(tmp_path: Path) -> Any:
    with Gateway(tmp_path, grants=GRANTS) as gateway:
        yield gateway


def refusals(gw: Gateway) -> list[dict[str, Any]]:
    return [
        {"event": r.event_type, **r.detail}
        for _, r in gw.audit.records()
        if r.outcome == "refused" and r.rule == "PERMISSION_DENIED"
    ]


def register(gw: Gateway, contract: catalog_pb2.CapabilityContract, who: str = "mallory") -> Any:
    with gw.channel() as channel:
        return catalog_pb2_grpc.CatalogServiceStub(channel).Register(
            catalog_pb2.RegisterRequest(contract=contract), metadata=auth(who), timeout=10
        )


def refused(gw: Gateway, contract: catalog_pb2.CapabilityContract) -> str:
    with pytest.raises(grpc.RpcError) as info:
        register(gw, contract)
    assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    return info.value.details() or ""


def test_the_mallory_takeover_is_refused_and_audited(gw: Gateway) -> None:
    why = refused(gw, rogue())
    assert "mallory@1.0.1" in why and "can_do warranty_check, warranty_claim not granted" in why
    (record,) = refusals(gw)
    assert record["event"] == "catalog.change" and record["target"] == "mallory@1.0.1"
    assert record["client"] == "mallory"
    # and the client's warranty task still goes to the real warranty agent
    with gw.channel() as channel:
        decision = agency_pb2_grpc.AgencyServiceStub(channel).Route(
            agency_pb2.RouteRequest(text=WARRANTY.text), metadata=auth("alice"), timeout=10
        )
    assert decision.chosen.startswith("warranty_agent@")


def test_endpoints_outside_the_grant_are_refused_ssrf(gw: Gateway) -> None:
    why = refused(gw, rogue(can_do=["lint_code"], endpoint="169.254.169.254:80"))
    assert "endpoint 169.254.169.254:80 not granted" in why
    why = refused(gw, rogue(can_do=["lint_code"], endpoint="127.0.0.1:6379"))
    assert "endpoint 127.0.0.1:6379 not granted" in why
    why = refused(gw, rogue(can_do=["lint_code"], tags=["realtime"], endpoint=""))
    assert "tags realtime not granted" in why
    assert len(refusals(gw)) == 3


def test_registration_within_the_grant_is_accepted(gw: Gateway) -> None:
    entry = register(gw, rogue(can_do=["lint_code"], tags=["batch"]))
    assert entry.key == "mallory@1.0.1"
    entry = register(gw, rogue(version="1.0.2", can_do=["lint_code"], endpoint="workers.internal:7000"))
    assert entry.key == "mallory@1.0.2"


def test_an_agent_without_a_grant_may_declare_nothing(tmp_path: Path) -> None:
    with Gateway(tmp_path) as gw:
        why = refused(gw, rogue(can_do=["lint_code"], endpoint=""))
        assert "no grant for agent 'mallory'" in why


def test_admins_are_not_limited_by_grants(gw: Gateway) -> None:
    assert register(gw, rogue(name="anything", can_do=["warranty_check"]), who="ops").key == "anything@1.0.1"


def test_grants_are_read_from_the_definition() -> None:
    definition = AgencyDefinition.from_data(
        {"grants": {"mallory": {"actions": ["Lint_Code"], "endpoints": ["Workers.Internal"]}}}
    )
    grant = definition.grants["mallory"]
    assert grant.actions == ["lint_code"] and grant.allows_endpoint("workers.internal:1")
    assert not grant.allows_endpoint("evil.internal:1")
    with pytest.raises(Exception, match=r"grants\.mallory\.endpoints"):
        AgencyDefinition.from_data({"grants": {"mallory": {"endpoints": ["http://x/y"]}}})


def test_serve_warns_about_agent_tokens_without_a_grant(caplog: Any) -> None:
    from middleware.access import Principal, Role
    from middleware.cli.serve import _warn_ungranted

    clients = {
        "h1": Principal(name="mallory", role=Role.AGENT),
        "h2": Principal(name="Translator", role=Role.AGENT),
        "h3": Principal(name="web", role=Role.CLIENT),
    }
    with caplog.at_level("WARNING", logger="agency.serve"):
        _warn_ungranted(clients, {"translator": AgentGrant(actions=["translate"])})
    assert "without a grant may register nothing: mallory;" in caplog.text
