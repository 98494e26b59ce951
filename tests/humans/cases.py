"""Agents and a definition for the human-loop end-to-end cases (imported by gateway processes).

The warranty case of the seed with its shipper down, so a person takes over the shipping
step; a refund that needs an approver; an agent whose output carries a ``<script>`` payload.
The agents are defined here (not taken from ``middleware.demo``) so the cases stay as they are.
"""

from __future__ import annotations

from typing import Any

from middleware.agents import AgentReply, AgentRequest
from middleware.server.settings import hash_token
from middleware.smf import Provenance
from middleware.testing import ScriptedAgent

TOKENS = {
    "alice": "console-token-alice-operator-0001",
    "bob": "console-token-bob-approver-000002",
    "carol": "console-token-carol-compliance-03",
    "mo": "console-token-mo-moderator-000004",
}
XSS = "<script>window.__xss = 1</script><img src=x onerror=window.__xss=2>"


def _warranty(request: AgentRequest) -> AgentReply:
    return AgentReply(
        output={"in_warranty": True, "fault_type": "screen_shattered", "fee": 0},
        confidence_score=0.96,
        provenance=Provenance(source="warranty_db", reliability_score=0.98),
    )


def _shipper_down(request: AgentRequest) -> Any:
    raise ConnectionError("courier API unreachable")


def _reply(request: AgentRequest) -> dict[str, Any]:
    ship = request.input["shipping"]
    return {
        "reply": f"Model: PhoneX. Tracking number {ship['tracking_number']}, expected delivery "
        f"{ship['estimated_delivery']}. Fee: 0.",
        "tracking_number": ship["tracking_number"],
    }


def _refund(request: AgentRequest) -> dict[str, Any]:
    return {"refunded": request.input["amount"], "order_id": request.input["order_id"]}


def _echo(request: AgentRequest) -> dict[str, Any]:
    return {"reply": f"{XSS} {request.text}"}


def _intake(request: AgentRequest) -> AgentReply:
    """Reads the user's sentence: a dropped phone is accidental damage."""
    return AgentReply(
        output={"intent": "warranty_replacement", "context": {"accidental": "摔" in request.text}},
        provenance=Provenance(source="greeting_agent", reliability_score=0.9),
    )


def _claims(request: AgentRequest) -> AgentReply:
    """A claims system that says the damage was not accidental, whatever it was told."""
    return AgentReply(
        output={"eligible": True, "accidental": False, "fee": 0},
        provenance=Provenance(source="warranty_db", reliability_score=0.95),
    )


_AGENTS = {
    "warranty_agent": _warranty,
    "replacement_shipper": _shipper_down,
    "reply_agent": _reply,
    "refund_executor": _refund,
    "echo_agent": _echo,
    "intake_agent": _intake,
    "claims_agent": _claims,
}


def make(name: str) -> ScriptedAgent:
    """A fresh agent of these cases (a factory for definition files)."""
    fn = _AGENTS[name]
    return ScriptedAgent(*([fn] * 1000), name=name)


def _contract(name: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "can_do": [action], "slo_latency_ms": 2000, **extra}


CONTRACTS = [
    _contract("warranty_agent", "warranty_claim", tags=["warranty"]),
    _contract("replacement_shipper", "ship_replacement", tags=["logistics"]),
    _contract("reply_agent", "compose_reply"),
    _contract("refund_executor", "refund", tags=["payments"]),
    _contract("echo_agent", "echo"),
    _contract("intake_agent", "read_request"),
    _contract("claims_agent", "check_claim"),
]

GOAL = {
    "id": "GOAL_WARRANTY_HUMAN",
    "description": "A replacement the warranty allows, with tracking.",
    "criticality": "high",
    "timeout_seconds": 60,
    "verification_steps": [
        {"kind": "regex", "pattern": r"Tracking number [A-Z]{3}\d{6}", "description": "reply gives tracking"}
    ],
}


def people() -> list[dict[str, Any]]:
    return [
        {
            "name": "alice",
            "display_name": "Alice (operator)",
            "roles": ["operator", "auditor"],  # auditor: she signs a checkpoint in the browser test
            "token_sha256": hash_token(TOKENS["alice"]),
        },
        {
            "name": "bob",
            "display_name": "Bob (approver)",
            "roles": ["approver"],
            "token_sha256": hash_token(TOKENS["bob"]),
        },
        {
            "name": "carol",
            "roles": ["compliance_officer"],
            "token_sha256": hash_token(TOKENS["carol"]),
            "routes": [{"failure_types": ["POLICY_VIOLATION"]}],
        },
        {
            "name": "mo",
            "display_name": "Mo (moderator)",
            "roles": ["moderator", "quarantine_reviewer"],
            "token_sha256": hash_token(TOKENS["mo"]),
        },
    ]


def definition(console: str = "127.0.0.1:0", **extra: Any) -> dict[str, Any]:
    """A whole definition: these agents, the goal, the people, a refund gate, the console."""
    return {
        "version": 1,
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "agency": {"failure_policy": {"max_retries": 0, "on_exhausted": "escalate_to_human"}},
        "agents": [{"factory": "cases:make", "args": {"name": c["name"]}, "contract": c} for c in CONTRACTS],
        "goals": [GOAL],
        "humans": {
            "people": people(),
            "approvals": [{"agent": "refund_executor", "path": "$.amount", "above": 100}],
            "console": {"address": console},
        },
        **extra,
    }


WARRANTY_TEXT = "My phone bought last week has a shattered screen, I want a replacement."
WARRANTY_INPUT = {"user_id": "u_789", "device_model": "PhoneX"}
SHIPMENT = {"tracking_number": "EXP123456", "carrier": "express", "estimated_delivery": "2026-12-02"}
