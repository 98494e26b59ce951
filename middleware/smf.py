"""Semantic Message Format (SMF): the envelope of every message between agents.

An SMF message carries, besides its content, the metadata that lets the receiver
decide how far to trust it: where it came from and how reliable that source is
(``provenance``), how long it stays fresh (``freshness_ttl``), how confident the
sender is (``confidence_score``), and which user goals it serves
(``intention_trace``). Messages are validated at every boundary; a message that
does not validate is refused with every problem named.

The required set is the seed's "minimum viable set" (section 5.2, tip 2): every
message carries ``provenance`` and a non-empty ``intention_trace``; ``confidence_score``
is optional; ``freshness_ttl`` is optional except in a time-critical domain (finance,
logistics by default: :data:`DEFAULT_TIME_CRITICAL_DOMAINS`), where a message without
one is refused (:func:`freshness_problem`). A contract or a goal may also declare
itself time-critical (``time_critical: true``); the pipeline then requires the TTL of
every message in it. Every field that is present keeps its range check.
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from ._model import Model

__all__ = [
    "DEFAULT_TIME_CRITICAL_DOMAINS",
    "MAX_INTENTION_DEPTH",
    "Provenance",
    "SMFMessage",
    "SMFMetadata",
    "freshness_problem",
    "new_id",
    "new_trace_id",
    "utcnow",
]

#: An intention trace deeper than this is treated as drift (see INTENT_DRIFT).
MAX_INTENTION_DEPTH = 5

#: Domains whose messages must carry a ``freshness_ttl`` (seed section 5.2: "freshness_ttl is
#: mandatory only in finance, logistics and other time-critical scenes").
DEFAULT_TIME_CRITICAL_DOMAINS: frozenset[str] = frozenset({"finance", "logistics"})


def utcnow() -> datetime:
    return datetime.now(UTC)


class _RandomBytes:
    """The OS's random bytes (``os.urandom``), drawn 4 KiB at a time.

    ``os.urandom`` releases the GIL for its system call, and each release on the event loop
    lets a thread waiting for the GIL (the audit log's writer and syncer) take it; the loop
    then waits to get it back. A governed task makes ~17 ids: drawn one by one they were ~17
    such hand-overs per task. The bytes are the same (the kernel's CSPRNG); a lock keeps two
    threads from taking the same ones, and a forked child starts afresh (no id drawn twice
    across processes).
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._buffer):
                self._buffer, at = os.urandom(self._size), 0
            self._at = at + n
            return self._buffer[at : at + n]


_RANDOM = _RandomBytes()


def new_id(prefix: str) -> str:
    """A fresh identifier such as ``msg_3f2a...`` (prefix + 24 random hex digits)."""
    # the OS's random bytes directly: uuid.uuid4() draws the same bytes but costs 4x as much
    # in building a UUID object, and a governed task makes ~17 ids
    return f"{prefix}_{_RANDOM.take(12).hex()}"


def new_trace_id() -> str:
    """A fresh trace id: 32 random hex digits (the W3C trace-context form)."""
    return _RANDOM.take(16).hex()


class Provenance(Model):
    """Where the content comes from and how reliable that source is (0..1)."""

    source: str = Field(min_length=1, max_length=256, description="Data source or producing agent.")
    reliability_score: float = Field(
        ge=0.0, le=1.0, description="How far the source is trusted, 0 (not at all) to 1."
    )


class SMFMetadata(Model):
    """The semantic metadata of an SMF message.

    Required: ``provenance`` and ``intention_trace`` (at least one goal id). Optional:
    ``confidence_score``, ``freshness_ttl`` (required in time-critical domains, see
    :func:`freshness_problem`) and ``domain``.
    """

    provenance: Provenance
    intention_trace: list[str] = Field(
        min_length=1,
        max_length=64,
        description="Goal ids this message serves, from the user's root goal down (at least one).",
    )
    freshness_ttl: float | None = Field(
        default=None,
        ge=0,
        description="Seconds after ``created_at`` during which the content is fresh; "
        "none = no expiry (required in a time-critical domain).",
    )
    confidence_score: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Sender's confidence, 0..1 (optional)."
    )
    domain: str = Field(
        default="",
        max_length=64,
        description="The business domain of the content (e.g. finance, logistics); decides "
        "whether a freshness TTL is required.",
    )

    @field_validator("intention_trace")
    @classmethod
    def _goal_ids_non_empty(cls, v: list[str]) -> list[str]:
        for i, goal_id in enumerate(v):
            if not goal_id or not goal_id.strip():
                raise ValueError(f"item {i} is an empty goal id")
        return v


def freshness_problem(
    metadata: SMFMetadata,
    *,
    time_critical_domains: frozenset[str] | set[str] = DEFAULT_TIME_CRITICAL_DOMAINS,
    time_critical: str = "",
) -> str | None:
    """Why the message's missing ``freshness_ttl`` is not allowed, or ``None``.

    Args:
        metadata: The message's metadata.
        time_critical_domains: Domains whose messages need a TTL.
        time_critical: Non-empty when the context itself is time-critical (a contract or a
            goal declared so); says which, for the message.
    """
    if metadata.freshness_ttl is not None:
        return None
    if time_critical:
        return f"required: {time_critical} is time-critical"
    if metadata.domain and metadata.domain.lower() in time_critical_domains:
        return f"required in the time-critical domain {metadata.domain!r}"
    return None


class SMFMessage(Model):
    """One message between agents (or between a client and the gateway)."""

    message_id: str = Field(default_factory=lambda: new_id("msg"), min_length=1, max_length=128)
    sender: str = Field(min_length=1, max_length=256)
    receiver: str = Field(min_length=1, max_length=256)
    content: Any = Field(description="Text or any JSON value.")
    metadata: SMFMetadata
    trace_id: str = Field(default_factory=new_trace_id, min_length=1, max_length=64)
    created_at: datetime = Field(default_factory=utcnow)

    @field_validator("created_at")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("must carry a timezone (UTC recommended)")
        return v.astimezone(UTC)

    @model_validator(mode="after")
    def _content_present(self) -> SMFMessage:
        if self.content is None:
            raise ValueError("content: must not be null")
        return self

    def expires_at(self) -> datetime | None:
        """When the content stops being fresh (``None``: it carries no TTL)."""
        ttl = self.metadata.freshness_ttl
        return None if ttl is None else self.created_at + timedelta(seconds=ttl)

    def is_stale(self, now: datetime | None = None) -> bool:
        """True when the content is older than its freshness TTL (never without one)."""
        expires = self.expires_at()
        return expires is not None and (now or utcnow()) > expires

    def intention_drift(self) -> str | None:
        """Why the intention trace drifts (too deep, or a cycle), or ``None``."""
        trace = self.metadata.intention_trace
        if len(trace) > MAX_INTENTION_DEPTH:
            return f"intention trace depth {len(trace)} exceeds {MAX_INTENTION_DEPTH}"
        seen: set[str] = set()
        for goal_id in trace:
            if goal_id in seen:
                return f"intention trace has a cycle at {goal_id}"
            seen.add(goal_id)
        return None
