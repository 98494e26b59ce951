"""People in the agency definition: who they are, what they may decide, what reaches them.

A person is declared like an agent (``humans.people`` in the definition file): a name, the
human roles (:class:`~middleware.access.HumanRole`), the SHA-256 of a bearer token (the same
scheme as the gateway's token file: the token itself never goes in the file) and the routes
that say which escalations reach them (by failure type, goal criticality, agent, tag, kind).

An :class:`ApprovalGate` makes a step wait for a person's approval before its agent runs:
always, or when a value in the step's input (a JSON path) is above a threshold.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .._model import Model
from ..access import HumanRole
from ..failures import FailureType
from ..jsonpath import JsonPath, JsonPathError
from ..messaging.identity import token_hash
from ..names import look_alike
from ..smf import new_id, utcnow
from ..tenancy import check_tenant, split_key

__all__ = [
    "MESSAGE_SUBJECT",
    "ApprovalGate",
    "ConsoleSettings",
    "Escalation",
    "EscalationKind",
    "EscalationRoute",
    "HumansSettings",
    "Person",
    "PersonRef",
]

#: What a person may be asked to settle.
EscalationKind = Literal["clarification", "conflict", "human_handover", "approval", "quarantine"]
ESCALATION_KINDS: tuple[str, ...] = ("clarification", "conflict", "human_handover", "approval", "quarantine")

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")


class EscalationRoute(Model):
    """One routing rule: an escalation matches when every criterion given matches (empty = any)."""

    kinds: list[EscalationKind] = Field(default_factory=list, description="clarification, approval ...")
    failure_types: list[FailureType] = Field(default_factory=list, description="e.g. GOAL_UNMET.")
    criticality: list[Literal["low", "medium", "high"]] = Field(
        default_factory=list, description="The goal's criticality."
    )
    agents: list[str] = Field(default_factory=list, description="Contract names of the blocked agent.")
    tags: list[str] = Field(default_factory=list, description="Any of the step's or request's tags.")

    def matches(self, esc: Escalation) -> bool:
        """Whether ``esc`` is one this rule sends to its person."""
        return (
            (not self.kinds or esc.kind in self.kinds)
            and (not self.failure_types or esc.failure_type in {t.value for t in self.failure_types})
            and (not self.criticality or esc.criticality in self.criticality)
            and (not self.agents or split_key(esc.agent)[1] in self.agents)
            and (not self.tags or bool(set(self.tags) & set(esc.tags)))
        )

    def describe(self) -> str:
        parts = [
            f"{label} in {', '.join(map(str, values))}"
            for label, values in (
                ("kind", self.kinds),
                ("failure type", [t.value for t in self.failure_types]),
                ("criticality", self.criticality),
                ("agent", self.agents),
                ("tag", self.tags),
            )
            if values
        ]
        return " and ".join(parts) or "every escalation"


class Person(Model):
    """A human member of the agency."""

    name: str = Field(description="Sign-in name; also the name of the person's mailbox (human:<name>).")
    display_name: str = Field(default="", max_length=200)
    roles: list[HumanRole] = Field(min_length=1, description="operator, approver, compliance_officer ...")
    token_sha256: str = Field(
        default="",
        description="Hex SHA-256 of the person's bearer token (see hash_token); empty: the person signs "
        "in only through the console's single sign-on (humans.console.oidc).",
    )
    routes: list[EscalationRoute] = Field(
        default_factory=list, description="Which escalations reach this person (besides role defaults)."
    )
    tenant: str = Field(
        default="",
        description="The tenant whose escalations, tasks, contracts and audit records the person sees "
        "(empty: none; middleware.tenancy).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("1-128 characters: letters, digits and _ . : - (not first)")
        return v

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_tenant(v)

    @field_validator("token_sha256")
    @classmethod
    def _hash(cls, v: str) -> str:
        return token_hash(v) if v.strip() else ""

    @property
    def mailbox(self) -> str:
        """The person's mailbox in the post office."""
        return f"human:{self.name}"

    def has(self, *roles: HumanRole | str) -> bool:
        """Whether the person holds any of ``roles``."""
        return any(HumanRole(r) in self.roles for r in roles)

    def ref(self) -> PersonRef:
        return PersonRef(name=self.name, roles=list(self.roles))


class PersonRef(Model):
    """Who decides, as the core records it: a person's name and roles."""

    name: str = Field(min_length=1)
    roles: list[HumanRole] = Field(default_factory=list)

    @property
    def role_names(self) -> str:
        return ",".join(r.value for r in self.roles)


class ApprovalGate(Model):
    """A step that needs a person's approval before its agent runs.

    Select steps by ``agent`` (contract name), ``action`` and/or ``goal`` (all given must match);
    ``path`` + ``above`` make the gate conditional on the step's input (``$.amount`` > 100).
    """

    name: str = Field(default="", description="Shown to the approver (default: what it selects).")
    agent: str = Field(default="", description="Contract name of the agent (e.g. refund_executor).")
    action: str = Field(default="", description="The step's action.")
    goal: str = Field(default="", description="The task's goal id.")
    path: str = Field(default="", description="JSON path into the step's input, e.g. $.amount.")
    above: float | None = Field(default=None, description="Approval needed when the value exceeds this.")
    roles: list[HumanRole] = Field(
        default_factory=lambda: [HumanRole.APPROVER], min_length=1, description="Who may approve."
    )
    timeout_seconds: float = Field(default=86_400.0, gt=0, description="Unanswered longer: the task fails.")

    @model_validator(mode="after")
    def _check(self) -> ApprovalGate:
        if not (self.agent or self.action or self.goal):
            raise ValueError("give at least one of agent, action, goal")
        if bool(self.path) != (self.above is not None):
            raise ValueError("path and above go together (a conditional gate), or neither")
        if self.path:
            try:
                JsonPath.compile(self.path)
            except JsonPathError as exc:
                raise ValueError(f"path: {exc}") from None
        if not self.name:
            self.name = " ".join(
                f"{k}={v}"
                for k, v in (("agent", self.agent), ("action", self.action), ("goal", self.goal))
                if v
            )
        return self

    def applies(self, *, agent: str, action: str, goal: str, data: Any) -> str | None:
        """Why this gate holds the step (a sentence), or None when it does not apply."""
        if self.agent and split_key(agent)[1] != self.agent:
            return None
        if self.action and action != self.action:
            return None
        if self.goal and goal != self.goal:
            return None
        if not self.path:
            return f"gate {self.name}: approval always required"
        assert self.above is not None
        for value in JsonPath.compile(self.path).find(data):
            if isinstance(value, int | float) and not isinstance(value, bool) and value > self.above:
                return f"gate {self.name}: {self.path} = {value:g} is above {self.above:g}"
        return None


class ConsoleOidcSettings(Model):
    """The console's single sign-on: the OIDC authorization-code flow with PKCE (S256).

    The ID token's ``username_claim`` names the person (``humans.people[].name``); their roles
    and tenant are the definition's. People without a ``token_sha256`` sign in only this way.
    """

    issuer: str = Field(description="The issuer URL (its discovery document gives the endpoints).")
    client_id: str = Field(min_length=1, description="The console's client id at the provider.")
    client_secret_file: str = Field(
        default="", description="File with the client secret (none: a public client, PKCE alone)."
    )
    redirect_url: str = Field(
        default="",
        description="Where the provider sends people back (default: the console's URL + /oidc/callback).",
    )
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile"])
    username_claim: str = Field(
        default="preferred_username",
        description="The ID token claim naming the person (humans.people[].name).",
    )
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    clock_skew_seconds: float = Field(default=60, ge=0, description="Leeway on the ID token's exp and iat.")

    @field_validator("issuer")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip().rstrip("/")
        if not re.match(r"^https://[^/\s]+|^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", v):
            raise ValueError(f"{v!r}: an https URL (plain http only on 127.0.0.1, localhost or [::1])")
        return v


class ConsoleSettings(Model):
    """The operator console (off unless ``address`` is set)."""

    address: str = Field(default="", description="host:port of the console (empty = off).")
    session_seconds: float = Field(default=8 * 3600, gt=0, description="A sign-in lasts this long.")
    secret_file: str = Field(
        default="", description="File with the session signing secret (default: a fresh one per start)."
    )
    signin_per_minute: float = Field(
        default=10.0, gt=0, description="Sign-in attempts one source address may make per minute (refill)."
    )
    signin_burst: int = Field(default=10, ge=1, description="Sign-in attempts one source may make at once.")
    oidc: ConsoleOidcSettings | None = Field(
        default=None, description="Sign people in through the company's OIDC provider (token sign-in stays)."
    )


class HumansSettings(Model):
    """The ``humans`` section of the definition: people, approval gates, the console."""

    people: list[Person] = Field(default_factory=list)
    approvals: list[ApprovalGate] = Field(default_factory=list)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    notify: list[str] = Field(
        default_factory=list,
        description="Messaging agents (e.g. a receive-only human_ops) that also get every escalation notice.",
    )

    @model_validator(mode="after")
    def _unique(self) -> HumansSettings:
        names: dict[str, int] = {}
        tokens: dict[str, int] = {}
        for i, p in enumerate(self.people):
            if names.setdefault(p.name, i) != i:
                raise ValueError(f"people[{i}].name: {p.name} is already people[{names[p.name]}]")
            for other, j in names.items():  # the one name rule, look-alikes included (middleware.names)
                if j != i and look_alike(p.name, other):
                    raise ValueError(
                        f"people[{i}].name: {p.name!r} looks like people[{j}] {other!r} (names are compared "
                        "case-folded and by their Unicode confusable skeleton): one person, or two names"
                    )
            if p.token_sha256 and tokens.setdefault(p.token_sha256, i) != i:
                raise ValueError(
                    f"people[{i}].token_sha256: the same token as people[{tokens[p.token_sha256]}]"
                )
        return self


#: ``Escalation.task_id`` of a message the post office's moderation held (no task behind it).
MESSAGE_SUBJECT = "message:"


class Escalation(Model):
    """One thing waiting for a person: a task's question, handover, approval or quarantine.

    Its ``id`` is the one-time decision id a decision names: decided once, never again.
    A message held by moderation is a ``quarantine`` escalation whose ``task_id`` is
    ``message:<message id>`` (see :attr:`held_message`).
    """

    id: str = Field(default_factory=lambda: new_id("esc"))
    task_id: str
    trace_id: str = ""
    kind: EscalationKind
    failure_type: str = ""
    step: str = ""
    agent: str = ""
    criticality: str = ""
    tags: list[str] = Field(default_factory=list)
    client: str = Field(default="", description="The client that submitted the task.")
    tenant: str = Field(default="", description="The task's tenant: only its people see the escalation.")
    user_id: str = ""
    summary: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    assignees: list[str] = Field(default_factory=list, description="People it reached.")
    routing: list[str] = Field(default_factory=list, description="Why it reached each of them.")
    deciders: list[HumanRole] = Field(default_factory=list, description="Roles that may decide it.")
    pending: dict[str, Any] = Field(default_factory=dict, description="The task's pending payload.")
    status: Literal["open", "answered", "closed", "expired"] = "open"
    decided_by: str = ""
    decided_role: str = ""
    decision: str = ""
    reason: str = ""
    decided_at: datetime | None = None

    @property
    def held_message(self) -> str:
        """The id of the message held on the quarantine board ('' for a task's escalation)."""
        return self.task_id.removeprefix(MESSAGE_SUBJECT) if self.task_id.startswith(MESSAGE_SUBJECT) else ""
