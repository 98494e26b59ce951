"""Approval gates in the pipeline: when a step waits for a person, and who may release it.

:class:`ApprovalGates` is asked before a step's agent is dispatched; a gate that applies
(and has not been granted for this step) stops the task in ``input_required`` with a
``pending`` of kind ``approval`` (A2A ``TASK_STATE_AUTH_REQUIRED``). :func:`check_approver`
is the separation-of-duties rule a resume applies: the approver holds one of the gate's
roles and is not the client (nor the end user) that submitted the task -- compared by the one
name rule (case-folded), look-alikes included.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..access import Principal, Role
from ..errors import PermissionDenied
from ..names import look_alike
from ..smf import utcnow
from ..tasks import TaskRecord, TaskStep
from .model import ApprovalGate, PersonRef

__all__ = ["ApprovalGates", "TaskObserver", "approval_expired", "check_approver"]


class ApprovalGates:
    """The definition's approval gates, checked for each step before dispatch."""

    def __init__(self, gates: Sequence[ApprovalGate] = ()) -> None:
        self.gates = list(gates)

    def __bool__(self) -> bool:
        return bool(self.gates)

    def pending_for(
        self, run: TaskRecord, step: TaskStep, agent: str, *, now: datetime | None = None
    ) -> dict[str, Any] | None:
        """The ``approval`` pending payload when a gate holds ``step`` on ``agent``; else None."""
        if step.name in run.approvals:
            return None
        data = {**run.request.input, **step.input}
        action = step.action or str(run.request.constraints.get("action", ""))
        goal = run.goal.id if run.goal is not None else ""
        for gate in self.gates:
            why = gate.applies(agent=agent, action=action, goal=goal, data=data)
            if why is None:
                continue
            start = now or utcnow()
            return {
                "kind": "approval",
                "step": step.name,
                "agent": agent,
                "gate": gate.name,
                "why": why,
                "question": f"Approve running {agent} for step {step.name}?",
                "input": data,
                "roles": [r.value for r in gate.roles],
                "timeout_seconds": gate.timeout_seconds,
                "requested_at": start.isoformat(),
                "expires_at": (start + timedelta(seconds=gate.timeout_seconds)).isoformat(),
                "decisions": ["approve", "abort"],
            }
        return None


def approval_expired(pending: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether an ``approval`` pending payload is past its ``expires_at``."""
    expires = pending.get("expires_at")
    if not expires:
        return False
    return (now or utcnow()) >= datetime.fromisoformat(str(expires))


def check_approver(run: TaskRecord, person: PersonRef | None, caller: Principal | None) -> tuple[str, str]:
    """Who approves (name, role): a person with one of the gate's roles, or an admin client;
    never the client (or user) that submitted the task.

    Raises:
        PermissionDenied: naming who tried and why (separation of duties, missing role).
    """
    roles = [str(r) for r in run.pending.get("roles", [])]
    if person is not None:
        name, held = person.name, [r.value for r in person.roles]
        role = next((r for r in held if r in roles), "")
        if not role:
            raise PermissionDenied(
                f"{name} (roles {', '.join(held) or 'none'}) may not approve task {run.task_id}: "
                f"gate {run.pending.get('gate', '')} needs one of the roles {', '.join(roles)}",
                details={"person": name, "roles": held, "needed": roles, "target": run.task_id},
            )
    elif caller is not None:
        name, role = caller.name, caller.role.value
        if caller.role is not Role.ADMIN:
            raise PermissionDenied(
                f"client {name!r} (role {role}) may not approve task {run.task_id}: an approval is "
                "given by a person with the gate's role (operator console) or an admin",
                details={"client": name, "role": role, "target": run.task_id},
            )
    else:  # tokens off: nobody is authenticated; the decision's own name is all there is
        return "", ""
    submitters = {s for s in (run.client, run.request.user_id) if s and s != "anonymous"}
    # the one name rule (case-folded), and no look-alike either: console person 'Alice' (or
    # 'A1ice') may not approve what client 'alice' submitted (middleware.names)
    if any(look_alike(name, s) for s in submitters):
        raise PermissionDenied(
            f"{name} submitted task {run.task_id} and may not approve it (separation of duties)",
            details={"person": name, "permission": "separation_of_duties", "target": run.task_id},
        )
    return name, role


class TaskObserver(Protocol):
    """Told when a task starts and whenever it stops (waiting or finished): the human desk."""

    async def task_started(self, run: TaskRecord) -> None: ...

    async def task_stopped(self, run: TaskRecord) -> None: ...
