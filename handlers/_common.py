"""Shared pure helpers for the built-in handlers (re-exported from :mod:`middleware.failures`).

Every helper builds a :class:`Resolution` from the event and the policy only, so the
same event always gives the same resolution (the jitter of a retry's backoff is
derived from the event id, not drawn at random). The operator's forced resolution is not
the handlers' business: :class:`middleware.failures.FailureProcessor` applies it first.
"""

from __future__ import annotations

from middleware.failures import (
    abort,
    ask,
    backoff_ms,
    backup,
    backup_agent,
    escalate,
    forced_resolution,
    retry_then_backup,
)

#: The former name of :func:`middleware.failures.forced_resolution` (custom handlers copied
#: from the built-ins called it; the processor now applies the forced resolution itself).
configured = forced_resolution

__all__ = [
    "abort",
    "ask",
    "backoff_ms",
    "backup",
    "backup_agent",
    "configured",
    "escalate",
    "retry_then_backup",
]
