"""Shared pure helpers for the built-in handlers."""

from __future__ import annotations

import hashlib

from middleware.failures import FailureEvent, FailurePolicy, Resolution, ResolutionKind


def backoff_ms(event: FailureEvent, policy: FailurePolicy) -> float:
    """Exponential backoff with deterministic jitter (same event → same delay).

    The jitter is derived from the event id so the handler stays pure and
    idempotent while retries of different tasks still spread out.
    """
    base: float = min(policy.backoff_max_ms, policy.backoff_base_ms * (2 ** (event.attempt - 1)))
    digest = hashlib.sha256(event.event_id.encode()).digest()
    unit = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF  # 0..1
    return float(max(0.0, base * (1 + policy.jitter * (2 * unit - 1))))


def retry_then_backup(event: FailureEvent, policy: FailurePolicy, what: str) -> Resolution:
    """Retry up to ``policy.max_retries`` times, then the next fallback, then a human."""
    if event.attempt <= policy.max_retries:
        return Resolution(
            kind=ResolutionKind.RETRY,
            failure_type=event.type,
            delay_ms=backoff_ms(event, policy),
            agent=event.agent,
            reason=f"{what} on {event.agent}; retry {event.attempt} of {policy.max_retries}",
        )
    if policy.on_exhausted == "use_backup" and event.fallbacks:
        return Resolution(
            kind=ResolutionKind.USE_BACKUP,
            failure_type=event.type,
            agent=event.fallbacks[0],
            reason=f"{what} on {event.agent} after {event.attempt} attempts; switching to backup "
            f"{event.fallbacks[0]}",
        )
    if policy.on_exhausted == "abort":
        return abort(event, f"{what} on {event.agent} after {event.attempt} attempts")
    return escalate(event, f"{what} on {event.agent} after {event.attempt} attempts and no backup left")


def escalate(event: FailureEvent, reason: str) -> Resolution:
    return Resolution(kind=ResolutionKind.ESCALATE_TO_HUMAN, failure_type=event.type, reason=reason)


def abort(event: FailureEvent, reason: str) -> Resolution:
    return Resolution(kind=ResolutionKind.ABORT, failure_type=event.type, reason=reason)
