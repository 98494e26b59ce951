"""Assemble a running Agency from an agency definition (the file behind ``--config``)."""

from __future__ import annotations

from .audit import AuditLog, WalAuditLog
from .definition import AgencyDefinition
from .metrics import MeteredAuditLog, Metrics
from .pipeline import Agency

__all__ = ["build_agency"]


async def build_agency(definition: AgencyDefinition, *, metrics: Metrics | None = None) -> Agency:
    """An :class:`Agency` with every agent, contract and goal of ``definition`` registered."""
    audit: AuditLog = WalAuditLog(definition.audit.directory, definition.agency.node_id)
    if metrics is not None:
        audit = MeteredAuditLog(audit, metrics)
    tasks = None
    if definition.storage.backend == "redis":  # task state shared by replicas: resume on any of them
        from .redis_task_store import RedisTaskStore

        tasks = RedisTaskStore.from_url(definition.storage.redis_url)
    agency = Agency(audit=audit, config=definition.agency, tasks=tasks)
    for spec in definition.agents:
        await agency.register(spec.contract, spec.build())
    for goal in definition.goals:
        agency.register_goal(goal)
    return agency
