"""Who is talking, and may they: agent registration, tokens, signatures, topic ACLs, rate limits.

- :class:`IdentityRegistry` registers an agent with its Ed25519 public key and issues
  a bearer token. The token is returned once (:class:`Registration`) and only its
  SHA-256 is kept; every call presents it (``Unauthenticated`` otherwise).
- Messages are signed by the sender over :func:`signing_bytes`: the canonical JSON of
  the SMF message *and* of every delivery field that changes what the receiver does
  (:class:`SendOptions`: kind, topic, TTL, ``trigger_turn``, params), verified on send
  and again on receipt with the registered key.
- :class:`TopicACL` says who may publish to and subscribe to which topics.
- :class:`RateLimiter` is a per-agent token bucket; an empty bucket raises
  ``ResourceExhausted`` with ``retry_after_ms``.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import Field

from .._model import Model
from ..audit.record import canonical_json
from ..errors import (
    AlreadyExists,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
)
from ..smf import SMFMessage
from .clock import Clock, system_clock

__all__ = [
    "AGENT_NAME_PATTERN",
    "CONTENT_TYPE_PATTERN",
    "TOKEN_HASH_PROBLEM",
    "TOPIC_PATTERN",
    "AclSettings",
    "AgentIdentity",
    "IdentityRegistry",
    "RateLimiter",
    "Registration",
    "SendOptions",
    "TopicACL",
    "TopicRule",
    "check_topic",
    "generate_key",
    "parse_public_key",
    "public_key_b64",
    "sign_message",
    "signing_bytes",
    "token_hash",
]

#: Agent (and mailbox) names: 1-128 letters, digits and ``_ . : -``, not starting with a symbol.
AGENT_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_NAME = AGENT_NAME_PATTERN
_TOKEN_HASH = re.compile(r"^[0-9a-f]{64}$")
#: What a bad token hash is told (agents, people, the definition file: one rule).
TOKEN_HASH_PROBLEM = "must be the hex SHA-256 of the token (64 digits; see hash_token)"


def token_hash(value: str) -> str:
    """``value`` as a token hash (trimmed, lower case).

    Raises:
        ValueError: it is not the hex SHA-256 of a token (:data:`TOKEN_HASH_PROBLEM`).
    """
    digest = value.strip().lower()
    if not _TOKEN_HASH.match(digest):
        raise ValueError(TOKEN_HASH_PROBLEM)
    return digest


#: A MIME type: ``type/subtype``, optionally ``+suffix`` and ``; parameters``.
CONTENT_TYPE_PATTERN = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,62}(\s*;[ -~]{0,60})?$"
)
#: Topic names are ``domain.action`` (lower case, dot-separated, at least two parts).
TOPIC_PATTERN = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+$")


def check_topic(topic: str, *, field_name: str = "topic") -> str:
    """Return ``topic`` if it is a valid ``domain.action`` name.

    Raises:
        InvalidInput: naming the field and the expected form.
    """
    if not TOPIC_PATTERN.match(topic or ""):
        raise InvalidInput.single(
            field_name, f"{topic!r} is not a topic name of the form domain.action (lower case, dots)"
        )
    return topic


@dataclass(frozen=True)
class SendOptions:
    """How a message travels, as the sender signs it (every field changes what the receiver does).

    Attributes:
        kind: ``direct``, ``topic`` or ``broadcast``.
        topic: The topic of a ``topic`` message (else empty).
        ttl: Seconds the message lives after its ``created_at``; None = the post office's
            default TTL (the expiry is then computed by the receiving post office from its
            own configuration, never read from the transport).
        trigger_turn: Wake the recipient (start a turn) rather than only queue the message.
        params: Extra tool parameters (a JSON object).
        content_type: The MIME type of the content, so the receiver knows how to read it
            (``application/json``, ``text/plain``, ``application/vnd.acme.order+json`` ...).
        correlation_id: Threads a conversation: replies carry the id of what they answer.
    """

    kind: Literal["direct", "topic", "broadcast"] = "direct"
    topic: str = ""
    ttl: float | None = None
    trigger_turn: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)
    content_type: str = "application/json"
    correlation_id: str = ""

    def signed(self) -> dict[str, Any]:
        """The JSON object these options contribute to :func:`signing_bytes`."""
        ttl = self.ttl
        if ttl is not None and math.isfinite(ttl) and float(ttl).is_integer():
            ttl = int(ttl)  # 300 and 300.0 sign the same (a proto double arrives as 300.0)
        return {
            "kind": self.kind,
            "topic": self.topic,
            "ttl": ttl,
            "trigger_turn": bool(self.trigger_turn),
            "params": dict(self.params),
            "content_type": self.content_type,
            "correlation_id": self.correlation_id,
        }

    def problems(self) -> list[tuple[str, str]]:
        """What is wrong with ``content_type`` and ``correlation_id``: ``(field, reason)`` pairs."""
        out = []
        if not CONTENT_TYPE_PATTERN.match(self.content_type or ""):
            out.append(
                (
                    "content_type",
                    "required: the MIME type of the content, type/subtype such as application/json "
                    "or text/plain (at most 127 characters)",
                )
            )
        if len(self.correlation_id) > 128 or not all(c.isprintable() for c in self.correlation_id):
            out.append(("correlation_id", "at most 128 printable characters"))
        return out


def signing_bytes(message: SMFMessage, options: SendOptions | None = None) -> bytes:
    """The exact bytes a sender signs.

    The canonical JSON (sorted keys, compact, UTF-8) of ``{"message": <SMF message>, "kind",
    "topic", "ttl", "trigger_turn", "params", "content_type", "correlation_id"}``,
    so that neither the message nor how it is to be handled can be altered in transit.
    """
    return canonical_json({"message": message.model_dump(mode="json"), **(options or SendOptions()).signed()})


def generate_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 signing key (keep it with the agent; register its public half)."""
    return Ed25519PrivateKey.generate()


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key, base64: what :meth:`IdentityRegistry.register` takes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return base64.b64encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def sign_message(key: Ed25519PrivateKey, message: SMFMessage, options: SendOptions | None = None) -> str:
    """Sign ``message`` and how it travels (``options``) with the sender's key; returns base64.

    The options must be those the message is sent with (kind, topic, TTL, ``trigger_turn``,
    params), else the post office refuses the signature.
    """
    return base64.b64encode(key.sign(signing_bytes(message, options))).decode()


@dataclass(frozen=True)
class Registration:
    """What registration returns. ``token`` is shown this once and never stored."""

    agent: str
    token: str = field(repr=False)


@dataclass
class AgentIdentity:
    """A registered agent (the token itself is not here, only its hash)."""

    name: str
    public_key: Ed25519PublicKey
    token_hash: str
    description: str = ""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_public_key(value: str | bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from its raw 32 bytes (base64 when text).

    Raises:
        InvalidInput: on ``public_key``, saying what is wrong.
    """
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else value
        return Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, binascii.Error) as exc:
        raise InvalidInput.single(
            "public_key", f"not a raw 32-byte Ed25519 public key (base64 when text): {exc}"
        ) from None


class IdentityRegistry:
    """Registered agents, their public keys, and hashes of their tokens (in memory)."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentIdentity] = {}
        self._by_hash: dict[str, str] = {}

    def register(self, name: str, public_key: str | bytes, *, description: str = "") -> Registration:
        """Register ``name`` with its Ed25519 public key and issue its token.

        Raises:
            InvalidInput: a bad name or key.
            AlreadyExists: the name is taken.
        """
        if not _NAME.match(name or ""):
            raise InvalidInput.single("name", "1-128 characters: letters, digits and _ . : - (not first)")
        key = parse_public_key(public_key)
        if name in self._agents:
            raise AlreadyExists(f"agent {name!r} is already registered")
        token = "agt_" + secrets.token_urlsafe(32)
        digest = _hash(token)
        self._agents[name] = AgentIdentity(name, key, digest, description)
        self._by_hash[digest] = name
        return Registration(name, token)

    def enroll(self, name: str, public_key: str | bytes, token_sha256: str, *, description: str = "") -> None:
        """Register ``name`` with a token issued out of band, given only as its SHA-256 (hex).

        This is how an agency definition file declares agents: every gateway replica
        enrolls the same agents, so an agent's one token works on all of them.

        Raises:
            InvalidInput: a bad name, key or hash. AlreadyExists: the name or token is taken.
        """
        if not _NAME.match(name or ""):
            raise InvalidInput.single("name", "1-128 characters: letters, digits and _ . : - (not first)")
        key = parse_public_key(public_key)
        try:
            digest = token_hash(token_sha256)
        except ValueError as exc:
            raise InvalidInput.single("token_sha256", str(exc)) from None
        if name in self._agents:
            raise AlreadyExists(f"agent {name!r} is already registered")
        if digest in self._by_hash:
            raise AlreadyExists(f"agent {self._by_hash[digest]!r} already has this token")
        self._agents[name] = AgentIdentity(name, key, digest, description)
        self._by_hash[digest] = name

    def load(self, name: str, public_key: str | bytes, token_sha256: str, *, description: str = "") -> None:
        """Know ``name`` (from the agent directory): add it, or refresh its key and token hash."""
        self.remove(name)
        key = parse_public_key(public_key)
        digest = token_sha256.lower()
        self._agents[name] = AgentIdentity(name, key, digest, description)
        self._by_hash[digest] = name

    def remove(self, name: str) -> None:
        """Forget ``name`` (its token stops working here at once)."""
        ident = self._agents.pop(name, None)
        if ident is not None:
            self._by_hash.pop(ident.token_hash, None)

    def name_for(self, token_sha256: str) -> str | None:
        """The agent whose token has this SHA-256, if known here."""
        return self._by_hash.get(token_sha256)

    def rotate_token(self, name: str) -> Registration:
        """Issue a new token for ``name``; the old one stops working at once."""
        ident = self.get(name)
        del self._by_hash[ident.token_hash]
        token = "agt_" + secrets.token_urlsafe(32)
        ident.token_hash = _hash(token)
        self._by_hash[ident.token_hash] = name
        return Registration(name, token)

    def authenticate(self, token: str | None) -> str:
        """The agent name the token belongs to.

        Raises:
            Unauthenticated: no token, or not one we issued.
        """
        if not token:
            raise Unauthenticated("no agent token presented")
        name = self._by_hash.get(_hash(token))
        if name is None:
            raise Unauthenticated("unknown or revoked agent token")
        return name

    def get(self, name: str) -> AgentIdentity:
        ident = self._agents.get(name)
        if ident is None:
            raise NotFound(f"no registered agent {name!r}")
        return ident

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def names(self) -> list[str]:
        return sorted(self._agents)

    def verify(self, message: SMFMessage, signature: str, options: SendOptions | None = None) -> bool:
        """Whether ``signature`` is ``message.sender``'s signature over ``message`` and ``options``."""
        ident = self._agents.get(message.sender)
        if ident is None or not signature:
            return False
        try:
            ident.public_key.verify(
                base64.b64decode(signature, validate=True), signing_bytes(message, options)
            )
        except (InvalidSignature, ValueError, binascii.Error):
            return False
        return True


@dataclass(frozen=True)
class _Rule:
    pattern: str
    publishers: frozenset[str]
    subscribers: frozenset[str]


class TopicACL:
    """Who may publish and subscribe, per topic pattern (``fnmatch`` style: ``billing.*``).

    The first matching rule decides. A topic no rule matches is open to every
    registered agent when ``default_open`` (the default), closed otherwise. ``"*"``
    in a member list means every agent.
    """

    def __init__(self, *, default_open: bool = True) -> None:
        self._rules: list[_Rule] = []
        self.default_open = default_open

    def allow(
        self, pattern: str, *, publishers: list[str] | None = None, subscribers: list[str] | None = None
    ) -> None:
        """Add a rule for topics matching ``pattern``; unlisted agents are refused on it."""
        self._rules.append(_Rule(pattern, frozenset(publishers or ()), frozenset(subscribers or ())))

    def _rule(self, topic: str) -> _Rule | None:
        for rule in self._rules:
            if fnmatch.fnmatchcase(topic, rule.pattern):
                return rule
        return None

    def may_publish(self, agent: str, topic: str) -> bool:
        rule = self._rule(topic)
        if rule is None:
            return self.default_open
        return agent in rule.publishers or "*" in rule.publishers

    def may_subscribe(self, agent: str, topic: str) -> bool:
        rule = self._rule(topic)
        if rule is None:
            return self.default_open
        return agent in rule.subscribers or "*" in rule.subscribers

    def check_publish(self, agent: str, topic: str) -> None:
        """Raises: PermissionDenied when ``agent`` may not publish to ``topic``."""
        if not self.may_publish(agent, topic):
            raise PermissionDenied(f"agent {agent!r} may not publish to topic {topic!r}")

    def check_subscribe(self, agent: str, topic: str) -> None:
        """Raises: PermissionDenied when ``agent`` may not subscribe to ``topic``."""
        if not self.may_subscribe(agent, topic):
            raise PermissionDenied(f"agent {agent!r} may not subscribe to topic {topic!r}")


class TopicRule(Model):
    """One topic ACL rule of the definition file (``messaging.acl.topics[i]``)."""

    pattern: str = Field(min_length=1, max_length=256, description="fnmatch pattern of topics: billing.*")
    publishers: list[str] = Field(default_factory=list, description="Agents that may publish ('*': all).")
    subscribers: list[str] = Field(default_factory=list, description="Agents that may subscribe ('*': all).")


class AclSettings(Model):
    """Topic ACLs (``messaging.acl``): the first rule whose pattern matches a topic decides.

    Broadcasts are governed by the topic ``system.broadcast``; direct messages by the
    communication flows (``messaging.flows``).
    """

    default_open: bool = Field(
        default=True, description="A topic no rule matches is open to every agent (else closed)."
    )
    topics: list[TopicRule] = Field(default_factory=list, description="Rules, first match decides.")

    def build(self) -> TopicACL:
        """The :class:`TopicACL` these settings describe."""
        acl = TopicACL(default_open=self.default_open)
        for rule in self.topics:
            acl.allow(rule.pattern, publishers=rule.publishers, subscribers=rule.subscribers)
        return acl


class RateLimiter:
    """A token bucket per agent: ``rate`` calls per second on average, bursts up to ``burst``.

    Args:
        rate: Refill rate, tokens per second (> 0).
        burst: Bucket size (>= 1).
        clock: Seconds as a float (inject a :class:`~middleware.messaging.clock.ManualClock` in tests).
    """

    def __init__(self, rate: float, burst: int, *, clock: Clock = system_clock) -> None:
        if rate <= 0 or burst < 1:
            raise InvalidInput.single("rate_limit", "rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # agent -> (tokens, at)

    def acquire(self, agent: str, cost: float = 1.0) -> None:
        """Take ``cost`` tokens from ``agent``'s bucket.

        Raises:
            ResourceExhausted: the bucket is empty; ``details["retry_after_ms"]`` says
                when enough tokens will be back.
        """
        now = self._clock()
        tokens, at = self._buckets.get(agent, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < cost:
            self._buckets[agent] = (tokens, now)
            retry_ms = max(1, int(((cost - tokens) / self.rate) * 1000 + 0.999))
            raise ResourceExhausted(
                f"agent {agent!r} is over its rate limit ({self.rate:g}/s, burst {self.burst}); "
                f"retry in {retry_ms} ms",
                details={"agent": agent, "retry_after_ms": retry_ms},
            )
        self._buckets[agent] = (tokens - cost, now)
