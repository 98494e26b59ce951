"""The guards as `agency serve` builds them from a definition file: personal data sealed under the
subjects' keys in the data directory, the Cedar policy file asked, and a contract's data classes
over gRPC."""

from __future__ import annotations

from pathlib import Path

from middleware import TaskState
from middleware.audit.compression import read_segment
from middleware.contracts import CapabilityContract
from middleware.server.bootstrap import build_agency
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api.convert import contract_from_pb, contract_to_pb

PHONE = "13812345678"


async def test_a_definition_turns_on_sealing_and_policies(tmp_path: Path) -> None:
    policies = tmp_path / "policies.cedar"
    policies.write_text(
        '@id("no-callbacks") forbid(principal, action == Action::"dispatch", resource)'
        ' when { resource.name == "callback" };'
    )
    definition = AgencyDefinition.parse(
        {
            "server": {"data_dir": str(tmp_path / "data")},
            "agency": {"guards": {"personal_data": {"enabled": True}, "injection": {"enabled": True}}},
            "policies": {"cedar": str(policies), "default": "allow"},
        }
    )
    agency = await build_agency(definition)
    await agency.register(
        {"name": "lookup", "can_do": ["lookup"], "slo_latency_ms": 5000}, lambda r: {"ok": 1}
    )
    await agency.register({"name": "callback", "can_do": ["call_back"], "slo_latency_ms": 5000}, lambda r: {})
    done = await agency.submit(
        {"text": f"call {PHONE}", "user_id": "u_1", "constraints": {"action": "lookup"}}
    )
    denied = await agency.submit(
        {"text": "call me", "user_id": "u_1", "constraints": {"action": "call_back"}}
    )
    await agency.close()
    assert done.state is TaskState.COMPLETED
    assert denied.state is TaskState.FAILED and denied.failures[0].context["policy"] == "no-callbacks"
    node_dirs = [d for d in (tmp_path / "data" / "audit").iterdir() if d.is_dir()]
    blob = b"".join(read_segment(p) for d in node_dirs for p in d.glob("*.wal*"))  # compressed once sealed
    assert PHONE.encode() not in blob and b"[sealed:phone:" in blob
    assert list((tmp_path / "data" / "keys" / "subjects").glob("*.key"))  # beside the audit directory


def test_a_contracts_data_classes_cross_grpc() -> None:
    contract = CapabilityContract.parse(
        {
            "name": "lookup",
            "can_do": ["lookup"],
            "data_classes": ["phone", "Email"],
            "restore_personal_data": True,
        }
    )
    back = contract_from_pb(contract_to_pb(contract))
    assert back == contract and back.data_classes == ["phone", "email"] and back.restore_personal_data
