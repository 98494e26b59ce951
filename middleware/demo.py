"""The reference scenario from the seed (section 4): a shattered phone screen.

A user writes that the phone bought last week has a shattered screen and wants a
replacement. GOAL_WARRANTY_001 is anchored with three verification steps; the
warranty agent is chosen by contract; the replacement shipper times out, is retried
and still times out; the backup express shipper succeeds; the reply agent composes
the answer; the goal is verified COMPLETED. A second request ("predict next
quarter's stock price") is refused before any agent runs, because the financial
calculator's contract says it cannot predict stock prices.

All agents are deterministic scripted Python agents; no LLM is needed.
"""

from __future__ import annotations

from typing import Any

from .agents import AgentReply, AgentRequest
from .contracts import CapabilityContract
from .goals import GoalAssertion
from .pipeline import Agency
from .smf import Provenance
from .tasks import TaskRequest, TaskStep
from .testing import Hang, ScriptedAgent

__all__ = [
    "CONTRACTS",
    "WARRANTY_GOAL",
    "build_demo_agency",
    "demo_agent",
    "demo_agents",
    "refused_request",
    "warranty_request",
]

WARRANTY_GOAL = GoalAssertion(
    id="GOAL_WARRANTY_001",
    description="Give the user a screen replacement that the warranty terms allow.",
    verification_steps=[
        {
            "kind": "json_path",
            "path": "$.warranty.in_warranty",
            "equals": True,
            "description": "purchase is within the warranty period (<= 12 months)",
        },
        {
            "kind": "json_path",
            "path": "$.warranty.fault_type",
            "equals": "screen_shattered",
            "description": "fault is a shattered screen and not excluded damage",
        },
        {
            "kind": "regex",
            "pattern": r"(?is)model: .+tracking number [A-Z]{3}\d{6}.+expected delivery .+fee: ",
            "description": "reply gives model, tracking number, expected delivery and fee",
        },
    ],
    timeout_seconds=180,
    criticality="high",
)

_ORDER = {
    "type": "object",
    "required": ["user_id", "device_model"],
    "properties": {"user_id": {"type": "string"}, "device_model": {"type": "string"}},
}
_SHIPMENT = {
    "type": "object",
    "required": ["tracking_number", "carrier", "estimated_delivery"],
    "properties": {
        "tracking_number": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{6}$"},
        "carrier": {"type": "string"},
        "estimated_delivery": {"type": "string"},
    },
}

CONTRACTS = [
    CapabilityContract(
        name="warranty_agent",
        version="2.1.0",
        tags=["warranty", "phone_repair"],
        slo_latency_ms=1200,
        can_do=["warranty_claim", "warranty_check"],
        cannot_do=["issue_refund"],
        description="Checks warranty eligibility and the fault type.",
        input_schema=_ORDER,
        output_schema={
            "type": "object",
            "required": ["in_warranty", "fault_type", "fee"],
            "properties": {
                "in_warranty": {"type": "boolean"},
                "fault_type": {"type": "string"},
                "fee": {"type": "number", "minimum": 0},
            },
        },
    ),
    CapabilityContract(
        name="replacement_shipper",
        version="1.0.0",
        tags=["logistics"],
        slo_latency_ms=150,
        can_do=["ship_replacement"],
        description="Ships replacement devices (standard).",
        input_schema={"type": "object", "required": ["warranty"]},
        output_schema=_SHIPMENT,
    ),
    CapabilityContract(
        name="express_shipper",
        version="1.0.0",
        tags=["logistics", "express"],
        slo_latency_ms=400,
        can_do=["ship_replacement"],
        description="Backup express courier.",
        input_schema={"type": "object", "required": ["warranty"]},
        output_schema=_SHIPMENT,
    ),
    CapabilityContract(
        name="reply_agent",
        version="1.0.0",
        tags=["customer_service"],
        slo_latency_ms=500,
        can_do=["compose_reply"],
        description="Composes the reply to the user.",
        output_schema={"type": "object", "required": ["reply"], "properties": {"reply": {"type": "string"}}},
    ),
    CapabilityContract(
        name="financial_calculator",
        version="1.0.0",
        tags=["finance"],
        slo_latency_ms=300,
        can_do=["compound_interest", "amortization_schedule"],
        cannot_do=["stock_prediction", "tax_filing"],
        input_schema={
            "type": "object",
            "properties": {"principal": {"type": "number"}, "rate": {"type": "number"}},
        },
        output_schema={
            "type": "object",
            "properties": {"monthly_payment": {"type": "number"}, "total_interest": {"type": "number"}},
        },
    ),
]


def _warranty(request: AgentRequest) -> AgentReply:
    return AgentReply(
        output={
            "in_warranty": True,
            "months_since_purchase": 0,
            "fault_type": "screen_shattered",
            "accidental": False,
            "fee": 0,
            "coverage_end": "2027-11-21",
        },
        confidence_score=0.96,
        provenance=Provenance(source="warranty_db", reliability_score=0.98),
    )


def _express(request: AgentRequest) -> dict[str, Any]:
    return {"tracking_number": "EXP123456", "carrier": "express", "estimated_delivery": "2026-12-02"}


def _reply(request: AgentRequest) -> dict[str, Any]:
    data = request.input
    ship, warranty = data["shipping"], data["warranty"]
    fee = "free of charge" if warranty["fee"] == 0 else f"{warranty['fee']} CNY"
    text = (
        f"Hello, your screen replacement is approved. Replacement model: {data['device_model']}. "
        f"It ships by {ship['carrier']} courier, tracking number {ship['tracking_number']}, "
        f"expected delivery {ship['estimated_delivery']}. Fee: {fee}. Thank you for your patience!"
    )
    return {
        "reply": text,
        "model": data["device_model"],
        "tracking_number": ship["tracking_number"],
        "estimated_delivery": ship["estimated_delivery"],
        "fee": warranty["fee"],
        "warranty": warranty,
    }


def demo_agent(name: str) -> ScriptedAgent:
    """A fresh scripted agent of the scenario by contract name (a factory for definition files)."""
    for key, agent in demo_agents().items():
        if key.split("@", 1)[0] == name:
            scripted: ScriptedAgent = agent
            return scripted
    raise ValueError(f"the demo has no agent named {name!r}")


def demo_agents() -> dict[str, Any]:
    """Fresh scripted agents, keyed by contract key."""
    return {
        "warranty_agent@2.1.0": ScriptedAgent(_warranty, name="warranty_agent"),
        "replacement_shipper@1.0.0": ScriptedAgent(Hang(), name="replacement_shipper"),
        "express_shipper@1.0.0": ScriptedAgent(_express, name="express_shipper"),
        "reply_agent@1.0.0": ScriptedAgent(_reply, name="reply_agent"),
        "financial_calculator@1.0.0": ScriptedAgent({"monthly_payment": 0.0}, name="financial_calculator"),
    }


async def build_demo_agency(agency: Agency | None = None) -> Agency:
    """Register the scenario's contracts, agents and goal on ``agency`` (or a new one)."""
    agency = agency or Agency()
    agents = demo_agents()
    for contract in CONTRACTS:
        await agency.register(contract, agents[contract.key])
    agency.register_goal(WARRANTY_GOAL)
    return agency


def warranty_request() -> TaskRequest:
    return TaskRequest(
        text="My phone bought last week has a shattered screen, I want a replacement.",
        goal_id=WARRANTY_GOAL.id,
        user_id="u_789",
        session_id="s_demo",
        input={"user_id": "u_789", "device_model": "PhoneX", "purchase_date": "2026-11-21"},
        steps=[
            TaskStep(name="warranty"),  # action extracted from the text: warranty_claim
            TaskStep(name="shipping", action="ship_replacement"),
            TaskStep(name="reply", action="compose_reply"),
        ],
    )


def refused_request() -> TaskRequest:
    return TaskRequest(text="Predict next quarter's stock price for ACME.", user_id="u_789")
