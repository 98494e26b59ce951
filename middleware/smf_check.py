"""``agency smf validate``: check SMF messages offline, like the seed's ``smf-validate``.

For each message: ``ok`` "Valid SMF message" when it validates as an SMF envelope,
else one ``error`` per schema problem (``schema``: e.g. a missing ``provenance`` or
``intention_trace``, the minimum viable set; a field out of range); then

* ``error`` ``ttl-required``: no ``freshness_ttl`` in a time-critical domain
  (``metadata.domain`` among ``time_critical_domains``) or when the caller says the
  message is time-critical (``time_critical``);
* ``error`` ``goal-missing``: an expected goal id (``--expect-goal``) is not in
  ``intention_trace`` (the message no longer serves the user's goal);
* ``error`` ``intent-drift``: the trace is too deep or has a cycle;
* ``error`` ``stale``: ``created_at + freshness_ttl`` is past (``warning`` with
  ``allow_stale``, for archived messages);
* ``warning`` ``short-ttl``: ``freshness_ttl`` below the recommended minimum for
  real-time data (``min_ttl``, default 60 s; 0 disables).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .errors import InvalidInput
from .findings import Finding
from .smf import DEFAULT_TIME_CRITICAL_DOMAINS, SMFMessage, freshness_problem, utcnow

__all__ = ["DEFAULT_MIN_TTL", "check_smf_message", "messages_in"]

#: Recommended minimum freshness TTL (seconds) for real-time data (seed section 5.3).
DEFAULT_MIN_TTL = 60.0


def messages_in(document: Any) -> list[Any]:
    """The messages a file holds: one message, a list, or ``{"messages": [...]}``."""
    if isinstance(document, list):
        return document
    if (
        isinstance(document, dict)
        and isinstance(document.get("messages"), list)
        and "metadata" not in document
    ):
        messages: list[Any] = document["messages"]
        return messages
    return [document]


def check_smf_message(
    data: Any,
    *,
    file: str = "",
    item: str = "",
    expect_goals: Sequence[str] = (),
    min_ttl: float = DEFAULT_MIN_TTL,
    now: datetime | None = None,
    allow_stale: bool = False,
    time_critical_domains: frozenset[str] | set[str] = DEFAULT_TIME_CRITICAL_DOMAINS,
    time_critical: bool = False,
) -> list[Finding]:
    """Every finding for one SMF message (a mapping as read from a file).

    Args:
        data: The message.
        file: The file it came from.
        item: How to name it when it has no ``message_id`` (e.g. ``#0``).
        expect_goals: Goal ids the message's intention trace must contain.
        min_ttl: Recommended minimum ``freshness_ttl`` in seconds (0 disables the check).
        now: The time to judge freshness at (default: now, UTC).
        allow_stale: Report a stale message as a warning instead of an error.
        time_critical_domains: Domains whose messages must carry a ``freshness_ttl``.
        time_critical: The message is time-critical whatever its domain.
    """
    message_id = data.get("message_id") if isinstance(data, dict) else None
    where = {"file": file, "item": message_id if isinstance(message_id, str) and message_id else item}
    try:
        message = SMFMessage.parse(data, what="SMF message")
    except InvalidInput as exc:
        findings = [Finding("error", "schema", p.reason, field=p.field, **where) for p in exc.problems]
        findings.extend(_trace_findings(_raw_trace(data), expect_goals, where))
        return findings
    findings = [Finding("ok", "ok", "Valid SMF message", **where)]
    meta = message.metadata
    missing_ttl = freshness_problem(
        meta,
        time_critical_domains=time_critical_domains,
        time_critical="the message" if time_critical else "",
    )
    if missing_ttl:
        findings = [
            Finding(
                "error",
                "ttl-required",
                f"freshness_ttl {missing_ttl}",
                field="metadata.freshness_ttl",
                **where,
            )
        ]
    if min_ttl and meta.freshness_ttl is not None and meta.freshness_ttl < min_ttl:
        findings.append(
            Finding(
                "warning",
                "short-ttl",
                f"freshness_ttl={meta.freshness_ttl:g} (recommended min: {min_ttl:g} for real-time data)",
                field="metadata.freshness_ttl",
                **where,
            )
        )
    at = now or utcnow()
    expires = message.expires_at()
    if expires is not None and message.is_stale(at):
        findings.append(
            Finding(
                "warning" if allow_stale else "error",
                "stale",
                f"stale: created {message.created_at.isoformat()} with freshness_ttl={meta.freshness_ttl:g}, "
                f"expired {expires.isoformat()} (checked at {at.isoformat()})",
                field="created_at",
                **where,
            )
        )
    drift = message.intention_drift()
    if drift:
        findings.append(Finding("error", "intent-drift", drift, field="metadata.intention_trace", **where))
    findings.extend(_trace_findings(meta.intention_trace, expect_goals, where))
    return findings


def _raw_trace(data: Any) -> list[str] | None:
    meta = data.get("metadata") if isinstance(data, dict) else None
    trace = meta.get("intention_trace") if isinstance(meta, dict) else None
    if isinstance(trace, list) and all(isinstance(x, str) for x in trace):
        return trace
    return None


def _trace_findings(
    trace: list[str] | None, expect_goals: Sequence[str], where: dict[str, str]
) -> list[Finding]:
    if trace is None:
        return []
    out: list[Finding] = []
    for goal_id in expect_goals:
        if goal_id not in trace:
            out.append(
                Finding(
                    "error",
                    "goal-missing",
                    f"intention_trace missing {goal_id} (found: [{', '.join(trace)}])",
                    field="metadata.intention_trace",
                    **where,
                )
            )
    return out
