"""The knobs of the governance core (``AgencyConfig``), apart from the server's settings.

The core reads its configuration from this model only; :mod:`middleware.server.settings` (the server's
settings, the one reader of files and ``AGENCY_*`` variables) embeds it and re-exports it.
"""

from __future__ import annotations

import socket

from pydantic import Field, field_validator

from ._model import Model
from .circuit_breaker import BreakerConfig
from .detectors import DetectorConfig
from .errors import InvalidInput
from .failure_monitor import MonitorConfig
from .failures import FailurePolicy, FailureType, check_policy
from .guards.config import GuardConfig
from .limits import TaskLimits
from .reliability import ReliabilityConfig
from .smf import DEFAULT_TIME_CRITICAL_DOMAINS
from .usage import UsageSettings

__all__ = ["AgencyConfig"]


class AgencyConfig(Model):
    """Knobs of the governance core."""

    node_id: str = Field(
        default_factory=socket.gethostname, description="This gateway's name in the audit log."
    )
    deadline_factor: float = Field(
        default=1.0, gt=0, le=100, description="An agent's deadline is its SLO times this factor."
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, description="Retry/backup knobs.")
    max_backups: int = Field(default=3, ge=0, le=50, description="Backups tried per step before giving up.")
    failure_policies: dict[FailureType, FailurePolicy] = Field(
        default_factory=dict,
        description="Per failure type: retry caps, backoff, forced resolution (only allowed ones), backup.",
    )
    breaker: BreakerConfig = Field(default_factory=BreakerConfig, description="Per-agent circuit breaker.")
    detectors: DetectorConfig = Field(
        default_factory=DetectorConfig, description="Hedging words, policy rules, compared facts."
    )
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Failure-rate review flags.")
    time_critical_domains: list[str] = Field(
        default_factory=lambda: sorted(DEFAULT_TIME_CRITICAL_DOMAINS),
        max_length=100,
        description="Domains (contract tags, SMF metadata.domain) whose messages must carry a freshness_ttl.",
    )
    sla_seconds: float = Field(
        default=3.0,
        gt=0,
        le=86_400,
        description="The SLA of a task's handling time for the KPIs (the seed: 3 s).",
    )
    session_ttl_seconds: float = Field(
        default=24 * 3600.0,
        gt=0,
        le=400 * 24 * 3600,
        description="How long a session's conversation state lives after its last change (seconds).",
    )
    kept_finished_tasks: int = Field(
        default=1_000,
        ge=1,
        le=10_000_000,
        description=(
            "With the in-memory task store (no Redis): finished tasks kept for GetTask and "
            "ListTasks, the oldest dropped first (about 3 KB each); running tasks are always kept."
        ),
    )
    kept_task_events: int = Field(
        default=1_000,
        ge=1,
        le=10_000_000,
        description=(
            "With the in-memory task event log (no Redis): tasks whose events are kept for "
            "WatchTask, the least recently appended to dropped first (about 9 KB each)."
        ),
    )
    reliability: ReliabilityConfig = Field(
        default_factory=ReliabilityConfig,
        description="How answers' reliability_score is computed: authority table and weights.",
    )
    limits: TaskLimits = Field(
        default_factory=TaskLimits, description="Steps per task, bytes per agent answer and per outcome."
    )
    guards: GuardConfig = Field(
        default_factory=GuardConfig,
        description="Content guards: personal data and prompt injection (docs/security.md).",
    )
    usage: UsageSettings = Field(
        default_factory=UsageSettings,
        description="Model usage: prices per model, budgets, rate limits per model and tool.",
    )

    @field_validator("failure_policies")
    @classmethod
    def _allowed(cls, v: dict[FailureType, FailurePolicy]) -> dict[FailureType, FailurePolicy]:
        for ftype, policy in v.items():
            try:
                check_policy(ftype, policy, field="failure_policies")
            except InvalidInput as exc:  # re-raised as a ValueError so the path is the full one
                raise ValueError(f"{ftype.value}.resolution: {exc.problems[0].reason}") from None
        return v
