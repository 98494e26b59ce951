"""Assemble a running Agency from an agency definition (the file behind ``--config``)."""

from __future__ import annotations

from .audit import AuditLog, WalAuditLog, WalOptions
from .backends import open_backends
from .definition import AgencyDefinition
from .metrics import MeteredAuditLog, Metrics
from .pipeline import Agency
from .router import Router

__all__ = ["build_agency"]


async def build_agency(definition: AgencyDefinition, *, metrics: Metrics | None = None) -> Agency:
    """An :class:`Agency` with every agent, contract and goal of ``definition`` registered."""
    options = WalOptions(on_sync=metrics.audit_fsync_latency.observe if metrics is not None else None)
    audit: AuditLog = WalAuditLog(definition.audit.directory, definition.agency.node_id, options=options)
    if metrics is not None:
        audit = MeteredAuditLog(audit, metrics)
    storage = definition.storage
    tasks = None
    if storage.backend == "redis":  # task state shared by replicas: resume on any of them
        from .redis_task_store import RedisTaskStore

        tasks = RedisTaskStore.from_url(storage.redis_url, prefix=storage.key_prefix)
    # catalog and routing stats shared by replicas too (under key_prefix)
    catalog, stats = open_backends(
        storage.redis_url if storage.backend == "redis" else "",
        prefix=storage.key_prefix,
        lease_seconds=storage.lease_seconds,
    )
    agency = Agency(
        audit=audit,
        config=definition.agency,
        tasks=tasks,
        catalog=catalog,
        router=Router(catalog, stats=stats),
    )
    for spec in definition.agents:
        # replace: on a shared catalog every replica (and a restarted gateway) registers the same
        # definition; the file is the source of truth for the agents it names
        await agency.register(spec.contract, spec.build(), replace=True)
    for goal in definition.goals:
        agency.register_goal(goal)
    return agency
