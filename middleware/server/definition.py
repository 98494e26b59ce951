"""The agency definition file: one YAML document describing a whole deployment.

It names the agents (in-process factories by import path, or remote workers by
endpoint) with their contracts, the goals, the failure policy, the storage
backend, the audit log and its checkpoint key, the server's listen addresses and TLS,
the TLS the gateway uses to call its remote workers, and the messaging agents with
their communication flows. ``load_definition`` (in
``config.py``, the one module that reads files and the environment) parses the
file; :class:`AgencyDefinition` validates it and reports *every* problem by path,
such as ``agents[2].contract.input_schema: not a valid JSON Schema ...`` or
``messaging.flows[1]: no agent 'ghost' in the communication flows``.

Example (``examples/ecommerce.yaml`` is the reference scenario)::

    server: {address: 127.0.0.1:50051, metrics_address: 127.0.0.1:9464, data_dir: agency-data}
    workers: {tls: {ca: /etc/agency/workers-ca.crt, cert: gateway.crt, key: gateway.key}}
    storage: {backend: redis, redis_url: "redis://redis:6379/0", key_prefix: "agency:"}
    audit: {checkpoint_key: /run/secrets/audit-checkpoint.key}
    agents:
      - factory: middleware.demo:demo_agent
        args: {name: warranty_agent}
        contract: {name: warranty_agent, version: 2.1.0, can_do: [warranty_claim], ...}
      - contract: {name: remote_agent, can_do: [translate], endpoint: 10.0.0.7:50061}
    goals:
      - {id: GOAL_WARRANTY_001, description: ..., verification_steps: [...]}
    grants: {remote_agent: {actions: [translate], endpoints: ["10.0.0.7:50061"]}}
    messaging:
      agents:
        - {name: customer_service, public_key: <base64>, token_sha256: <hex>}
        - {name: warranty_agent, public_key: <base64>, token_sha256: <hex>}
      flows: ["customer_service > warranty_agent"]
    humans:                     # people, approval gates, the operator console (docs/console.md)
      people:
        - {name: alice, roles: [operator], token_sha256: <hex>}
      approvals:
        - {agent: refund_executor, path: $.amount, above: 100}
      console: {address: 127.0.0.1:8080}
    protocols: {a2a: {address: 127.0.0.1:8470}}   # A2A / MCP, see middleware.server.protocol_settings
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .._model import Model
from ..access import Principal
from ..agents import AgentCallable
from ..audit.checkpoint import Signer
from ..audit.retention import parse_age
from ..contracts import CapabilityContract
from ..errors import InvalidInput, Problem
from ..goals import GoalAssertion
from ..grants import AgentGrant
from ..guards.policy import PolicyGate
from ..messaging.directory import RegistrationMode
from ..messaging.flows import Flows
from ..messaging.identity import AGENT_NAME_PATTERN, AclSettings, parse_public_key, token_hash
from ..messaging.limits import RateLimitSettings
from ..messaging.moderation import ModerationSettings
from ..messaging.post_office import PostOfficeConfig
from ..messaging.registration import RegistrationQuota
from ..messaging.webhooks import WebhookSettings
from ..names import look_alike, reserved_prefix
from ..people.model import HumansSettings
from ..planner import LangChainPlanner, Planner
from ..plans import check_plan
from ..tenancy import check_tenant
from .identity_settings import IdentitySettings
from .protocol_settings import ProtocolSettings
from .settings import (
    AgencyConfig,
    ServerConfig,
    WorkersTlsConfig,
    layered,
    read_signer_key,
    read_token,
)

__all__ = [
    "AgencyDefinition",
    "AgentDefinition",
    "AuditSettings",
    "MessagingAgent",
    "MessagingSettings",
    "RetentionSettings",
    "StorageRetention",
    "StorageSettings",
    "WorkersSettings",
    "definition_from",
    "load_definition",
    "name_problems",
    "resolve_import",
]


def resolve_import(path: str) -> Any:
    """``package.module:attribute`` -> the attribute (raises ValueError saying what is missing)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path of the form package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


class AgentDefinition(Model):
    """One agent: its contract plus where it runs."""

    contract: CapabilityContract
    factory: str = Field(default="", description="module:attribute called with ``args`` to build the agent.")
    agent: str = Field(default="", description="module:attribute of a ready agent callable.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for ``factory``.")

    @field_validator("factory", "agent")
    @classmethod
    def _importable(cls, v: str) -> str:
        if v:
            target = resolve_import(v)
            if not callable(target):
                raise ValueError(f"{v!r} is not callable")
        return v

    @model_validator(mode="after")
    def _where(self) -> AgentDefinition:
        given = [bool(self.factory), bool(self.agent), bool(self.contract.endpoint)]
        if sum(given) != 1:
            raise ValueError("give exactly one of factory, agent, or contract.endpoint (a remote worker)")
        return self

    def build(self) -> AgentCallable | None:
        """The in-process agent callable, or None for a remote worker."""
        if self.factory:
            built: AgentCallable = resolve_import(self.factory)(**self.args)
            return built
        if self.agent:
            agent: AgentCallable = resolve_import(self.agent)
            return agent
        return None


class PlannerSettings(Model):
    """The governed planner (docs/semantics.md, "Plans"): off unless a chat model is named.

    ``factory`` builds a LangChain chat model (any object with ``ainvoke``) from ``args``, e.g.
    ``langchain_openai:ChatOpenAI`` with ``{model: gpt-4.1-mini}``; the gateway asks it for a plan
    when a task names no steps and its goal (if any) declares none, and checks every proposal
    against the contracts before anything runs.
    """

    factory: str = Field(default="", description="module:attribute building the chat model; empty: off.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for ``factory``.")
    name: str = Field(
        default="langchain", min_length=1, max_length=64, description="Its name in the audit log."
    )

    @field_validator("factory")
    @classmethod
    def _importable(cls, v: str) -> str:
        if v and not callable(resolve_import(v)):
            raise ValueError(f"{v!r} is not callable")
        return v

    def build(self) -> Planner | None:
        """The planner, or None when off."""
        if not self.factory:
            return None
        return LangChainPlanner(resolve_import(self.factory)(**self.args), name=self.name)


_MAX_RETENTION_S = 400 * 24 * 3600.0


class StorageRetention(Model):
    """How long each kind of record stays in Redis (``storage.retention``; seconds). The audit
    log is the durable record of every task: Redis keeps what the replicas act on, for as long
    as they may act on it, so that its memory is bounded by the task rate times these times
    (docs/operations.md, "Redis memory")."""

    finished_task_seconds: float = Field(
        default=3600.0,
        gt=0,
        le=_MAX_RETENTION_S,
        description="A finished task's record (completed, failed, rejected, canceled) stays this long "
        "after it ended (GetTask, ListTasks, WatchTask on any replica), then goes (the audit log keeps it).",
    )
    held_task_seconds: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        le=_MAX_RETENTION_S,
        description="A task that has not finished (running, waiting for input or approval, interrupted) "
        "stays this long after its last change: a waiting task not resumed within it can no longer be.",
    )
    task_event_seconds: float = Field(
        default=300.0,
        gt=0,
        le=_MAX_RETENTION_S,
        description="A finished task's event stream stays this long after its last event (an "
        "unfinished task's: as long as its record): a follower reconnecting within it misses nothing; "
        "later, WatchTask answers the outcome from the record (the stream is ~3x the record's size).",
    )
    session_seconds: float | None = Field(
        default=None,
        gt=0,
        le=_MAX_RETENTION_S,
        description="A session's conversation state stays this long after its last change "
        "(default: agency.session_ttl_seconds, 24 h).",
    )
    routing_stats_seconds: float = Field(
        default=86_400.0,
        gt=0,
        le=_MAX_RETENTION_S,
        description="An agent's routing statistics go after this long without a dispatch to it.",
    )

    @model_validator(mode="after")
    def _events_outlive_nothing(self) -> StorageRetention:
        if self.task_event_seconds > self.held_task_seconds:
            raise ValueError(
                f"task_event_seconds ({self.task_event_seconds:g}) must not exceed held_task_seconds "
                f"({self.held_task_seconds:g}): a task's events would outlive the task"
            )
        return self


class StorageSettings(Model):
    """Where shared state lives: in memory (one gateway) or Redis (replicas)."""

    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = Field(
        default="",
        description="Required for backend redis: redis://host:port/db (rediss:// for TLS, "
        "unix:///path.sock), redis+sentinel://host:26379[,host:port...]/service_name, or "
        "redis+cluster://host:port[,host:port...]; see docs/operations.md.",
    )
    key_prefix: str = Field(
        default="agency:", description="Namespace of every Redis key; replicas sharing state use the same."
    )
    lease_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Catalog heartbeat lease, and on Redis each gateway's lease on the tasks it runs: "
        "a replica takes over the tasks of a gateway that stopped renewing within 4/3 of it "
        "(default: 30 s on Redis, none in memory).",
    )
    replica_acks: int = Field(
        default=0,
        ge=0,
        le=16,
        description="A task write is acknowledged only once this many Redis replicas have it "
        "(WAIT): a failover never loses a task a client was told about; writes are refused "
        "(UNAVAILABLE) while fewer replicas answer. 0 (default): no wait. Not on a Redis Cluster.",
    )
    replica_ack_timeout_ms: int = Field(
        default=1000, gt=0, le=60_000, description="How long a task write waits for replica_acks replicas."
    )
    retention: StorageRetention = Field(
        default_factory=StorageRetention,
        description="How long each kind of record stays in Redis (finished and held tasks, task "
        "events, sessions, routing statistics).",
    )

    @model_validator(mode="after")
    def _url(self) -> StorageSettings:
        if self.backend == "redis":
            from ..redis.connection import redis_client

            try:  # parses without connecting; the error names what is wrong (no service name ...)
                redis_client(self.redis_url, field="redis_url")
            except InvalidInput as exc:
                raise ValueError(str(exc.problems[0])) from None
            if self.replica_acks and "+cluster://" in self.redis_url:
                raise ValueError(
                    "replica_acks: not supported on a Redis Cluster (WAIT cannot be routed there); "
                    "use a Sentinel set or a standalone primary with replicas"
                )
        return self


def _age(v: Any) -> Any:
    if isinstance(v, str):
        return parse_age(v)  # "400d", "12h": a ValueError names the problem
    return v


class RetentionSettings(Model):
    """Retention of the audit log, applied by the running gateway (see docs/audit-log.md)."""

    max_age: timedelta = Field(
        description="Sealed segments whose newest record is older than this go, if a signed "
        "checkpoint covers them: 400d, 12h, 2w (or seconds)."
    )
    archive_dir: Path | None = Field(
        default=None, description="Move them under ``archive_dir/<node id>/`` instead of deleting them."
    )
    interval: timedelta = Field(default=timedelta(hours=1), description="Time between runs (1h, 30m ...).")

    _ages = field_validator("max_age", "interval", mode="before")(_age)

    @field_validator("max_age", "interval")
    @classmethod
    def _positive(cls, v: timedelta) -> timedelta:
        if v.total_seconds() <= 0:
            raise ValueError("must be positive")
        return v


class AuditSettings(Model):
    """Where the audit log lives, which key signs its checkpoints, how long it is kept."""

    directory: Path | None = Field(
        default=None, description="Audit log directory (default: ``<server.data_dir>/audit``)."
    )
    checkpoint_key: Path | None = Field(
        default=None,
        description="File holding the Ed25519 signer key of the checkpoints (``PRIVATE+KEY+...`` "
        "text); it must exist and lie outside the audit directory. Default: ``keys/<node id>.key`` "
        "beside the audit directory (``<server.data_dir>/keys``), created on first start.",
    )

    retention: RetentionSettings | None = Field(
        default=None, description="Archive or delete old segments on a schedule (default: keep all)."
    )
    witness: str = Field(
        default="",
        description="URL of a witness (``agency audit witness``) this gateway submits each new "
        "checkpoint to, with a consistency proof; empty (default): none.",
    )
    checkpoint_interval: timedelta = Field(
        default=timedelta(seconds=1),
        description="Sign and publish a checkpoint this long after the first record no checkpoint "
        "covers was written (besides every 1,000 records and on close): the unsigned tail an "
        "attacker could cut or alter unnoticed is at most this old (1s, 0.5s, 1m ...).",
    )

    _interval = field_validator("checkpoint_interval", mode="before")(_age)

    @field_validator("checkpoint_interval")
    @classmethod
    def _positive_interval(cls, v: timedelta) -> timedelta:
        if v.total_seconds() <= 0:
            raise ValueError("must be positive")
        return v

    @field_validator("checkpoint_key")
    @classmethod
    def _signer_key(cls, v: Path | None) -> Path | None:
        if v is not None:
            read_signer_key(v)
        return v

    def signer(self) -> Signer | None:
        """The checkpoint signer from ``checkpoint_key`` (None = the log's default key).

        Raises:
            InvalidInput: on ``audit.checkpoint_key``: the file is missing, unreadable or
                not a signer key.
        """
        if self.checkpoint_key is None:
            return None
        try:
            return read_signer_key(self.checkpoint_key)
        except ValueError as exc:
            raise InvalidInput.single("audit.checkpoint_key", str(exc), what="definition") from None


class WorkersSettings(Model):
    """How the gateway calls its remote workers (``agency worker``, contracts with an endpoint)."""

    tls: WorkersTlsConfig | None = Field(
        default=None,
        description="TLS to every worker: the CA that signs the workers' certificates, and for "
        "workers that require mutual TLS the gateway's client certificate and key; each worker's "
        "certificate must be issued for its agent's name (verify_agent_identity). None = plaintext.",
    )
    token_file: Path | None = Field(
        default=None,
        description="File holding the gateway's bearer token for its workers, sent on every call "
        "(workers started with --gateway-token-file take calls only with it). None = none sent.",
    )

    @field_validator("token_file")
    @classmethod
    def _readable(cls, v: Path | None) -> Path | None:
        if v is not None:
            try:
                read_token(v, field="workers.token_file")
            except InvalidInput as exc:
                raise ValueError(exc.problems[0].reason) from None
        return v

    def token(self) -> str | None:
        """The gateway's token for its workers, or None."""
        return read_token(self.token_file, field="workers.token_file") if self.token_file else None


class MessagingAgent(Model):
    """An agent with a mailbox: its identity, and its place in the communication flows."""

    name: str = Field(description="The agent's (and its mailbox's) name.")
    description: str = Field(default="", description="What it does; shown to senders in their tools.")
    public_key: str = Field(description="Raw 32-byte Ed25519 public key, base64: checks its signatures.")
    token_sha256: str = Field(
        description="Hex SHA-256 of the agent's bearer token (the token itself never goes in the file)."
    )
    receive_only: bool = Field(default=False, description="May never send (refused as a flow sender).")
    tenant: str = Field(
        default="", description="Its tenant: it reaches, and is found by, that tenant's agents only."
    )
    handoff_reminder: str | None = Field(
        default=None, description="System note when a conversation is handed to it ({agent} = its name)."
    )
    webhooks: list[WebhookSettings] = Field(
        default_factory=list,
        description="Push its messages to these URLs instead of waiting for pulls (first whose topics "
        "match; one without topics takes the rest). See docs/messaging.md 'Webhooks'.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AGENT_NAME_PATTERN.match(v):
            raise ValueError("1-128 characters: letters, digits and _ . : - (not first)")
        return v

    @field_validator("public_key")
    @classmethod
    def _key(cls, v: str) -> str:
        try:
            parse_public_key(v)
        except InvalidInput as exc:
            raise ValueError(exc.problems[0].reason) from None
        return v

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_tenant(v)

    @field_validator("token_sha256")
    @classmethod
    def _hash(cls, v: str) -> str:
        return token_hash(v)


class RegistrationSettings(Model):
    """``messaging.registration``: who may register an agent through the RPC."""

    mode: RegistrationMode = Field(
        default="closed",
        description="closed: the definition file only; open: any caller; admin: a caller with the "
        "admin role; approval: anyone, active once an admin approves (ApproveAgent).",
    )
    max_per_client: int = Field(
        default=100, ge=1, description="Agents one gateway client may have registered at once."
    )
    per_minute: float = Field(default=10.0, gt=0, description="Registrations one client may make per minute.")
    burst: int = Field(default=20, ge=1, description="Registrations one client may make at once.")

    def quota(self) -> RegistrationQuota:
        return RegistrationQuota(
            max_per_client=self.max_per_client, per_minute=self.per_minute, burst=self.burst
        )


class MessagingSettings(Model):
    """Agent-to-agent messaging: who has a mailbox, who may message whom, where mailboxes live."""

    mailboxes: Literal["storage", "memory"] = Field(
        default="storage",
        description="storage: in Redis (under storage.key_prefix, shared by replicas) when "
        "storage.backend is redis, else in memory; memory: in this process only.",
    )
    agents: list[MessagingAgent] = Field(
        default_factory=list, description="Agents that may use MessageService (enrolled on every replica)."
    )
    flows: list[Any] | None = Field(
        default=None,
        description="Communication flows: 'a > b > c' chains or {from, to, tool: send_message|handoff}. "
        "Given (even empty), direct messages must follow a flow; absent, any agent may message any.",
    )
    delivery: PostOfficeConfig = Field(
        default_factory=PostOfficeConfig, description="TTLs, visibility timeout, retries, size limits."
    )
    acl: AclSettings = Field(
        default_factory=AclSettings, description="Who may publish and subscribe to which topics."
    )
    registration: RegistrationSettings = Field(
        default_factory=lambda: RegistrationSettings(),
        description="Whether agents may register themselves through MessageService.Register.",
    )
    moderation: ModerationSettings = Field(
        default_factory=ModerationSettings,
        description="Rules that hold messages on the quarantine board (deny phrases, spam marks, reports).",
    )
    rate_limits: RateLimitSettings = Field(
        default_factory=RateLimitSettings,
        description="Message rate limits per sender, per recipient and per topic (token buckets; "
        "in Redis, shared by replicas, when the mailboxes are).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> MessagingSettings:
        problems: list[Problem] = []
        names: dict[str, int] = {}
        tokens: dict[str, int] = {}
        for i, agent in enumerate(self.agents):
            if names.setdefault(agent.name, i) != i:
                problems.append(
                    Problem(f"agents[{i}].name", f"{agent.name} is already agents[{names[agent.name]}]")
                )
            elif prefix := reserved_prefix(agent.name):
                problems.append(
                    Problem(
                        f"agents[{i}].name",
                        f"{agent.name!r} is under the reserved prefix {prefix!r} (people's mailboxes, the "
                        "gateway's own senders)",
                    )
                )
            else:
                alike = next((n for n, j in names.items() if j != i and look_alike(agent.name, n)), None)
                if alike is not None:
                    problems.append(
                        Problem(
                            f"agents[{i}].name",
                            f"{agent.name!r} looks like agents[{names[alike]}] {alike!r} (names are compared "
                            "case-folded and by their Unicode confusable skeleton)",
                        )
                    )
            if tokens.setdefault(agent.token_sha256, i) != i:
                problems.append(
                    Problem(
                        f"agents[{i}].token_sha256", f"the same token as agents[{tokens[agent.token_sha256]}]"
                    )
                )
        known = set(names) | {"*"}
        for i, rule in enumerate(self.acl.topics):
            for role in ("publishers", "subscribers"):
                for j, member in enumerate(getattr(rule, role)):
                    if member not in known:
                        problems.append(
                            Problem(f"acl.topics[{i}].{role}[{j}]", f"no messaging agent {member!r}")
                        )
        if self.flows is not None:
            try:
                self.build_flows()
            except InvalidInput as exc:
                problems += exc.problems
        if problems:
            # One error per problem, each at its own path (pydantic nests them under messaging).
            raise ValidationError.from_exception_data(
                "messaging",
                [
                    InitErrorDetails(
                        type=PydanticCustomError("messaging", "{reason}", {"reason": p.reason}),
                        loc=_loc(p.field),
                        input=None,
                    )
                    for p in problems
                ],
            )
        return self

    def build_flows(self) -> Flows:
        """The communication flows over ``agents`` (raises InvalidInput naming each bad flow)."""
        return Flows.from_config(
            {
                "agents": [
                    {
                        "name": a.name,
                        "description": a.description,
                        "receive_only": a.receive_only,
                        "handoff_reminder": a.handoff_reminder,
                    }
                    for a in self.agents
                ],
                "flows": self.flows or [],
            }
        )


def _loc(path: str) -> tuple[str | int, ...]:
    """``flows[1].tool`` -> ``("flows", 1, "tool")``."""
    out: list[str | int] = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            out.append(int(part[1:-1]))
        elif part:
            out.append(part)
    return tuple(out)


class SubjectKeySettings(Model):
    """Crypto-shredding (docs/security.md): with the personal-data guard on, personal data in
    audit records is sealed under a key per subject kept here, so ``agency audit erase`` can
    make it unreadable without touching the log."""

    directory: Path | None = Field(
        default=None,
        description="The subject key directory (default: keys/subjects beside the audit directory).",
    )
    enabled: bool = Field(
        default=True, description="Seal (true) or only redact (false) personal data in records."
    )


class PolicySettings(Model):
    """Policies as code (docs/security.md): a Cedar policy file asked at routing, dispatch,
    approval and export."""

    cedar: Path | None = Field(default=None, description="A Cedar policy file (needs the cedar extra).")
    default: Literal["allow", "deny"] = Field(
        default="deny", description="What no policy decides: Cedar's deny, or allow (forbid-only policies)."
    )

    @field_validator("cedar")
    @classmethod
    def _readable(cls, v: Path | None) -> Path | None:
        if v is not None:
            from ..guards.cedar_policy import CedarPolicyEngine

            try:
                CedarPolicyEngine.from_file(v)
            except OSError as exc:
                raise ValueError(f"cannot read {v}: {exc.strerror}") from None
            except InvalidInput as exc:
                raise ValueError(exc.problems[0].reason) from None
            except ImportError:
                raise ValueError("needs cedarpy: pip install 'agency-middleware[cedar]'") from None
        return v

    def gate(self) -> PolicyGate | None:
        """The gate over the policy file (None without one)."""
        if self.cedar is None:
            return None
        from ..guards.cedar_policy import CedarPolicyEngine

        return PolicyGate(CedarPolicyEngine.from_file(self.cedar, default=self.default))


class AgencyDefinition(Model):
    """A whole deployment, as read from the definition file."""

    version: Literal[1] = 1
    server: ServerConfig = Field(default_factory=ServerConfig)
    agency: AgencyConfig = Field(default_factory=AgencyConfig)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    agents: list[AgentDefinition] = Field(default_factory=list)
    goals: list[GoalAssertion] = Field(default_factory=list)
    planner: PlannerSettings = Field(
        default_factory=PlannerSettings, description="The governed planner (off unless a model is named)."
    )
    messaging: MessagingSettings = Field(default_factory=MessagingSettings)
    workers: WorkersSettings = Field(default_factory=WorkersSettings)
    humans: HumansSettings = Field(default_factory=HumansSettings)
    protocols: ProtocolSettings = Field(default_factory=ProtocolSettings)
    policies: PolicySettings = Field(default_factory=PolicySettings)
    subject_keys: SubjectKeySettings = Field(default_factory=SubjectKeySettings)
    identity: IdentitySettings = Field(
        default_factory=IdentitySettings, description="OIDC bearer tokens beside the token file."
    )
    grants: dict[str, AgentGrant] = Field(
        default_factory=dict,
        description="What each agent token may declare when it registers (see middleware.grants).",
    )

    @property
    def audit_directory(self) -> Path:
        """``audit.directory``, or ``<server.data_dir>/audit`` when not given."""
        return self.audit.directory or Path(self.server.data_dir) / "audit"

    @property
    def subject_key_directory(self) -> Path:
        """``subject_keys.directory``, or ``keys/subjects`` beside the audit directory."""
        from ..audit.shredding import default_subject_key_dir

        return self.subject_keys.directory or default_subject_key_dir(self.audit_directory)

    @property
    def mailbox_backend(self) -> Literal["memory", "redis"]:
        """Where the mailboxes live, from ``messaging.mailboxes`` and ``storage.backend``."""
        return (
            "redis" if self.messaging.mailboxes == "storage" and self.storage.backend == "redis" else "memory"
        )

    @model_validator(mode="after")
    def _unique(self) -> AgencyDefinition:
        problems = []
        first: dict[str, int] = {}
        for i, a in enumerate(self.agents):
            if first.setdefault(a.contract.key, i) != i:
                problems.append(
                    Problem(
                        f"agents[{i}].contract",
                        f"{a.contract.key} is already agents[{first[a.contract.key]}]",
                    )
                )
        goal_at: dict[str, int] = {}
        for i, g in enumerate(self.goals):
            if goal_at.setdefault(g.id, i) != i:
                problems.append(Problem(f"goals[{i}].id", f"{g.id} is already goals[{goal_at[g.id]}]"))
            if g.plan is not None:  # against the file's own contracts (workers may add more later)
                problems += check_plan(
                    g.plan,
                    [a.contract for a in self.agents],
                    prefix=f"goals[{i}].plan",
                    max_steps=self.agency.limits.max_steps_per_task,
                    require_contracts=False,
                )
        if problems:
            # Not a ValueError: pydantic would fold it into one message; we keep the paths.
            raise InvalidInput(problems, what="definition")
        return self

    @classmethod
    def from_data(cls, data: Any, *, source: str = "definition") -> AgencyDefinition:
        if not isinstance(data, dict):
            raise InvalidInput(
                [Problem("(root)", "the definition must be a mapping (YAML object)")], what=source
            )
        server = data.get("server")
        if isinstance(server, dict) and "agency" in server:  # would be silently ignored
            raise InvalidInput(
                [
                    Problem(
                        "server.agency", "not read from a definition file: use the top-level agency section"
                    )
                ],
                what=source,
            )
        return cls.parse(data, what=source)


def definition_from(
    data: Any = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    source: str = "definition",
) -> AgencyDefinition:
    """An agency definition from defaults, ``data`` (the file), ``env``, then ``overrides``.

    Each layer wins over the ones before it: flags (``overrides``, a partial definition
    such as ``{"server": {"address": ...}}``) > ``AGENCY_*`` variables > the file >
    defaults. A layer that moves the data directory without naming an audit directory
    moves the audit log with it (``<data_dir>/audit``).

    Raises:
        InvalidInput: listing every problem by path.
    """
    return AgencyDefinition.from_data(layered(data, env, overrides), source=source)


def load_definition(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> AgencyDefinition:
    """Read and validate an agency definition file (YAML or JSON), env and ``overrides`` over it.

    See :func:`definition_from` for the precedence.

    Raises:
        InvalidInput: listing every problem by path (``agents[2].contract.input_schema: ...``).
    """
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(
            [Problem("(file)", f"cannot read {source}: {exc.strerror or exc}")], what=source
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        raise InvalidInput(
            [Problem(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")], what=source
        ) from None
    return definition_from(data, env=env, overrides=overrides, source=source)


def name_problems(definition: AgencyDefinition, clients: Mapping[str, Principal] | None) -> list[Problem]:
    """People of the definition whose names are a token client's spelled another way, or look
    like one: the one name rule makes them one name (separation of duties compares them so), so
    the files must not disagree about it (``agency config check`` and ``agency serve`` refuse)."""
    if not clients:
        return []
    names = sorted({p.name for p in clients.values()})
    problems = []
    for i, person in enumerate(definition.humans.people):
        for client in names:
            if person.name != client and look_alike(person.name, client):
                problems.append(
                    Problem(
                        f"humans.people[{i}].name",
                        f"{person.name!r} and the token file's client {client!r} are one name under the one "
                        "name rule (compared case-folded, look-alikes included) but spelled differently: "
                        "spell them alike if they are one, else choose names that cannot be mistaken "
                        "(separation of duties treats them as one)",
                    )
                )
    return problems
