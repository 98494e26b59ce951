"""The post office: authenticated, signed, audited messaging over a mailbox transport.

Every agent has a mailbox named after it. Three ways to address a message:

- **point-to-point** (:meth:`PostOffice.send`): to ``message.receiver``; subject to
  the communication flows when the post office has them.
- **topic** (:meth:`PostOffice.publish`): ``domain.action`` names; each subscriber
  gets its own copy in its own mailbox. Publishing to a topic nobody subscribes to
  is *topic drift*: audited (``topic.drift``), counted and passed to ``on_drift``.
- **broadcast** (:meth:`PostOffice.broadcast`): a copy to every registered agent
  but the sender (ACL topic ``system.broadcast``).

On the way in: the token is authenticated, the SMF message validated, the sender
must be the token's agent, the message must be fresh (``created_at`` not beyond the
allowed clock skew in the future, its ``freshness_ttl`` a finite positive number of
seconds that has not run out), the rate limits are charged (per sender, recipient,
topic), the payload size is checked, the Ed25519 signature verified (over the message
*and* how it travels: kind, topic, TTL, ``trigger_turn``, params), then the message is
enqueued and audited (``message.accepted``). Refusals are audited too
(``message.rejected`` / ``message.forged``).

On the way out (:meth:`PostOffice.pull`): delivery is at-least-once. A pulled
message not acknowledged within the visibility timeout is handed out again; after
``max_deliveries`` hand-outs it goes to the dead-letter list with the reason. An
expired message (TTL, or content no longer fresh) is dropped and recorded. The
signature is verified again on receipt, and the message must be addressed to the
mailbox it was found in (the transport is not trusted). Messages whose id was already acknowledged
in this mailbox are skipped (dedupe), so a redelivery has no second effect.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import logging
import math
import random
import secrets
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from .._model import Model
from ..access import HumanRole, Principal, Role
from ..audit import AuditLog, AuditRecord, MemoryAuditLog
from ..audit.record import Actors, AuditEventType, canonical_json
from ..errors import (
    AgencyError,
    AlreadyExists,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    PermissionDenied,
    Problem,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from ..names import name_keys
from ..refusals import RefusalAggregator, current_call
from ..smf import SMFMessage, freshness_problem
from .clock import Clock, system_clock
from .directory import AgentRecord, Directory, MemoryDirectory, RegistrationMode
from .flows import Flows
from .identity import (
    AGENT_NAME_PATTERN,
    TOPIC_PATTERN,
    IdentityRegistry,
    RateLimiter,
    SendOptions,
    TopicACL,
    check_topic,
    parse_public_key,
    signing_bytes,
)
from .limits import RateLimits
from .mailbox import Batch, Delivery, MailboxTransport
from .memory_mailbox import MemoryMailbox
from .moderation import (
    MESSAGE_DELETED,
    MESSAGE_QUARANTINED,
    MESSAGE_RELEASED,
    MESSAGE_REPORTED,
    MemoryBoard,
    ModerationRule,
    QuarantineBoard,
    Quarantined,
)
from .registration import RegistrationQuota, RegistrationRate, check_new_name
from .subscriptions import MemorySubscriptions, SubscriptionStore

__all__ = [
    "BROADCAST",
    "BROADCAST_TOPIC",
    "DeadMessage",
    "Envelope",
    "PostOffice",
    "PostOfficeConfig",
    "Received",
    "SendResult",
]

log = logging.getLogger("agency.messaging")

#: The ``receiver`` of a broadcast message.
BROADCAST = "*"
#: The ACL topic that governs who may broadcast.
BROADCAST_TOPIC = "system.broadcast"

Kind = Literal["direct", "topic", "broadcast"]


class PostOfficeConfig(Model):
    """Delivery knobs of the post office."""

    max_payload_bytes: int = Field(
        default=64 * 1024, ge=64, description="Largest content (as compact JSON) a message may carry."
    )
    default_ttl: float = Field(
        default=3600.0, gt=0, description="Seconds a message lives when none is given."
    )
    max_ttl: float = Field(default=7 * 86400.0, gt=0, description="Longest TTL a sender may ask for.")
    max_deliveries: int = Field(
        default=5, ge=1, description="Hand-outs without an ack before a message is dead-lettered."
    )
    visibility_timeout: float = Field(
        default=30.0, gt=0, description="Seconds a pulled message stays invisible to other consumers."
    )
    mailbox_max: int = Field(default=10_000, ge=1, description="Unacknowledged messages a mailbox holds.")
    processed_ttl: float = Field(
        default=86400.0, gt=0, description="Seconds an acknowledged message id is remembered for dedupe."
    )
    require_signatures: bool = Field(default=True, description="Refuse messages without a valid signature.")
    max_clock_skew: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Seconds a sender's clock may be ahead of (created_at in the future) or behind "
        "the post office's before its messages are refused as from the future or stale.",
    )
    trace_link: str = Field(
        default="agency trace show {trace_id}",
        max_length=512,
        description="Returned with every send: where to follow the message ({trace_id}, {message_id}), "
        "e.g. https://console.example.com/trace/{trace_id}.",
    )
    max_freshness_ttl: float = Field(
        default=365 * 86400.0,
        gt=0,
        description="Longest freshness_ttl a message may declare (0, infinite and NaN are refused).",
    )

    @field_validator("trace_link")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            v.format(trace_id="t", message_id="m")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"a template with only {{trace_id}} and {{message_id}}: {exc!r}") from None
        return v


class Envelope(Model):
    """What a mailbox stores: the SMF message plus how it travels."""

    message: SMFMessage
    signature: str = ""
    kind: Kind = "direct"
    topic: str = ""
    expires_at: float = Field(description="Epoch seconds after which the message is dropped.")
    trigger_turn: bool = False
    params: dict[str, Any] = Field(default_factory=dict)
    ttl: float | None = Field(
        default=None, description="The TTL the sender signed (None: the post office's default)."
    )
    content_type: str = "application/json"
    correlation_id: str = ""
    message_hash: str = Field(default="", description="Hex SHA-256 of the signed bytes.")

    def options(self) -> SendOptions:
        """How the message travels, as its sender signed it."""
        return SendOptions(
            kind=self.kind,
            topic=self.topic,
            ttl=self.ttl,
            trigger_turn=self.trigger_turn,
            params=self.params,
            content_type=self.content_type,
            correlation_id=self.correlation_id,
        )


@dataclass(frozen=True)
class SendResult:
    """What a send returns: the message id and the mailboxes it went to.

    For topics and broadcast, a subscriber whose mailbox is full is skipped (and the
    refusal audited); ``recipients`` lists only the mailboxes that got a copy.
    """

    message_id: str
    recipients: tuple[str, ...]
    message_hash: str = ""  #: hex SHA-256 of what the sender signed (computed by the post office)
    trace_link: str = ""  #: where to follow the message (``delivery.trace_link`` filled in)
    quarantined: str = ""  #: why moderation held it on the quarantine board (then no recipient got it)

    @property
    def copies(self) -> int:
        return len(self.recipients)


@dataclass(frozen=True)
class Received:
    """A message handed to its recipient; acknowledge it with ``receipt``."""

    receipt: str
    message: SMFMessage
    kind: Kind
    topic: str
    trigger_turn: bool
    delivery_count: int
    expires_at: float
    params: Mapping[str, Any] = field(default_factory=dict)
    signature: str = ""  #: the sender's, over the message and :meth:`options`
    ttl: float | None = None  #: the TTL the sender signed (None: the default)
    content_type: str = "application/json"  #: the MIME type of ``message.content``
    correlation_id: str = ""  #: the conversation it belongs to
    message_hash: str = ""  #: hex SHA-256 of the signed bytes (recompute to check)

    def options(self) -> SendOptions:
        """How the message travelled, as its sender signed it (to verify ``signature``)."""
        return SendOptions(
            kind=self.kind,
            topic=self.topic,
            ttl=self.ttl,
            trigger_turn=self.trigger_turn,
            params=self.params,
            content_type=self.content_type,
            correlation_id=self.correlation_id,
        )


@dataclass(frozen=True)
class DeadMessage:
    """A dead-lettered message and why it died (``message`` is None if unreadable)."""

    message: SMFMessage | None
    reason: str
    delivery_count: int


def _receipt(entry_id: str, message_id: str) -> str:
    return f"{entry_id}|{message_id}"


MessageType = Literal["", "private", "public"]


def _check_message_type(message_type: str) -> None:
    if message_type not in ("", "private", "public"):
        raise InvalidInput.single(
            "message_type",
            f"{message_type!r}: private (direct messages), public (topic and broadcast) or empty",
        )


def _of_type(envelope: Envelope, message_type: str) -> bool:
    if not message_type:
        return True
    return (envelope.kind == "direct") == (message_type == "private")


def _received(delivery: Delivery, envelope: Envelope, expires_at: float) -> Received:
    msg = envelope.message
    return Received(
        receipt=_receipt(delivery.entry_id, msg.message_id),
        message=msg,
        kind=envelope.kind,
        topic=envelope.topic,
        trigger_turn=envelope.trigger_turn,
        delivery_count=delivery.delivery_count,
        expires_at=expires_at,
        params=envelope.params,
        signature=envelope.signature,
        ttl=envelope.ttl,
        content_type=envelope.content_type,
        correlation_id=envelope.correlation_id,
        message_hash=envelope.message_hash,
    )


def _addressee(envelope: Envelope) -> str:
    """The receiver a message of this kind must name: the mailbox's agent (checked by the
    caller), the topic, or ``"*"``."""
    if envelope.kind == "topic":
        return envelope.topic
    if envelope.kind == "broadcast":
        return BROADCAST
    return envelope.message.receiver


class PostOffice:
    """Authenticated, signed, audited mailboxes, topics and broadcast over one transport.

    Args:
        transport: Where mailboxes live (default: :class:`MemoryMailbox`).
        identity: Registered agents and token hashes (default: a fresh registry).
        audit: Where every message and refusal is recorded (default: in memory).
        acl: Topic publish/subscribe rules (default: every topic open).
        rate_limiter: Per-agent token bucket charged on every send (default: none).
        limits: Rate limits per sender, recipient and topic (the definition's
            ``messaging.rate_limits``; shared by replicas when its store is Redis).
        flows: When given, point-to-point messages must follow a declared flow.
        flows_exempt: Senders the flows do not bind (the runtime's completion watcher).
        subscriptions: Who subscribes to which topic (default: this process;
            :class:`~.subscriptions.RedisSubscriptions` shares them between replicas).
        directory: Agents that registered through :meth:`register_agent` (default: this
            process; :class:`~.directory.RedisDirectory` shares them between replicas).
        registration: Who may register: ``closed`` (default: the definition file only),
            ``open``, ``admin`` (a caller with the admin role) or ``approval`` (pending until
            an admin approves).
        registration_quota: How many agents one client may register, and how fast (names are
            checked by :mod:`.registration`: no reserved prefix, no look-alike).
        moderation: Rules that hold a message on the quarantine ``board`` instead of
            delivering it (see :mod:`.moderation`); ``reports_to_quarantine`` distinct
            reporting agents quarantine a message too (0: reports are only recorded).
        config: Delivery knobs.
        clock: Epoch seconds; TTLs and expiry use it.
        on_drift: Metric hook called with ``(topic, sender)`` on topic drift.
        on_depth: Metric hook called with ``(mailbox, live messages)`` after every send
            into and ack in a mailbox, and after a pull that dropped messages (expired,
            dead-lettered, duplicates): one ``transport.size`` each, so only paid when set.
            The depth is the transport's: with Redis mailboxes it counts what every
            replica enqueued.
        refusals: Audits calls refused for their agent token, one record per source and
            interval with a count (default: its own, over ``audit``; the gRPC server shares
            the one of its token check, see :mod:`middleware.refusals`).

    Attributes:
        on_delivered: Callbacks ``(recipient, trigger_turn)`` run after each copy is
            enqueued (the runtime uses one to wake agents it hosts).
        on_quarantined: Coroutines run with each item moderation puts on the board (the
            human desk turns it into a ``quarantine`` escalation for the moderators).
        on_moderated: Coroutines run with ``(message_id, "released" | "deleted", by)`` after
            each decision on the board (the desk closes that escalation).
        moderation_exempt: Senders moderation never holds (the desk's escalation notices:
            the same notice to many moderators is no spam).
    """

    def __init__(
        self,
        transport: MailboxTransport | None = None,
        *,
        identity: IdentityRegistry | None = None,
        audit: AuditLog | None = None,
        acl: TopicACL | None = None,
        rate_limiter: RateLimiter | None = None,
        limits: RateLimits | None = None,
        flows: Flows | None = None,
        flows_exempt: Sequence[str] = (),
        subscriptions: SubscriptionStore | None = None,
        directory: Directory | None = None,
        registration: RegistrationMode = "closed",
        registration_quota: RegistrationQuota | None = None,
        moderation: Sequence[ModerationRule] = (),
        board: QuarantineBoard | None = None,
        reports_to_quarantine: int = 0,
        config: PostOfficeConfig | None = None,
        clock: Clock = system_clock,
        on_drift: Callable[[str, str], None] | None = None,
        on_depth: Callable[[str, int], None] | None = None,
        refusals: RefusalAggregator | None = None,
    ) -> None:
        self.clock = clock
        self.transport: MailboxTransport = transport or MemoryMailbox(clock=clock)
        self.identity = identity or IdentityRegistry()
        self.audit: AuditLog = audit or MemoryAuditLog()
        self.acl = acl or TopicACL()
        self.rate_limiter = rate_limiter
        self.limits = limits
        self.flows = flows
        self.flows_exempt = set(flows_exempt)
        self.config = config or PostOfficeConfig()
        self.on_drift = on_drift
        self.on_depth = on_depth
        self.drift: Counter[str] = Counter()  #: topic -> messages published with no subscriber
        self.subscriptions: SubscriptionStore = subscriptions or MemorySubscriptions()
        self.directory: Directory = directory or MemoryDirectory()
        self.registration: RegistrationMode = registration
        self.registration_quota = registration_quota or RegistrationQuota()
        self._registration_rate = RegistrationRate(self.registration_quota, clock=clock)
        self._registered: dict[str, AgentRecord] = {}  # agents known here from the directory
        self._seen: dict[str, float] = {}  # agent -> last seen (written to the directory each second)
        self.moderation = list(moderation)
        self.board: QuarantineBoard = board or MemoryBoard()
        self.reports_to_quarantine = reports_to_quarantine
        self.on_delivered: list[Callable[[str, bool], None]] = []
        self.on_quarantined: list[Callable[[Quarantined], Awaitable[None]]] = []
        self.on_moderated: list[Callable[[str, str, str], Awaitable[None]]] = []
        self.moderation_exempt: set[str] = set()
        self.refusals: RefusalAggregator = refusals or RefusalAggregator(
            lambda record: self.audit.append(record), node=socket.gethostname()
        )
        #: The tenant of each agent enrolled from the definition (registered ones: their record).
        self.agent_tenants: dict[str, str] = {}

    # ------------------------------------------------------------------ identity
    async def register(self, name: str, public_key: str | bytes, *, description: str = "") -> str:
        """Register an agent and return its token (shown this once; only its hash is kept)."""
        registration = self.identity.register(name, public_key, description=description)
        await self._audit(AuditEventType.AGENT_REGISTERED, "registered", name, {"description": description})
        return registration.token

    async def enroll(
        self,
        name: str,
        public_key: str | bytes,
        token_sha256: str,
        *,
        description: str = "",
        tenant: str = "",
    ) -> None:
        """Register an agent whose token was issued out of band (only its SHA-256 is given),
        as the agency definition file does; audited as ``agent.registered`` / ``enrolled``.
        ``tenant``: the agent reaches (and is found by) that tenant's agents only."""
        self.identity.enroll(name, public_key, token_sha256, description=description)
        if tenant:
            self.agent_tenants[name] = tenant
        await self._audit(AuditEventType.AGENT_REGISTERED, "enrolled", name, {"description": description})

    async def authenticate(self, token: str | None, *, operation: str = "messaging") -> str:
        """The agent a token belongs to: enrolled here, or registered through any replica.

        An agent from the directory is checked against it on every call, so a deregistration
        through another replica takes effect at once. Marks the agent as seen. A refusal is
        audited through :attr:`refusals` (one record per source and interval, with a count:
        a flood of bad tokens cannot flood the log).

        Args:
            token: The agent's token.
            operation: What was asked, for the audit record when the transport did not name
                the call (see :func:`middleware.refusals.calling_from`).

        Raises:
            Unauthenticated: no token, an unknown or revoked one, or an agent awaiting approval.
        """
        try:
            return await self._authenticate(token)
        except Unauthenticated as exc:
            source, op = current_call(operation)
            await self.refusals.refused(source, op, exc)
            raise

    async def _authenticate(self, token: str | None) -> str:
        if not token:
            raise Unauthenticated("no agent token presented")
        digest = hashlib.sha256(token.encode()).hexdigest()
        name = self.identity.name_for(digest)
        if name is None or name in self._registered:
            record = await self.directory.by_token(digest)
            if record is None:
                if name is not None:  # deregistered through another replica
                    self._forget(name)
                raise Unauthenticated("unknown or revoked agent token")
            if record.status != "active":
                raise Unauthenticated(f"agent {record.name!r} is registered but awaits an admin's approval")
            self._know(record)
            name = record.name
        await self._touch(name)
        return name

    async def _touch(self, name: str) -> None:
        now = self.clock()
        if now - self._seen.get(name, -1e18) >= 1.0:  # one directory write per agent and second
            self._seen[name] = now
            await self.directory.touch(name, now)

    def _know(self, record: AgentRecord) -> None:
        known = self._registered.get(record.name)
        if (
            known is None
            or known.token_sha256 != record.token_sha256
            or known.public_key != record.public_key
        ):
            self.identity.load(
                record.name, record.public_key, record.token_sha256, description=record.description
            )
        self._registered[record.name] = record

    def _forget(self, name: str) -> None:
        self._registered.pop(name, None)
        self.identity.remove(name)

    async def knows(self, name: str) -> bool:
        """Whether ``name`` is an agent (enrolled here, or active in the directory); loads its key."""
        if name in self.identity and name not in self._registered:
            return True
        record = await self.directory.get(name)
        if record is None or record.status != "active":
            if name in self._registered:
                self._forget(name)
            return False
        self._know(record)
        return True

    async def agent_names(self) -> list[str]:
        """Every agent: enrolled here, and active in the directory."""
        names = {n for n in self.identity.names() if n not in self._registered}
        names.update(r.name for r in await self.directory.all() if r.status == "active")
        return sorted(names)

    def _check_declared(self, sender: str, topic: str) -> None:
        record = self._registered.get(sender)
        if (
            record is not None
            and record.publishes
            and not any(fnmatch.fnmatchcase(topic, pattern) for pattern in record.publishes)
        ):
            raise PermissionDenied(
                f"agent {sender!r} declared it publishes to {', '.join(record.publishes)}, not {topic!r}"
            )

    # ------------------------------------------------------------------ registration
    async def register_agent(
        self,
        name: str,
        public_key: str,
        *,
        description: str = "",
        publishes: Sequence[str] = (),
        subscribes: Sequence[str] = (),
        caller: Principal | None = None,
    ) -> tuple[AgentRecord, str]:
        """Register an agent (``MessageService.Register``): returns its record and its token,
        shown this once (only the SHA-256 is kept). Its topics are declared now: it may only
        publish to ``publishes`` (patterns) when it names any, and is subscribed to ``subscribes``.

        Raises:
            FailedPrecondition: registration is closed. PermissionDenied: ``admin`` mode and the
                caller is not an admin, or a topic the ACLs refuse. InvalidInput: a bad name,
                key, description or topic. AlreadyExists: the name is taken.
        """
        who = caller.name if caller is not None else ""
        detail: dict[str, Any] = {"mode": self.registration, "registered_by": who}
        try:
            if self.registration == "closed":
                raise FailedPrecondition(
                    "registration is closed: agents are enrolled in the definition file "
                    "(messaging.registration.mode: open | admin | approval opens it)"
                )
            if self.registration == "admin" and (caller is None or caller.role is not Role.ADMIN):
                raise PermissionDenied(
                    "registration needs the gateway's admin role (messaging.registration.mode: admin)"
                )
            problems = []
            if not AGENT_NAME_PATTERN.match(name or ""):
                problems.append(Problem("name", "1-128 characters: letters, digits and _ . : - (not first)"))
            try:
                parse_public_key(public_key)
            except InvalidInput as exc:
                problems += exc.problems
            if len(description) > 2000:
                problems.append(Problem("description", "at most 2000 characters"))
            for field_name, topics in (("publishes", publishes), ("subscribes", subscribes)):
                for i, topic in enumerate(topics):
                    pattern = topic.replace("*", "x")  # publishes may be patterns: billing.*
                    if not TOPIC_PATTERN.match(pattern if field_name == "publishes" else topic):
                        problems.append(
                            Problem(f"{field_name}[{i}]", f"{topic!r} is not a domain.action topic")
                        )
            if problems:
                raise InvalidInput(problems, what="registration")
            if name in self.identity and name not in self._registered:
                raise AlreadyExists(f"agent {name!r} is already enrolled (definition file)")
            # no reserved prefix, no look-alike of an enrolled agent or a person's mailbox (the
            # registered ones are checked by the directory, atomically)
            check_new_name(name, (n for n in self.identity.names() if n not in self._registered))
            for topic in subscribes:
                self.acl.check_subscribe(name, topic)
            admin = caller is not None and caller.role is Role.ADMIN
            if not admin:  # per client, or per source address without tokens
                self._registration_rate.take(who or f"source {current_call('messaging.register')[0]}")
            token = "agt_" + secrets.token_urlsafe(32)
            record = AgentRecord(
                name=name,
                description=description,
                public_key=public_key,
                token_sha256=hashlib.sha256(token.encode()).hexdigest(),
                publishes=list(publishes),
                subscribes=list(subscribes),
                status="pending" if self.registration == "approval" else "active",
                registered_at=self.clock(),
                registered_by=who,
                name_keys=list(name_keys(name)),
                tenant=caller.tenant if caller is not None else "",
            )
            quota = 0 if admin else self.registration_quota.max_per_client
            taken = await self.directory.add(record, max_per_client=quota)
            if taken is not None and taken.why == "look_alike":
                raise AlreadyExists(
                    f"agent name {name!r} is taken: it looks like {taken.other!r} (names are compared "
                    "case-folded and by their Unicode confusable skeleton, UTS #39)",
                    details={"name": name, "looks_like": taken.other},
                )
            if taken is not None and taken.why == "quota":
                raise ResourceExhausted(
                    f"client {who!r} already registered {quota} agents, the most allowed "
                    "(messaging.registration.max_per_client): deregister one first",
                    details={"client": who, "limit": quota},
                )
            if taken is not None:
                raise AlreadyExists(f"agent {name!r} is already registered")
        except AgencyError as exc:
            await self._audit(AuditEventType.AGENT_REGISTERED, "refused", name[:128], detail, exc)
            raise
        for topic in subscribes:
            await self.subscriptions.add(topic, name)
        await self._audit(
            AuditEventType.AGENT_REGISTERED,
            record.status if record.status == "pending" else "registered",
            name,
            {
                **detail,
                "description": description,
                "publishes": record.publishes,
                "subscribes": record.subscribes,
            },
        )
        return record, token

    async def approve_agent(self, name: str, *, caller: Principal | None = None) -> AgentRecord:
        """Let a pending agent in (an admin's decision).

        Raises:
            PermissionDenied: the caller is not an admin. NotFound: no such registration.
        """
        if caller is None or caller.role is not Role.ADMIN:
            raise PermissionDenied("approving a registration needs the gateway's admin role")
        record = await self.directory.get(name)
        if record is None:
            raise NotFound(f"no registered agent {name!r}")
        if record.status != "active":
            record = record.model_copy(update={"status": "active"})
            await self.directory.put(record)
            await self._audit(AuditEventType.AGENT_REGISTERED, "approved", name, {"approved_by": caller.name})
        return record

    async def deregister_agent(
        self, name: str, *, token: str | None = None, caller: Principal | None = None
    ) -> bool:
        """Remove a registered agent: its token stops working on every replica, its topic
        subscriptions go. The agent itself (its token) or an admin may do it.

        Raises:
            Unauthenticated / PermissionDenied: neither the agent nor an admin.
            FailedPrecondition: the agent is enrolled by the definition file.
        """
        admin = caller is not None and caller.role is Role.ADMIN
        if not admin:
            me = await self.authenticate(token, operation="messaging.deregister")
            name = name or me
            if name != me:
                raise PermissionDenied(f"agent {me!r} may deregister itself only, not {name!r}")
        if name in self.identity and name not in self._registered:
            raise FailedPrecondition(f"agent {name!r} is enrolled by the definition file: remove it there")
        record = await self.directory.remove(name)
        self._forget(name)
        if record is None:
            return False
        for topic, members in (await self.subscriptions.all()).items():
            if name in members:
                await self.subscriptions.remove(topic, name)
        await self._audit(
            AuditEventType.AGENT_REGISTERED,
            "deregistered",
            name,
            {"by": caller.name if caller is not None else name},
        )
        return True

    def tenant_of(self, agent: str) -> str:
        """The tenant of ``agent`` (empty: none)."""
        record = self._registered.get(agent)
        return record.tenant if record is not None else self.agent_tenants.get(agent, "")

    async def _tenant(self, agent: str) -> str:
        """The tenant of ``agent``, asking the shared directory for one registered elsewhere."""
        if agent in self._registered or agent in self.identity:
            return self.tenant_of(agent)
        record = await self.directory.get(agent)
        return record.tenant if record is not None else ""

    async def _same_tenant(self, sender: str, agents: Iterable[str]) -> list[str]:
        tenant = await self._tenant(sender)
        return [a for a in agents if await self._tenant(a) == tenant]

    async def _check_tenant(self, sender: str, receiver: str) -> None:
        if not await self._same_tenant(sender, [receiver]):  # another tenant's agent: as unknown as none
            raise NotFound(f"no registered agent {receiver!r} to deliver to")

    async def find_agents(
        self,
        capability: str = "",
        *,
        topic: str = "",
        include_pending: bool = False,
        tenant: str | None = None,
    ) -> list[tuple[AgentRecord, float | None]]:
        """Agents whose name and description contain every word of ``capability``
        (case-insensitive) and, with ``topic``, that publish or subscribe to it; with when each
        was last seen (None: never). Agents of the definition file are included. ``tenant``:
        only that tenant's agents (None: every tenant's)."""
        records = {r.name: r for r in await self.directory.all() if include_pending or r.status == "active"}
        for name in self.identity.names():
            if name not in records and name not in self._registered:
                ident = self.identity.get(name)
                records[name] = AgentRecord(
                    name=name,
                    description=ident.description,
                    public_key="",
                    token_sha256=ident.token_hash,
                    registered_at=0.0,
                    registered_by="definition",
                    tenant=self.agent_tenants.get(name, ""),
                )
        subscribed = await self.subscriptions.all()
        words = capability.lower().split()
        found = []
        for record in records.values():
            if tenant is not None and record.tenant != tenant:
                continue
            text = f"{record.name} {record.description}".lower()
            if any(w not in text for w in words):
                continue
            if topic:
                topics = set(record.publishes) | {t for t, m in subscribed.items() if record.name in m}
                if not any(fnmatch.fnmatchcase(topic, t) for t in topics):
                    continue
            found.append(record)
        seen = await self.directory.last_seen([r.name for r in found])
        return [(r, seen.get(r.name)) for r in sorted(found, key=lambda r: r.name)]

    # ------------------------------------------------------------------ topics
    async def subscribe(self, token: str | None, topic: str) -> None:
        """Subscribe the token's agent to ``topic`` (ACL-checked, audited)."""
        agent = await self.authenticate(token, operation="messaging.subscribe")
        check_topic(topic)
        try:
            self.acl.check_subscribe(agent, topic)
        except PermissionDenied as exc:
            await self._audit(AuditEventType.TOPIC_SUBSCRIBED, "refused", agent, {"topic": topic}, exc)
            raise
        await self.subscriptions.add(topic, agent)
        await self._audit(AuditEventType.TOPIC_SUBSCRIBED, "subscribed", agent, {"topic": topic})

    async def unsubscribe(self, token: str | None, topic: str) -> None:
        agent = await self.authenticate(token, operation="messaging.unsubscribe")
        await self.subscriptions.remove(topic, agent)
        await self._audit(AuditEventType.TOPIC_SUBSCRIBED, "unsubscribed", agent, {"topic": topic})

    async def subscribers(self, topic: str) -> list[str]:
        """The agents subscribed to ``topic`` (on every replica, with a shared store)."""
        return sorted(await self.subscriptions.members(topic))

    async def orphan_topics(self, published: Sequence[str] | None = None) -> list[str]:
        """Topics published to (``published``; default: every topic that drifted here) that
        have no subscriber now, in the shared view: what an orphan-topic check alerts on."""
        topics = self.drift.keys() if published is None else published
        current = await self.subscriptions.all()
        return sorted(t for t in topics if not current.get(t))

    # ------------------------------------------------------------------ sending
    async def send(
        self,
        token: str | None,
        message: SMFMessage | Mapping[str, Any] | str,
        *,
        signature: str = "",
        ttl: float | None = None,
        trigger_turn: bool = False,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        correlation_id: str = "",
    ) -> SendResult:
        """Send ``message`` to the mailbox of ``message.receiver``.

        ``content_type`` (the MIME type of the content) and ``correlation_id`` (the
        conversation it belongs to) travel with it and are signed with the rest.

        Raises:
            Unauthenticated: bad token. InvalidInput: bad message, TTL or oversized payload.
            PermissionDenied: impersonation, bad signature, or no communication flow.
            NotFound: unknown receiver. ResourceExhausted: rate limit or full mailbox.
        """
        options = SendOptions(
            ttl=ttl,
            trigger_turn=trigger_turn,
            params=dict(params or {}),
            content_type=content_type,
            correlation_id=correlation_id,
        )

        async def route(sender: str, msg: SMFMessage) -> None:
            if not await self.knows(msg.receiver):
                raise NotFound(f"no registered agent {msg.receiver!r} to deliver to")
            if sender not in self.flows_exempt:
                await self._check_tenant(sender, msg.receiver)
            if self.flows is not None and sender not in self.flows_exempt:
                self.flows.check(sender, msg.receiver)

        sender, msg = await self._admit(token, message, signature, options, route)
        return await self._deliver(sender, msg, signature, options, [msg.receiver])

    async def publish(
        self,
        token: str | None,
        topic: str,
        message: SMFMessage | Mapping[str, Any] | str,
        *,
        signature: str = "",
        ttl: float | None = None,
        trigger_turn: bool = False,
        content_type: str = "application/json",
        correlation_id: str = "",
    ) -> SendResult:
        """Publish to ``topic`` (``message.receiver`` must be the topic): a copy per subscriber.

        With no subscriber nothing is delivered and the drift is reported (audit event,
        ``drift`` counter, ``on_drift`` hook); the result then has zero copies.
        """
        check_topic(topic)
        options = SendOptions(
            kind="topic",
            topic=topic,
            ttl=ttl,
            trigger_turn=trigger_turn,
            content_type=content_type,
            correlation_id=correlation_id,
        )

        async def route(sender: str, msg: SMFMessage) -> None:
            if msg.receiver != topic:
                raise InvalidInput.single(
                    "receiver", f"a message published to {topic!r} must name it as receiver"
                )
            self.acl.check_publish(sender, topic)
            self._check_declared(sender, topic)

        sender, msg = await self._admit(token, message, signature, options, route)
        # a topic reaches the subscribers of the sender's tenant only
        recipients = sorted(
            await self._same_tenant(sender, await self.subscriptions.members(topic) - {sender})
        )
        if not recipients:
            self.drift[topic] += 1
            if self.on_drift is not None:
                self.on_drift(topic, sender)
            await self._audit(
                AuditEventType.TOPIC_DRIFT,
                "no_subscriber",
                sender,
                {"topic": topic, "message_id": msg.message_id, "published": self.drift[topic]},
                trace_id=msg.trace_id,
                rule="topic subscribers",
            )
        return await self._deliver(sender, msg, signature, options, recipients)

    async def broadcast(
        self,
        token: str | None,
        message: SMFMessage | Mapping[str, Any] | str,
        *,
        signature: str = "",
        ttl: float | None = None,
        content_type: str = "application/json",
        correlation_id: str = "",
    ) -> SendResult:
        """A copy to every registered agent except the sender (``message.receiver`` = ``"*"``)."""
        options = SendOptions(
            kind="broadcast", ttl=ttl, content_type=content_type, correlation_id=correlation_id
        )

        async def route(sender: str, msg: SMFMessage) -> None:
            if msg.receiver != BROADCAST:
                raise InvalidInput.single("receiver", f"a broadcast names {BROADCAST!r} as receiver")
            self.acl.check_publish(sender, BROADCAST_TOPIC)

        sender, msg = await self._admit(token, message, signature, options, route)
        recipients = await self._same_tenant(sender, [a for a in await self.agent_names() if a != sender])
        return await self._deliver(sender, msg, signature, options, recipients)

    async def _admit(
        self,
        token: str | None,
        message: SMFMessage | Mapping[str, Any] | str,
        signature: str,
        options: SendOptions,
        route: Callable[[str, SMFMessage], Awaitable[None]],
    ) -> tuple[str, SMFMessage]:
        """Authenticate, validate, check freshness and size, ``route`` (may this sender reach
        that receiver: flows, ACLs), charge the rate limits, verify the signature; audit any
        refusal. What is refused before the rate limits costs no token."""
        kind = options.kind
        try:
            sender = await self.authenticate(token, operation=f"messaging.{kind}")
        except Unauthenticated:  # audited per source and interval by authenticate
            raise
        except AgencyError as exc:  # the backend failed
            await self._audit(AuditEventType.MESSAGE_REJECTED, "refused", "", {"kind": kind}, exc)
            raise
        try:
            msg = SMFMessage.parse(message, what="SMF message")
        except InvalidInput as exc:
            await self._audit(AuditEventType.MESSAGE_REJECTED, "refused", sender, {"kind": kind}, exc)
            raise
        try:
            if msg.sender != sender:
                raise PermissionDenied(
                    f"agent {sender!r} cannot send as {msg.sender!r}: the sender must be the token's agent"
                )
            missing_ttl = freshness_problem(msg.metadata)  # a time-critical domain needs a TTL
            if missing_ttl:
                raise InvalidInput.single("metadata.freshness_ttl", missing_ttl, what="SMF message")
            self._check_fresh(msg)
            self._ttl(options.ttl)
            bad = options.problems()
            if bad:
                raise InvalidInput([Problem(f, r) for f, r in bad], what="send request")
            self._check_size(msg)
            await route(sender, msg)
            if self.rate_limiter is not None:
                self.rate_limiter.acquire(sender)
            if self.limits is not None:
                await self.limits.charge(
                    sender=sender,
                    recipients=[msg.receiver] if kind == "direct" else (),
                    topic=options.topic or (BROADCAST_TOPIC if kind == "broadcast" else ""),
                )
        except AgencyError as exc:
            await self._reject(sender, msg, exc, kind, options.topic)
            raise
        if (signature or self.config.require_signatures) and not self.identity.verify(
            msg, signature, options
        ):
            forged = PermissionDenied(
                f"the signature of message {msg.message_id!r} does not verify "
                f"with {sender!r}'s registered key",
                details={"cause": "BAD_SIGNATURE", "message_id": msg.message_id},
            )
            await self._audit(
                AuditEventType.MESSAGE_FORGED,
                "refused",
                sender,
                {"message_id": msg.message_id, "receiver": msg.receiver, "kind": kind, "stage": "send"},
                forged,
                trace_id=msg.trace_id,
            )
            raise forged
        return sender, msg

    def _check_fresh(self, msg: SMFMessage) -> None:
        """Refuse a message from the future (beyond the clock skew), or whose content is stale.

        Raises:
            InvalidInput: on ``metadata.freshness_ttl`` (not a finite number in
                (0, max_freshness_ttl]) or ``created_at`` (in the future, or stale);
                ``details["cause"]`` is ``BAD_FRESHNESS``, ``FROM_THE_FUTURE`` or ``STALE``.
        """
        ttl = msg.metadata.freshness_ttl  # None: no TTL (allowed outside time-critical domains)
        limit = self.config.max_freshness_ttl
        if ttl is not None and not (math.isfinite(ttl) and 0 < ttl <= limit):
            raise InvalidInput(
                [Problem("metadata.freshness_ttl", f"must be > 0 and <= {limit:g} seconds, got {ttl!r}")],
                what="SMF message",
                details={"cause": "BAD_FRESHNESS"},
            )
        now = self.clock()
        skew = self.config.max_clock_skew
        ahead = msg.created_at.timestamp() - now
        if ahead > skew:
            raise InvalidInput(
                [
                    Problem(
                        "created_at",
                        f"{msg.created_at.isoformat()} is {ahead:.0f} s in the future, more than the "
                        f"allowed clock skew of {skew:g} s",
                    )
                ],
                what="SMF message",
                details={"cause": "FROM_THE_FUTURE"},
            )
        if msg.is_stale(datetime.fromtimestamp(now - skew, UTC)):
            raise InvalidInput(
                [
                    Problem(
                        "created_at",
                        f"the message is stale: created {msg.created_at.isoformat()}, fresh for "
                        f"{ttl or 0:g} s, now {datetime.fromtimestamp(now, UTC).isoformat()}",
                    )
                ],
                what="SMF message",
                details={"cause": "STALE"},
            )

    def _expiry(self, msg: SMFMessage, ttl: float | None) -> float:
        """When a message is dropped: its TTL after ``created_at``, or when its content goes
        stale (with the clock skew's tolerance), whichever comes first. Computed from what the
        sender signed and this post office's settings, never read from the transport."""
        created = msg.created_at.timestamp()
        lifetime = self.config.default_ttl if ttl is None else ttl
        fresh = msg.metadata.freshness_ttl
        stale_at = (
            created + fresh + self.config.max_clock_skew
            if fresh is not None and math.isfinite(fresh)
            else math.inf
        )
        return min(created + lifetime, stale_at)

    def _check_size(self, msg: SMFMessage) -> None:
        size = len(canonical_json(msg.content))
        limit = self.config.max_payload_bytes
        if size > limit:
            raise InvalidInput.single(
                "content",
                f"payload is {size} bytes, over the {limit}-byte limit: store it elsewhere (object store, "
                'file service) and send a reference instead, e.g. {"url": "https://...", "sha256": "<hex>"}',
                what="SMF message",
            )

    def _ttl(self, ttl: float | None) -> float:
        value = self.config.default_ttl if ttl is None else ttl
        if not 0 < value <= self.config.max_ttl:
            raise InvalidInput.single(
                "ttl", f"must be > 0 and <= {self.config.max_ttl:g} seconds, got {value:g}"
            )
        return value

    async def _deliver(
        self,
        sender: str,
        msg: SMFMessage,
        signature: str,
        options: SendOptions,
        recipients: Sequence[str],
    ) -> SendResult:
        kind, topic, trigger_turn = options.kind, options.topic, options.trigger_turn
        try:
            envelope = Envelope(
                message=msg,
                signature=signature,
                kind=kind,
                topic=topic,
                expires_at=self._expiry(msg, self._ttl(options.ttl)),
                trigger_turn=trigger_turn,
                params=dict(options.params),
                ttl=options.ttl,
                content_type=options.content_type,
                correlation_id=options.correlation_id,
                message_hash=hashlib.sha256(signing_bytes(msg, options)).hexdigest(),
            )
            data = envelope.model_dump_json().encode()
            held = self._moderate(sender, msg)
            if held is not None:
                rule, reason, evidence = held
                return await self._quarantine(sender, msg, envelope, list(recipients), rule, reason, evidence)
            # one live copy per sender and message id in a mailbox: a re-sent message that is
            # still there keeps its delivery count (a retry cannot keep it from the dead letters)
            key, life = f"{sender}/{msg.message_id}", max(1.0, envelope.expires_at - self.clock())
            if kind == "direct":
                await self.transport.enqueue(
                    recipients[0], data, max_len=self.config.mailbox_max, key=key, ttl=life
                )
        except AgencyError as exc:
            await self._reject(sender, msg, exc, kind, topic)
            raise
        delivered = list(recipients)
        if kind != "direct":
            # One full subscriber mailbox must not cost every other subscriber its copy.
            delivered = []
            for recipient in recipients:
                try:
                    await self.transport.enqueue(
                        recipient, data, max_len=self.config.mailbox_max, key=key, ttl=life
                    )
                except ResourceExhausted as exc:
                    await self._audit(
                        AuditEventType.MESSAGE_REJECTED,
                        "refused",
                        sender,
                        {"message_id": msg.message_id, "kind": kind, "topic": topic, "recipient": recipient},
                        exc,
                        trace_id=msg.trace_id,
                    )
                    continue
                delivered.append(recipient)
        await self._audit(
            AuditEventType.MESSAGE_ACCEPTED,
            "accepted",
            sender,
            {
                "message_id": msg.message_id,
                "kind": kind,
                "receiver": msg.receiver,
                "topic": topic,
                "recipients": delivered,
                "trigger_turn": trigger_turn,
                "expires_at": envelope.expires_at,
                "message_hash": envelope.message_hash,
                "content_type": envelope.content_type,
                "correlation_id": envelope.correlation_id,
            },
            trace_id=msg.trace_id,
        )
        for callback in self.on_delivered:
            for recipient in delivered:
                callback(recipient, trigger_turn)
        await self._report_depth(delivered)
        link = self.config.trace_link.format(trace_id=msg.trace_id, message_id=msg.message_id)
        return SendResult(msg.message_id, tuple(delivered), envelope.message_hash, link)

    def _moderate(self, sender: str, msg: SMFMessage) -> tuple[str, str, dict[str, Any]] | None:
        """``(rule, reason, evidence)`` of the first moderation rule that holds the message,
        or None. A rule with an ``evidence(sender, message)`` method says what matched."""
        if sender in self.moderation_exempt:
            return None
        now = self.clock()
        for rule in self.moderation:
            reason = rule.check(sender, msg, now)
            if reason:
                explain = getattr(rule, "evidence", None)
                evidence = explain(sender, msg) if callable(explain) else {}
                return rule.name, reason, dict(evidence)
        return None

    async def _quarantine(
        self,
        sender: str,
        msg: SMFMessage,
        envelope: Envelope,
        recipients: list[str],
        rule: str,
        reason: str,
        evidence: dict[str, Any],
    ) -> SendResult:
        item = Quarantined(
            message_id=msg.message_id,
            sender=sender,
            reason=reason,
            rule=rule,
            at=self.clock(),
            recipients=recipients,
            envelope=envelope.model_dump_json(),
            evidence=evidence,
        )
        await self.board.hold(item)
        await self._audit(
            MESSAGE_QUARANTINED,
            "held",
            sender,
            {"message_id": msg.message_id, "reason": reason, "recipients": recipients, "stage": "send"},
            trace_id=msg.trace_id,
            rule=rule,
        )
        await self._held(item)
        link = self.config.trace_link.format(trace_id=msg.trace_id, message_id=msg.message_id)
        return SendResult(msg.message_id, (), envelope.message_hash, link, quarantined=reason)

    async def report(self, token: str | None, message_id: str, reason: str = "") -> tuple[int, bool]:
        """An agent reports a message it received (spam, abuse ...): audited; when
        ``reports_to_quarantine`` distinct agents have reported it, it is quarantined (copies
        not yet pulled are held back at pull). Returns (distinct reporters, quarantined).

        Raises:
            Unauthenticated: bad token. InvalidInput: no message id, or a reason over 1000 characters.
        """
        agent = await self.authenticate(token, operation="messaging.report")
        if not message_id or len(message_id) > 128:
            raise InvalidInput.single("message_id", "the id of the message reported (1-128 characters)")
        if len(reason) > 1000:
            raise InvalidInput.single("reason", "at most 1000 characters")
        count = await self.board.report(message_id, agent, reason)
        await self._audit(
            MESSAGE_REPORTED,
            "reported",
            agent,
            {"message_id": message_id, "reason": reason, "reporters": count},
        )
        threshold = self.reports_to_quarantine
        if not threshold or count < threshold or await self.board.get(message_id) is not None:
            return count, await self.board.get(message_id) is not None
        item = Quarantined(
            message_id=message_id,
            sender="",
            reason=f"reported by {count} agents",
            rule="reports",
            at=self.clock(),
            evidence={"reports": await self.board.reports(message_id)},
        )
        await self.board.hold(item)
        await self._audit(
            MESSAGE_QUARANTINED,
            "held",
            agent,
            {"message_id": message_id, "reason": f"reported by {count} agents", "stage": "report"},
            rule="reports",
        )
        await self._held(item)
        return count, True

    async def _held(self, item: Quarantined) -> None:
        """Tell ``on_quarantined`` (the human desk): a failure there never undoes the hold."""
        for hook in self.on_quarantined:
            try:
                await hook(item)
            except Exception:  # the item is on the board, listed by Quarantine for an admin
                log.exception("quarantine hook for message %s", item.message_id)

    async def _moderated(self, message_id: str, decision: str, by: str) -> None:
        for hook in self.on_moderated:
            try:
                await hook(message_id, decision, by)
            except Exception:
                log.exception("moderation hook for message %s", message_id)

    @staticmethod
    def _moderator(
        caller: Principal | None, what: str, person: str = "", roles: Sequence[HumanRole] = ()
    ) -> tuple[str, str]:
        """``(who, role)`` deciding on the board: a person (console) with the moderator role,
        or a gRPC caller with the admin role."""
        if person:
            if HumanRole.MODERATOR not in roles:
                have = ", ".join(r.value for r in roles) or "none"
                raise PermissionDenied(
                    f"{what} needs the moderator role ({person} has the roles {have})",
                    details={"person": person, "needed": [HumanRole.MODERATOR.value]},
                )
            return person, HumanRole.MODERATOR.value
        if caller is None or caller.role is not Role.ADMIN:
            raise PermissionDenied(
                f"{what} needs a person with the gateway's admin role "
                "(or the moderator role, in the operator console)"
            )
        return caller.name, Role.ADMIN.value

    async def quarantine(self, *, caller: Principal | None, limit: int = 100) -> list[Quarantined]:
        """The quarantine board, oldest first (a person with the admin role)."""
        self._moderator(caller, "reading the quarantine board")  # people read it in their inbox
        return await self.board.items(limit)

    async def release(
        self,
        message_id: str,
        *,
        caller: Principal | None = None,
        person: str = "",
        roles: Sequence[HumanRole] = (),
        note: str = "",
    ) -> list[str]:
        """Deliver a quarantined message to the recipients it was meant for; returns them.

        Decided by ``caller`` (gRPC, the admin role) or by ``person`` holding ``roles``
        (the operator console, the moderator role); ``note`` is their reason, audited.

        Raises:
            PermissionDenied: neither an admin nor a moderator. NotFound: not on the board
            (never held, or already released or deleted: the board takes an item once).
        """
        who, role = self._moderator(caller, "releasing a quarantined message", person, roles)
        item = await self.board.take(message_id)
        if item is None:
            raise NotFound(f"message {message_id!r} is not in quarantine")
        delivered = []
        if item.envelope:
            for recipient in item.recipients:
                try:
                    await self.transport.enqueue(
                        recipient, item.envelope.encode(), max_len=self.config.mailbox_max
                    )
                except ResourceExhausted:
                    continue
                delivered.append(recipient)
        await self._audit(
            MESSAGE_RELEASED,
            "released",
            item.sender,
            {
                "message_id": message_id,
                "by": who,
                "role": role,
                "note": note,
                "recipients": delivered,
                "reason": item.reason,
            },
            rule=item.rule,
        )
        await self._report_depth(delivered)
        await self._moderated(message_id, "released", who)
        return delivered

    async def delete_quarantined(
        self,
        message_id: str,
        *,
        caller: Principal | None = None,
        person: str = "",
        roles: Sequence[HumanRole] = (),
        note: str = "",
    ) -> None:
        """Drop a quarantined message for good (audited with who decided, role and reason).

        Raises:
            PermissionDenied: neither an admin nor a moderator. NotFound: not on the board.
        """
        who, role = self._moderator(caller, "deleting a quarantined message", person, roles)
        item = await self.board.take(message_id)
        if item is None:
            raise NotFound(f"message {message_id!r} is not in quarantine")
        await self._audit(
            MESSAGE_DELETED,
            "deleted",
            item.sender,
            {"message_id": message_id, "by": who, "role": role, "note": note, "reason": item.reason},
            rule=item.rule,
        )
        await self._moderated(message_id, "deleted", who)

    async def _reject(
        self, sender: str, msg: SMFMessage, exc: AgencyError, kind: Kind, topic: str = ""
    ) -> None:
        await self._audit(
            AuditEventType.MESSAGE_REJECTED,
            "refused",
            sender,
            {"message_id": msg.message_id, "receiver": msg.receiver, "kind": kind, "topic": topic},
            exc,
            trace_id=msg.trace_id,
        )

    # ------------------------------------------------------------------ receiving
    async def pull(
        self,
        token: str | None,
        *,
        max_messages: int = 10,
        wait: float = 0.0,
        consumer: str | None = None,
        message_type: MessageType = "",
    ) -> list[Received]:
        """Up to ``max_messages`` messages from the token's agent's mailbox.

        Args:
            wait: Seconds to wait for a message when the mailbox is empty.
            consumer: This consumer's name (several processes may serve one agent).
            message_type: ``private`` (direct messages) or ``public`` (topic and broadcast
                copies) only; messages of the other type stay in the mailbox, untouched.
        """
        agent = await self.authenticate(token, operation="messaging.pull")
        return await self.pull_as(
            agent, max_messages=max_messages, wait=wait, consumer=consumer, message_type=message_type
        )

    async def pull_as(
        self,
        agent: str,
        *,
        max_messages: int = 10,
        wait: float = 0.0,
        consumer: str | None = None,
        message_type: MessageType = "",
    ) -> list[Received]:
        """:meth:`pull` for ``agent`` without a token: for the gateway's own consumers (webhook
        delivery), never for a caller's request."""
        if not 1 <= max_messages <= 1000:
            raise InvalidInput.single("max_messages", "must be between 1 and 1000")
        _check_message_type(message_type)
        out: list[Received] = []
        kept_back: list[Delivery] = []
        try:
            for round_ in range(10):  # a filtered pull reads on past messages of the other type
                batch = await self.transport.receive(
                    agent,
                    consumer or agent,
                    count=max_messages - len(out),
                    visibility_timeout=self.config.visibility_timeout,
                    block=wait if round_ == 0 else 0.0,
                )
                out += await self._handle(agent, batch, message_type, kept_back)
                if not message_type or len(out) >= max_messages or not (batch.deliveries or batch.lost):
                    break
        finally:
            if kept_back:  # not taken: visible again at once, delivery counts as they were
                await self.transport.release(agent, kept_back)
        return out

    async def browse(
        self,
        token: str | None,
        *,
        max_messages: int = 10,
        cursor: str = "",
        message_type: MessageType = "",
    ) -> tuple[list[Received], str]:
        """Read the token's agent's mailbox without taking anything (``include_read``): every
        live message after ``cursor``, read (handed out, not yet acknowledged) or not, oldest
        first; ``delivery_count`` 0 means unread. Returns the messages and the cursor of the
        next page ("" at the end). Receipts may be acknowledged (that removes the message).
        Expired messages and messages that fail their checks are left out (``pull`` drops them).
        """
        agent = await self.authenticate(token, operation="messaging.browse")
        if not 1 <= max_messages <= 1000:
            raise InvalidInput.single("max_messages", "must be between 1 and 1000")
        _check_message_type(message_type)
        if len(cursor) > 64:
            raise InvalidInput.single("cursor", "not a cursor from a previous page")
        now = self.clock()
        out: list[Received] = []
        last = cursor
        while len(out) < max_messages:
            page = await self.transport.browse(agent, after=last, count=max_messages - len(out))
            if not page:
                return out, ""
            for delivery in page:
                last = delivery.entry_id
                try:
                    envelope = Envelope.model_validate_json(delivery.data)
                except ValidationError:
                    continue
                msg = envelope.message
                if (
                    not _of_type(envelope, message_type)
                    or self._expiry(msg, envelope.ttl) <= now
                    or msg.receiver != _addressee(envelope)
                    or (envelope.kind == "direct" and msg.receiver != agent)
                ):
                    continue
                await self.knows(msg.sender)
                if (envelope.signature or self.config.require_signatures) and not self.identity.verify(
                    msg, envelope.signature, envelope.options()
                ):
                    continue
                out.append(_received(delivery, envelope, self._expiry(msg, envelope.ttl)))
        more = await self.transport.browse(agent, after=last, count=1)
        return out, last if more else ""

    async def _handle(
        self, agent: str, batch: Batch, message_type: MessageType, kept_back: list[Delivery]
    ) -> list[Received]:
        for entry_id in batch.lost:
            await self._audit(
                AuditEventType.MESSAGE_LOST,
                "trimmed",
                agent,
                {
                    "mailbox": agent,
                    "entry": entry_id,
                    "why": "trimmed away while pending (never acknowledged)",
                },
            )
        now = self.clock()
        candidates: list[tuple[Delivery, Envelope]] = []
        for delivery in batch.deliveries:
            envelope = await self._open(agent, delivery)
            if envelope is None:
                continue
            msg = envelope.message
            expires_at = self._expiry(msg, envelope.ttl)
            if expires_at <= now:
                await self.transport.ack(agent, [delivery.entry_id])
                await self._audit(
                    AuditEventType.MESSAGE_EXPIRED,
                    "expired",
                    agent,
                    {"message_id": msg.message_id, "sender": msg.sender, "expired_at": expires_at},
                    trace_id=msg.trace_id,
                )
                continue
            if not _of_type(envelope, message_type):
                kept_back.append(delivery)
                continue
            if delivery.delivery_count > self.config.max_deliveries:
                reason = f"not acknowledged after {delivery.delivery_count - 1} deliveries"
                await self._dead_letter(agent, delivery, reason, msg)
                continue
            candidates.append((delivery, envelope))
        seen = (
            await self.transport.seen(agent, [e.message.message_id for _, e in candidates])
            if candidates
            else set()
        )
        held = (
            await self.board.is_held([e.message.message_id for _, e in candidates])
            if candidates and self.reports_to_quarantine
            else set()
        )
        out: list[Received] = []
        for delivery, envelope in candidates:
            msg = envelope.message
            if msg.message_id in held:  # quarantined by reports: keep this copy on the board
                await self._hold_copy(agent, delivery, envelope)
                continue
            if msg.message_id in seen:
                await self.transport.ack(agent, [delivery.entry_id])
                await self._audit(
                    AuditEventType.MESSAGE_DUPLICATE,
                    "skipped",
                    agent,
                    {"message_id": msg.message_id, "delivery_count": delivery.delivery_count},
                    trace_id=msg.trace_id,
                )
                continue
            addressed_to = _addressee(envelope)
            if msg.receiver != addressed_to or (envelope.kind == "direct" and msg.receiver != agent):
                await self._audit(
                    AuditEventType.MESSAGE_FORGED,
                    "refused",
                    agent,
                    {
                        "message_id": msg.message_id,
                        "claimed_sender": msg.sender,
                        "receiver": msg.receiver,
                        "mailbox": agent,
                        "stage": "receive",
                        "cause": "MISADDRESSED",
                    },
                    trace_id=msg.trace_id,
                )
                await self._dead_letter(
                    agent, delivery, f"addressed to {msg.receiver!r}, found in {agent!r}'s mailbox", msg
                )
                continue
            await self.knows(msg.sender)  # its key, when it registered through another replica
            if (envelope.signature or self.config.require_signatures) and not self.identity.verify(
                msg, envelope.signature, envelope.options()
            ):
                await self._audit(
                    AuditEventType.MESSAGE_FORGED,
                    "refused",
                    agent,
                    {"message_id": msg.message_id, "claimed_sender": msg.sender, "stage": "receive"},
                    trace_id=msg.trace_id,
                )
                await self._dead_letter(agent, delivery, "signature does not verify", msg)
                continue
            out.append(_received(delivery, envelope, self._expiry(msg, envelope.ttl)))
        if batch.lost or len(out) < len(batch.deliveries):  # some were dropped (expired, dead, dupes)
            await self._report_depth([agent])
        return out

    async def stream(
        self,
        token: str | None,
        *,
        batch: int = 10,
        consumer: str | None = None,
        poll: float = 1.0,
        max_backoff: float = 5.0,
    ) -> AsyncIterator[Received]:
        """The token's agent's mailbox as an endless stream (what ``Subscribe`` serves).

        A backend error (Redis down, a connection reset: the transport's
        ``transient_errors``, or :class:`~middleware.errors.Unavailable`) does not end the
        stream: it is logged once per outage (and counted by the transport's
        ``on_redis_error`` hook), and pulling resumes with exponential backoff and jitter
        (50 ms doubling up to ``max_backoff``) until the backend is back.

        Raises:
            Unauthenticated: at once, for a bad token (not on the first pull).
        """
        agent = await self.authenticate(token, operation="messaging.stream")
        transient: tuple[type[BaseException], ...] = (
            Unavailable,
            *getattr(self.transport, "transient_errors", ()),
        )
        delay = 0.0
        failing_since: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                got = await self.pull(token, max_messages=batch, wait=poll, consumer=consumer)
            except transient as exc:
                if failing_since is None:
                    failing_since = loop.time()
                    log.warning(
                        "mailbox %r: backend error, retrying with backoff until it is back: %s", agent, exc
                    )
                delay = min(max_backoff, max(0.05, delay * 2))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                continue
            if failing_since is not None:
                log.warning("mailbox %r: backend back after %.1f s", agent, loop.time() - failing_since)
                failing_since, delay = None, 0.0
            for received in got:
                yield received

    async def _hold_copy(self, agent: str, delivery: Delivery, envelope: Envelope) -> None:
        msg = envelope.message
        item = await self.board.get(msg.message_id)
        if item is not None:
            await self.board.hold(
                item.model_copy(
                    update={
                        "sender": item.sender or msg.sender,
                        "envelope": item.envelope or delivery.data.decode(),
                        "recipients": sorted({*item.recipients, agent}),
                    }
                )
            )
        await self.transport.ack(agent, [delivery.entry_id])
        await self._audit(
            MESSAGE_QUARANTINED,
            "held",
            msg.sender,
            {"message_id": msg.message_id, "recipient": agent, "stage": "pull"},
            trace_id=msg.trace_id,
            rule="reports",
        )

    async def _open(self, agent: str, delivery: Delivery) -> Envelope | None:
        try:
            return Envelope.model_validate_json(delivery.data)
        except ValidationError:
            await self._dead_letter(agent, delivery, "unreadable envelope", None)
            return None

    async def _dead_letter(self, agent: str, delivery: Delivery, reason: str, msg: SMFMessage | None) -> None:
        await self.transport.dead_letter(agent, delivery, reason)
        await self._audit(
            AuditEventType.MESSAGE_DEAD_LETTERED,
            "dead_lettered",
            agent,
            {
                "message_id": msg.message_id if msg else "",
                "reason": reason,
                "delivery_count": delivery.delivery_count,
            },
            trace_id=msg.trace_id if msg else "",
        )

    async def ack(self, token: str | None, receipts: Sequence[str]) -> int:
        """Acknowledge processed messages (by receipt); returns how many were still pending.

        Their ids are remembered (``processed_ttl``) so redelivered copies are skipped.
        """
        agent = await self.authenticate(token, operation="messaging.ack")
        return await self.ack_as(agent, receipts)

    async def ack_as(self, agent: str, receipts: Sequence[str]) -> int:
        """:meth:`ack` for ``agent`` without a token (the gateway's own consumers)."""
        entry_ids: list[str] = []
        message_ids: list[str] = []
        for i, receipt in enumerate(receipts):
            entry_id, sep, message_id = receipt.partition("|")
            if not sep or not entry_id or not message_id:
                raise InvalidInput.single(f"receipts[{i}]", f"{receipt!r} is not a receipt from pull")
            entry_ids.append(entry_id)
            message_ids.append(message_id)
        done = await self.transport.ack(
            agent, entry_ids, processed=message_ids, processed_ttl=self.config.processed_ttl
        )
        await self._audit(
            AuditEventType.MESSAGE_ACKED, "acked", agent, {"message_ids": message_ids, "pending": done}
        )
        await self._report_depth([agent])
        return done

    async def dead_letter_received(self, agent: str, received: Received, reason: str) -> None:
        """Move a message handed out by :meth:`pull_as` to ``agent``'s dead-letter list, with
        ``reason`` (audited ``message.dead_lettered``); used by the gateway's own consumers."""
        entry_id = received.receipt.partition("|")[0]
        envelope = Envelope(
            message=received.message,
            signature=received.signature,
            kind=received.kind,
            topic=received.topic,
            expires_at=received.expires_at,
            trigger_turn=received.trigger_turn,
            params=dict(received.params),
            ttl=received.ttl,
            content_type=received.content_type,
            correlation_id=received.correlation_id,
            message_hash=received.message_hash,
        )
        delivery = Delivery(entry_id, envelope.model_dump_json().encode(), received.delivery_count)
        await self._dead_letter(agent, delivery, reason, received.message)
        await self._report_depth([agent])

    async def dead_letters(self, token: str | None, *, limit: int = 100) -> list[DeadMessage]:
        """The token's agent's dead-letter list, oldest first."""
        agent = await self.authenticate(token, operation="messaging.dead_letters")
        out = []
        for dead in await self.transport.dead_letters(agent, limit=limit):
            try:
                msg: SMFMessage | None = Envelope.model_validate_json(dead.data).message
            except ValidationError:
                msg = None
            out.append(DeadMessage(msg, dead.reason, dead.delivery_count))
        return out

    async def mailbox_size(self, agent: str) -> int:
        return await self.transport.size(agent)

    async def _report_depth(self, mailboxes: Sequence[str]) -> None:
        if self.on_depth is None:
            return
        for mailbox in mailboxes:
            try:
                depth = await self.transport.size(mailbox)
            except Exception as exc:  # a metric must not fail a message that was already handled
                log.warning("mailbox depth of %r not refreshed: %s", mailbox, exc)
                continue
            self.on_depth(mailbox, depth)

    # ------------------------------------------------------------------ audit
    async def _audit(
        self,
        event: AuditEventType | str,
        outcome: str,
        agent: str,
        detail: dict[str, Any],
        error: AgencyError | None = None,
        *,
        trace_id: str = "",
        rule: str = "",
    ) -> None:
        if error is not None:
            detail = {**detail, "error": error.reason, "why": error.message}
        await self.audit.append(
            AuditRecord(
                event_type=event,
                component="messaging",
                actors=Actors(agent=agent),
                trace_id=trace_id,
                outcome=outcome,
                rule=rule or (error.reason if error else ""),
                detail=detail,
            )
        )
