"""Assemble a running Agency from an agency definition (the file behind ``--config``)."""

from __future__ import annotations

from .audit import AuditLog, FileAuditLog
from .backends import open_backends
from .definition import AgencyDefinition
from .metrics import MeteredAuditLog, Metrics
from .pipeline import Agency
from .router import Router

__all__ = ["build_agency"]


async def build_agency(definition: AgencyDefinition, *, metrics: Metrics | None = None) -> Agency:
    """An :class:`Agency` with every agent, contract and goal of ``definition`` registered."""
    audit: AuditLog = FileAuditLog(definition.audit.directory)
    if metrics is not None:
        audit = MeteredAuditLog(audit, metrics)
    storage = definition.storage
    catalog, stats = open_backends(
        storage.redis_url if storage.backend == "redis" else "",
        prefix=storage.key_prefix,
        lease_seconds=storage.lease_seconds,
    )
    agency = Agency(
        audit=audit, config=definition.agency, catalog=catalog, router=Router(catalog, stats=stats)
    )
    for spec in definition.agents:
        await agency.register(spec.contract, spec.build())
    for goal in definition.goals:
        agency.register_goal(goal)
    return agency
