"""People, tokens and an agency with a refund flow for the human-loop tests."""

from __future__ import annotations

from typing import Any

from middleware import Agency, CapabilityContract, TaskRequest, TaskStep
from middleware.people import ApprovalGate, ApprovalGates, Person
from middleware.people.desk import HumanDesk
from middleware.server.settings import hash_token
from middleware.testing import ScriptedAgent

TOKENS = {"alice": "tok-alice-operator", "bob": "tok-bob-approver", "carol": "tok-carol-compliance"}


def people() -> list[Person]:
    return [
        Person(name="alice", roles=["operator"], token_sha256=hash_token(TOKENS["alice"])),
        Person(name="bob", roles=["approver"], token_sha256=hash_token(TOKENS["bob"])),
        Person(name="carol", roles=["compliance_officer"], token_sha256=hash_token(TOKENS["carol"])),
    ]


def contract(name: str, action: str) -> CapabilityContract:
    return CapabilityContract(name=name, can_do=[action], slo_latency_ms=500)


def refund_request(amount: float, *, user: str = "customer-7") -> TaskRequest:
    return TaskRequest(
        text=f"refund order 42 ({amount} EUR)",
        input={"order_id": "42", "amount": amount},
        steps=[TaskStep(name="refund", action="refund")],
        user_id=user,
    )


async def refund_agency(
    gates: list[ApprovalGate] | None = None, **kwargs: Any
) -> tuple[Agency, HumanDesk, ScriptedAgent]:
    async def no_sleep(_: float) -> None:
        return None

    refunds = ScriptedAgent(lambda req: {"refunded": req.input["amount"], "order_id": req.input["order_id"]})
    desk_store = kwargs.pop("desk_store", None)
    agency = Agency(
        sleep=no_sleep,
        approvals=ApprovalGates(gates if gates is not None else [ApprovalGate(agent="refund_executor")]),
        **kwargs,
    )
    await agency.register(contract("refund_executor", "refund"), refunds)
    desk = HumanDesk(agency, people(), store=desk_store)
    return agency, desk, refunds


def records(agency: Agency, event_type: str, task_id: str | None = None) -> list[Any]:
    return [
        r
        for _, r in agency.audit.records()
        if r.event_type == event_type and (task_id is None or r.task_id == task_id)
    ]
