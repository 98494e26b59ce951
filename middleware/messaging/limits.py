"""Message rate limits per sender, per recipient and per topic, shared by replicas on Redis.

The definition file's ``messaging.rate_limits`` (:class:`RateLimitSettings`) gives, for
each scope, an ordered list of rules ``{match: <fnmatch pattern>, rate: <per second>,
burst: <tokens>}``; the first rule whose pattern matches the sender's name, the
recipient's name or the topic decides, and every name gets its own token bucket (so
``match: "*"`` limits *each* sender, not all of them together). A name no rule matches
is not limited in that scope.

:class:`RateLimits` charges one message against all the buckets it touches at once:
either every bucket has a token and each loses one, or none is charged and the call is
refused with :class:`~middleware.errors.ResourceExhausted` naming the scope, with
``details["retry_after_ms"]`` (the gRPC trailer ``agency-retry-after-ms``).

The buckets live in a :class:`BucketStore`: :class:`MemoryBuckets` (one process, injected
clock) or :class:`RedisBuckets` (one Lua call per message, Redis' own clock, so every
replica under the same key prefix draws from the same buckets).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field, field_validator

from .._lazy import lazy_exports
from .._model import Model
from ..errors import ResourceExhausted
from .clock import Clock, system_clock

__all__ = [
    "Bucket",
    "BucketStore",
    "LimitRule",
    "MemoryBuckets",
    "RateLimitSettings",
    "RateLimits",
    "Scope",
]

Scope = Literal["sender", "recipient", "topic", "model", "tool"]  # model, tool: agency.usage.rate_limits


class LimitRule(Model):
    """One rate-limit rule: names matching ``match`` get ``rate``/s, bursts up to ``burst``."""

    match: str = Field(default="*", min_length=1, max_length=256, description="fnmatch pattern of names.")
    rate: float = Field(gt=0, description="Tokens added per second (messages per second on average).")
    burst: int = Field(ge=1, le=1_000_000, description="Bucket size: messages allowed at once.")

    @field_validator("rate")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number of messages per second")
        return v


class RateLimitSettings(Model):
    """Rate limits by scope; each list is ordered, the first matching rule decides."""

    sender: list[LimitRule] = Field(default_factory=list, description="Per sending agent.")
    recipient: list[LimitRule] = Field(
        default_factory=list, description="Per receiving mailbox (direct messages)."
    )
    topic: list[LimitRule] = Field(
        default_factory=list, description="Per topic published to (broadcast: system.broadcast)."
    )

    def rule_for(self, scope: Scope, name: str) -> LimitRule | None:
        """The first rule of ``scope`` whose pattern matches ``name`` (None: not limited)."""
        rules: list[LimitRule] = getattr(self, scope)
        for rule in rules:
            if fnmatch.fnmatchcase(name, rule.match):
                return rule
        return None

    @property
    def empty(self) -> bool:
        return not (self.sender or self.recipient or self.topic)


@dataclass(frozen=True)
class Bucket:
    """The token bucket of one name in one scope."""

    scope: Scope
    name: str
    rate: float
    burst: int

    @property
    def key(self) -> str:
        return f"{self.scope}:{self.name}"


@runtime_checkable
class BucketStore(Protocol):
    """Where token buckets live."""

    async def take(self, buckets: Sequence[Bucket]) -> tuple[Bucket, int] | None:
        """Take one token from every bucket, or from none.

        Returns:
            None when charged; else the bucket that refused and the milliseconds until
            it has a token again (the longest wait when several refuse).
        """
        ...


def _retry_ms(tokens: float, rate: float) -> int:
    return max(1, math.ceil((1.0 - tokens) / rate * 1000))


class MemoryBuckets:
    """Buckets in this process (tests inject a :class:`~.clock.ManualClock`)."""

    def __init__(self, *, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._state: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    async def take(self, buckets: Sequence[Bucket]) -> tuple[Bucket, int] | None:
        now = self._clock()
        levels: list[float] = []
        refused: tuple[Bucket, int] | None = None
        for bucket in buckets:
            tokens, at = self._state.get(bucket.key, (float(bucket.burst), now))
            tokens = min(float(bucket.burst), tokens + max(0.0, now - at) * bucket.rate)
            levels.append(tokens)
            if tokens < 1.0:
                wait = _retry_ms(tokens, bucket.rate)
                if refused is None or wait > refused[1]:
                    refused = (bucket, wait)
        if refused is not None:
            return refused
        for bucket, tokens in zip(buckets, levels, strict=True):
            self._state[bucket.key] = (tokens - 1.0, now)
        return None


class RateLimits:
    """The definition's rate limits over a bucket store.

    Args:
        settings: The rules per scope.
        store: Where the buckets live (default: this process).
    """

    def __init__(self, settings: RateLimitSettings, store: BucketStore | None = None) -> None:
        self.settings = settings
        self.store: BucketStore = store or MemoryBuckets()

    def buckets(self, *, sender: str, recipients: Sequence[str] = (), topic: str = "") -> list[Bucket]:
        """The buckets one message from ``sender`` to ``recipients`` / ``topic`` is charged to."""
        wanted: list[tuple[Scope, str]] = [("sender", sender)]
        wanted += [("recipient", r) for r in recipients]
        if topic:
            wanted.append(("topic", topic))
        out = []
        for scope, name in wanted:
            rule = self.settings.rule_for(scope, name)
            if rule is not None:
                out.append(Bucket(scope, name, rule.rate, rule.burst))
        return out

    async def charge(self, *, sender: str, recipients: Sequence[str] = (), topic: str = "") -> None:
        """Charge one message to every bucket it touches, or refuse it.

        Raises:
            ResourceExhausted: a bucket is empty; ``details`` has ``scope``, ``name``,
                ``retry_after_ms``.
        """
        buckets = self.buckets(sender=sender, recipients=recipients, topic=topic)
        if not buckets:
            return
        refused = await self.store.take(buckets)
        if refused is None:
            return
        bucket, wait = refused
        raise ResourceExhausted(
            f"{bucket.scope} {bucket.name!r} is over its message rate limit "
            f"({bucket.rate:g}/s, burst {bucket.burst}); retry in {wait} ms",
            details={
                "scope": bucket.scope,
                "name": bucket.name,
                "retry_after_ms": wait,
                "cause": "RATE_LIMITED",
            },
        )


# The Redis implementation lives in the Redis layer; its name stays importable here
# (imported on first use, so importing this module does not import redis).
__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisBuckets": "middleware.redis.rate_limits"}, [*__all__, "RedisBuckets"]
)
