"""Policies as code: the gateway asks a policy engine at routing, dispatch, approval and export.

A :class:`PolicyEngine` answers a :class:`PolicyRequest` — principal (the caller: its name,
roles, tenant, the task's user), action (``route``, ``dispatch``, ``approve``, ``export``),
resource (the agent with its contract name, version, tags and actions; the audit log for an
export) and context (the task's text, step and action, the goal id, the personal data classes
in the agent's input) — with a :class:`PolicyDecision` naming the policies that decided.
:class:`~middleware.guards.cedar_policy.CedarPolicyEngine` is the built-in engine (Cedar,
``cedarpy``).

:class:`PolicyGate` is what the pipeline calls. Every decision is audited as
``policy.decision`` (outcome ``allow`` / ``deny``, rule ``policy:<id>`` of the first deciding
policy, the request and every deciding policy in its detail). A denial:

* at **routing** — the agent is left out and the router asked again; when no agent is left,
  the step is refused like any routing refusal, its explanation naming the policy;
* at **dispatch** — a ``POLICY_VIOLATION`` naming the policy (quarantined: the task stops,
  nothing is sent to the agent);
* at **approval** and **export** — :class:`PolicyDenied` (``PERMISSION_DENIED``), naming it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from .._model import Model
from ..access import current_principal
from ..audit.log import AuditLog
from ..audit.record import Actors, AuditRecord
from ..contracts import CapabilityContract
from ..detectors import Detection
from ..errors import PermissionDenied
from ..failures import FailureType
from ..router import RoutingDecision
from ..tasks import TaskRecord, TaskStep
from ..tenancy import split_key

__all__ = [
    "POLICY_RECORD",
    "PolicyDecision",
    "PolicyDenied",
    "PolicyEngine",
    "PolicyGate",
    "PolicyRequest",
    "PolicySubject",
]

#: The audit event type of a policy decision.
POLICY_RECORD = "policy.decision"

Audit = Callable[..., Awaitable[None]]


class PolicySubject(Model):
    """A principal or a resource: its type, id and attributes."""

    type: str = Field(min_length=1)
    id: str
    attrs: dict[str, Any] = Field(default_factory=dict)


class PolicyRequest(Model):
    """What is asked: may ``principal`` do ``action`` on ``resource`` in ``context``?"""

    principal: PolicySubject
    action: str = Field(min_length=1)
    resource: PolicySubject
    context: dict[str, Any] = Field(default_factory=dict)


class PolicyDecision(Model):
    """The answer, with the ids of the policies that decided it (empty: the default decided)."""

    allowed: bool
    policies: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)

    @property
    def policy(self) -> str:
        """The first deciding policy's id ('default' when none matched)."""
        return self.policies[0] if self.policies else "default"


@runtime_checkable
class PolicyEngine(Protocol):
    """Decides policy requests (Cedar built in; Rego or a remote PDP behind the same call)."""

    def decide(self, request: PolicyRequest) -> PolicyDecision: ...


class PolicyDenied(PermissionDenied):
    """A policy forbids the operation; ``policy`` names it."""

    reason = "POLICY_DENIED"

    def __init__(self, message: str, *, policy: str) -> None:
        self.policy = policy
        super().__init__(message)


def caller(run: TaskRecord | None = None) -> PolicySubject:
    """The principal of the call being served: its name and role (tokens on), the task's owner
    and user otherwise."""
    principal = current_principal()
    name = principal.name if principal is not None else (run.client if run is not None else "")
    roles = [principal.role] if principal is not None else []
    attrs: dict[str, Any] = {"roles": roles, "tenant": principal.tenant if principal is not None else ""}
    if run is not None:
        attrs["user"] = run.request.user_id
        # the task's tenant (its authenticated caller's); a tenant constraint only where there is none
        claimed = str(run.request.constraints.get("tenant", "")) if run.request.constraints else ""
        attrs["tenant"] = run.tenant or claimed
    return PolicySubject(type="Caller", id=name or "anonymous", attrs=attrs)


def agent_subject(contract: CapabilityContract) -> PolicySubject:
    return PolicySubject(
        type="Agent",
        id=contract.key,
        attrs={
            "name": contract.name,
            "version": contract.version,
            "tags": list(contract.tags),
            "can_do": list(contract.can_do),
            "data_classes": list(contract.data_classes),
            "remote": bool(contract.endpoint),
        },
    )


def task_context(
    run: TaskRecord, step: TaskStep | None, *, data_classes: Collection[str] = ()
) -> dict[str, Any]:
    return {
        "task": run.task_id,
        "text": (step.text if step is not None and step.text else run.request.text),
        "step": step.name if step is not None else "",
        "step_action": step.action if step is not None else "",
        "goal": run.goal.id if run.goal is not None else "",
        "data_classes": sorted(data_classes),
    }


class PolicyGate:
    """Asks ``engine`` where the pipeline acts, audits each decision and applies denials."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine

    async def _ask(
        self, audit: Audit, run: TaskRecord, request: PolicyRequest, *, agent: str
    ) -> PolicyDecision:
        decision = self.engine.decide(request)
        await audit(
            run,
            POLICY_RECORD,
            "allow" if decision.allowed else "deny",
            {"request": request.model_dump(mode="json"), **decision.model_dump(mode="json")},
            agent=agent,
            rule=f"policy:{decision.policy}",
        )
        return decision

    async def route(
        self,
        run: TaskRecord,
        step: TaskStep,
        decision: RoutingDecision,
        *,
        contract_of: Callable[[str], Awaitable[CapabilityContract]],
        redecide: Callable[[set[str]], Awaitable[RoutingDecision]],
        audit: Audit,
    ) -> RoutingDecision:
        """``decision`` with every agent a policy forbids left out (the router asked again)."""
        denied: dict[str, str] = {}
        while not decision.refused:
            contract = await contract_of(decision.chosen)
            request = PolicyRequest(
                principal=caller(run),
                action="route",
                resource=agent_subject(contract),
                context=task_context(run, step),
            )
            verdict = await self._ask(audit, run, request, agent=contract.key)
            if verdict.allowed:
                return decision
            denied[decision.chosen] = verdict.policy
            decision = await redecide(set(denied))
        if denied:
            named = "; ".join(f"policy {p!r} forbids routing to {a}" for a, p in denied.items())
            decision.explanation = f"{decision.explanation} ({named})"
        return decision

    async def dispatch(
        self,
        run: TaskRecord,
        step: TaskStep,
        contract: CapabilityContract,
        *,
        data_classes: Collection[str],
        audit: Audit,
    ) -> Detection | None:
        """A POLICY_VIOLATION naming the policy that forbids this dispatch, else None."""
        request = PolicyRequest(
            principal=caller(run),
            action="dispatch",
            resource=agent_subject(contract),
            context=task_context(run, step, data_classes=data_classes),
        )
        verdict = await self._ask(audit, run, request, agent=contract.key)
        if verdict.allowed:
            return None
        return Detection(
            type=FailureType.POLICY_VIOLATION,
            detail=f"policy {verdict.policy!r} forbids dispatching step {step.name} to {contract.key}",
            context={"rule": f"policy:{verdict.policy}", "policy": verdict.policy, "action": "dispatch"},
        )

    async def approve(
        self, run: TaskRecord, *, person: str, roles: Collection[str], agent: str, audit: Audit
    ) -> None:
        """Raise :class:`PolicyDenied` when a policy forbids ``person`` to approve the held step."""
        request = PolicyRequest(
            principal=PolicySubject(type="Person", id=person or "anonymous", attrs={"roles": sorted(roles)}),
            action="approve",
            resource=PolicySubject(type="Agent", id=agent or "unknown", attrs={"name": split_key(agent)[1]}),
            context={**task_context(run, None), "step": str(run.pending.get("step", ""))},
        )
        verdict = await self._ask(audit, run, request, agent=agent)
        if not verdict.allowed:
            raise PolicyDenied(
                f"policy {verdict.policy!r} forbids {person or 'this caller'} to approve step "
                f"{run.pending.get('step', '')} of task {run.task_id}",
                policy=verdict.policy,
            )

    async def export(self, log: AuditLog, *, node: str, what: dict[str, Any]) -> None:
        """Raise :class:`PolicyDenied` when a policy forbids the current caller this export
        (``what``: its filter); the decision is appended to ``log``."""
        principal = current_principal()
        request = PolicyRequest(
            principal=PolicySubject(
                type="Caller",
                id=principal.name if principal is not None else "anonymous",
                attrs={
                    "roles": [principal.role] if principal is not None else [],
                    "tenant": principal.tenant if principal is not None else "",
                },
            ),
            action="export",
            resource=PolicySubject(type="AuditLog", id="audit", attrs={}),
            context=what,
        )
        verdict = self.engine.decide(request)
        await log.append(
            AuditRecord(
                event_type=POLICY_RECORD,
                node=node,
                actors=Actors(user=request.principal.id),
                rule=f"policy:{verdict.policy}",
                outcome="allow" if verdict.allowed else "deny",
                detail={"request": request.model_dump(mode="json"), **verdict.model_dump(mode="json")},
            )
        )
        if not verdict.allowed:
            raise PolicyDenied(
                f"policy {verdict.policy!r} forbids {request.principal.id} to export the audit log",
                policy=verdict.policy,
            )
