"""Shared pure helpers for the built-in handlers.

Every helper builds a :class:`Resolution` from the event and the policy only, so the
same event always gives the same resolution (the jitter of a retry's backoff is
derived from the event id, not drawn at random).
"""

from __future__ import annotations

import hashlib
from typing import Any

from middleware.failures import FailureEvent, FailurePolicy, Resolution, ResolutionKind

__all__ = [
    "abort",
    "ask",
    "backoff_ms",
    "backup",
    "configured",
    "escalate",
    "retry_then_backup",
]


def backoff_ms(event: FailureEvent, policy: FailurePolicy) -> float:
    """Exponential backoff with deterministic jitter (same event → same delay).

    ``base * 2**(attempt-1)`` capped at ``backoff_max_ms``, then spread by
    ``± jitter``. The jitter is derived from the event id so the handler stays pure
    and idempotent while retries of different tasks still spread out.
    """
    base = min(policy.backoff_max_ms, policy.backoff_base_ms * (2 ** (event.attempt - 1)))
    digest = hashlib.sha256(event.event_id.encode()).digest()
    unit = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF  # 0..1
    return float(max(0.0, base * (1 + policy.jitter * (2 * unit - 1))))


def backup_agent(event: FailureEvent, policy: FailurePolicy) -> str:
    """The configured backup agent, else the router's next fallback.

    The configured one is a preference among the fallbacks the router found fit for the
    step (its contract allows it, its circuit is not open), never a way around them.
    """
    if policy.backup_agent and policy.backup_agent in event.fallbacks:
        return policy.backup_agent
    return event.fallbacks[0] if event.fallbacks else ""


def backup(event: FailureEvent, policy: FailurePolicy, what: str) -> Resolution:
    """Switch to the backup agent; a human when there is none."""
    agent = backup_agent(event, policy)
    if not agent:
        return escalate(event, f"{what} on {event.agent or 'the task'} and no backup left")
    return Resolution(
        kind=ResolutionKind.USE_BACKUP,
        failure_type=event.type,
        agent=agent,
        reason=f"{what} on {event.agent or 'the task'}; switching to backup {agent}",
    )


def retry_then_backup(event: FailureEvent, policy: FailurePolicy, what: str) -> Resolution:
    """Retry up to ``policy.max_retries`` times, then ``policy.on_exhausted``."""
    if event.attempt <= policy.max_retries:
        return Resolution(
            kind=ResolutionKind.RETRY,
            failure_type=event.type,
            delay_ms=backoff_ms(event, policy),
            agent=event.agent,
            reason=f"{what} on {event.agent}; retry {event.attempt} of {policy.max_retries}",
        )
    done = f"{what} on {event.agent} after {event.attempt} attempts"
    if policy.on_exhausted == "use_backup":
        return backup(event, policy, done)
    if policy.on_exhausted == "abort":
        return abort(event, done)
    return escalate(event, done)


def escalate(event: FailureEvent, reason: str) -> Resolution:
    return Resolution(kind=ResolutionKind.ESCALATE_TO_HUMAN, failure_type=event.type, reason=reason)


def abort(event: FailureEvent, reason: str) -> Resolution:
    return Resolution(kind=ResolutionKind.ABORT, failure_type=event.type, reason=reason)


def ask(event: FailureEvent, reason: str, question: str, options: list[dict[str, Any]]) -> Resolution:
    """A structured clarification: a question with at least two options, never an open one.

    With fewer than two options there is nothing to choose from, so a human decides.
    """
    if len(options) < 2:
        return escalate(event, f"{reason} (no options to offer the user)")
    return Resolution(
        kind=ResolutionKind.ASK_CLARIFICATION,
        failure_type=event.type,
        reason=reason,
        payload={"question": question, "options": options},
    )


def configured(event: FailureEvent, policy: FailurePolicy) -> Resolution | None:
    """The resolution the operator forced for this type (``policy.resolution``), or None.

    ``check_policy`` has already refused resolutions the type does not allow.
    """
    kind = policy.resolution
    what = event.detail or event.type.value.lower().replace("_", " ")
    if kind is None:
        return None
    if kind is ResolutionKind.RETRY:
        return retry_then_backup(event, policy, event.type.value.lower().replace("_", " "))
    if kind is ResolutionKind.USE_BACKUP:
        return backup(event, policy, event.type.value.lower().replace("_", " "))
    if kind is ResolutionKind.ABORT:
        return abort(event, what)
    if kind is ResolutionKind.ESCALATE_TO_HUMAN:
        return escalate(event, what)
    if kind is ResolutionKind.ASK_CLARIFICATION:
        return ask(event, what, _question(event), _options(event))
    return Resolution(kind=kind, failure_type=event.type, reason=what, payload=dict(event.context))


def _question(event: FailureEvent) -> str:
    return str(event.context.get("question") or "Please confirm which option you mean.")


def _options(event: FailureEvent) -> list[dict[str, Any]]:
    return [dict(o) for o in event.context.get("options") or []]
