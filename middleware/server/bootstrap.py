"""Assemble a running Agency, and its post office, from an agency definition (``--config``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..agents import AgentRegistry
from ..audit import AuditLog, WalAuditLog, WalOptions
from ..audit.checkpoint import key_inside
from ..audit.open_tasks import close_open_tasks
from ..audit.shredding import FileKeyStore, SubjectSealer, reveal
from ..errors import InvalidInput
from ..failures import FailureProcessor
from ..guards.content_guard import ContentGuard
from ..memory_task_store import MemoryTaskStore
from ..messaging.limits import RateLimits
from ..messaging.post_office import PostOffice
from ..metering import Metering
from ..pipeline import Agency
from ..router import Router
from ..task_recovery import rebuild_tasks
from ..usage_meter import UsageMeter
from .backends import choose_backends
from .definition import AgencyDefinition
from .metrics import MeteredAuditLog, Metrics

if TYPE_CHECKING:
    from ..messaging.webhooks import WebhookDispatcher

__all__ = ["build_agency", "build_post_office", "start_webhooks"]


async def build_agency(definition: AgencyDefinition, *, metrics: Metrics | None = None) -> Agency:
    """An :class:`Agency` with every agent, contract and goal of ``definition`` registered.

    With ``metrics``, the audit log is metered and Redis errors are counted. Remote workers
    are called over TLS when the definition has ``workers.tls``.

    Raises:
        InvalidInput: ``audit.checkpoint_key`` is missing, unreadable, not a signer key,
            writable by others, or inside the audit directory.
        AuditError: the default key is still under the audit directory (move it, as the
            message says).
    """
    options = WalOptions(
        on_sync=metrics.audit_fsync_latency.observe if metrics is not None else None,
        checkpoint_interval=definition.audit.checkpoint_interval.total_seconds(),
    )
    key = definition.audit.checkpoint_key
    if key is not None and key_inside(key, definition.audit_directory):
        raise InvalidInput.single(
            "audit.checkpoint_key",
            f"{key} is inside the audit directory {definition.audit_directory}: anyone who can copy or "
            "rewrite the log could re-sign it; keep the key outside it (a secrets path)",
            what="definition",
        )
    signer = definition.audit.signer()
    wal = WalAuditLog(definition.audit_directory, definition.agency.node_id, signer=signer, options=options)
    if not wal.recovery.clean:  # a crash: tasks it cut off end in the log now, as interrupted
        await close_open_tasks(wal, (r for _, r in wal.records()), node=wal.node)
    audit: AuditLog = wal
    if metrics is not None:
        audit = MeteredAuditLog(audit, metrics)
    on_redis_error = metrics.redis_error if metrics is not None else None
    backends = choose_backends(definition, "agency", on_redis_error=on_redis_error)
    # held and interrupted tasks the store does not have (the memory store after any restart)
    tasks = backends.tasks or MemoryTaskStore(max_finished=definition.agency.kept_finished_tasks)
    await rebuild_tasks(wal.task_records(), tasks, reveal=_snapshot_reveal(definition))
    # The served gateway is where installed packages' failure handlers take effect: discovery
    # is asked for here, never by a plain Agency() (docs/failures.md, "Custom handlers").
    failures = FailureProcessor(
        policy=definition.agency.failure_policy,
        policies=definition.agency.failure_policies,
        load_entry_points=True,
    )
    # the core has no transport: the gateway injects how it calls remote workers (gRPC, with the
    # definition's workers TLS and token; plaintext and no token when it names none)
    from .remote_agent import RemoteAgent  # grpc, loaded when an agency is built

    agents = AgentRegistry(
        remote_factory=RemoteAgent.factory(tls=definition.workers.tls, token=definition.workers.token())
    )
    agency = Agency(
        agents=agents,
        audit=audit,
        config=definition.agency,
        failures=failures,
        tasks=tasks,
        sessions=backends.sessions,
        leases=backends.leases,
        events=backends.events,
        catalog=backends.catalog,
        router=Router(backends.catalog, stats=backends.stats),
        policy=definition.policies.gate(),
        guard=_guard(definition),
        planner=definition.planner.build(),
        metering=_metering(definition, backends.usage),
    )
    limits = _rate_limits(definition)
    for spec in definition.agents:
        # replace: every replica (and a restarted one, while its old entry lives on in Redis)
        # registers the same contracts from the same file
        agent = spec.build()
        if limits is not None and getattr(agent, "rate_limits", False) is None:
            agent.rate_limits = limits  # type: ignore[union-attr]  # a wrapped LangChain agent
        await agency.register(spec.contract, agent, replace=True)
    for goal in definition.goals:
        agency.register_goal(goal)
    return agency


def _metering(definition: AgencyDefinition, meter: UsageMeter | None) -> Metering | None:
    """Prices, sums and budgets of ``agency.usage`` (sums in Redis with Redis storage)."""
    if not definition.agency.usage.enabled:
        return None
    from ..smf import utcnow

    return Metering(definition.agency.usage, meter=meter, clock=utcnow)


def _rate_limits(definition: AgencyDefinition) -> Any:
    """``agency.usage.rate_limits`` for the wrapped LangChain agents (buckets in Redis with
    Redis storage, shared by replicas); None when there are none or LangChain is not installed."""
    rules = definition.agency.usage.rate_limits
    if not (rules.model or rules.tool):
        return None
    try:
        from ..langchain.usage import ModelRateLimits
    except ImportError:
        return None
    store = None
    if definition.storage.backend == "redis":
        from ..redis.rate_limits import RedisBuckets

        store = RedisBuckets.from_url(definition.storage.redis_url, prefix=definition.storage.key_prefix)
    return ModelRateLimits(rules, store)


def _snapshot_reveal(definition: AgencyDefinition) -> Callable[[str], str] | None:
    """Opens sealed personal values of held tasks' snapshots (``task_recovery``), with the
    subject keys the personal-data guard sealed them with (None when it does not seal)."""
    guards = definition.agency.guards
    if not (guards.any_enabled and guards.personal_data.enabled and definition.subject_keys.enabled):
        return None
    store = FileKeyStore(definition.subject_key_directory)
    return lambda text: reveal(text, store, allowed=True)


def _guard(definition: AgencyDefinition) -> ContentGuard | None:
    """The content guards of ``agency.guards``; personal data in audit records sealed under the
    subjects' keys (``subject_keys``) unless turned off."""
    guards = definition.agency.guards
    if not guards.any_enabled:
        return None
    replacer = None
    if guards.personal_data.enabled and definition.subject_keys.enabled:
        replacer = SubjectSealer(FileKeyStore(definition.subject_key_directory)).replacer
    return ContentGuard(guards, audit_replacer=replacer)


async def build_post_office(
    definition: AgencyDefinition, *, audit: AuditLog, metrics: Metrics | None = None
) -> PostOffice:
    """The post office behind ``MessageService``: the definition's messaging agents enrolled,
    its communication flows, topic ACLs and rate limits enforced (rate-limit buckets next to
    the mailboxes), mailboxes in Redis (under ``storage.key_prefix``, shared
    by replicas) or in memory (see :attr:`AgencyDefinition.mailbox_backend`).

    The caller closes it with ``await post_office.transport.close()``.
    """
    messaging = definition.messaging
    on_redis_error = metrics.redis_error if metrics is not None else None
    stores = choose_backends(definition, "messaging", on_redis_error=on_redis_error)
    post_office = PostOffice(
        stores.mailboxes,
        audit=audit,
        acl=messaging.acl.build(),
        subscriptions=stores.subscriptions,
        directory=stores.directory,
        registration=messaging.registration.mode,
        registration_quota=messaging.registration.quota(),
        moderation=messaging.moderation.rules(),
        board=stores.board,
        reports_to_quarantine=messaging.moderation.reports_to_quarantine,
        limits=None if messaging.rate_limits.empty else RateLimits(messaging.rate_limits, stores.buckets),
        flows=messaging.build_flows() if messaging.flows is not None else None,
        config=messaging.delivery,
        on_depth=metrics.set_mailbox_depth if metrics is not None else None,
    )
    for agent in messaging.agents:
        await post_office.enroll(
            agent.name,
            agent.public_key,
            agent.token_sha256,
            description=agent.description,
            tenant=agent.tenant,
        )
    return post_office


async def start_webhooks(
    definition: AgencyDefinition,
    post_office: PostOffice,
    *,
    metrics: Metrics | None = None,
    health: Callable[[str, bool], Awaitable[None]] | None = None,
) -> WebhookDispatcher | None:
    """Start pushing the messages of the definition's agents that have ``webhooks`` (None when
    none has). This gateway consumes their mailboxes as ``webhook@<node id>``.

    Args:
        health: Called with ``("agency.webhooks/<agent>", serving)`` when an agent's webhook
            starts or stops failing (the health detail).

    Raises:
        InvalidInput: a webhook's ``secret_file`` cannot be read.
    """
    from ..messaging.webhooks import WebhookDispatcher

    hooks = {a.name: a.webhooks for a in definition.messaging.agents if a.webhooks}
    if not hooks:
        return None

    async def on_failing(agent: str, failing: bool) -> None:
        if metrics is not None:
            metrics.set_webhook_failing(agent, failing)
        if health is not None:
            await health(f"agency.webhooks/{agent}", not failing)

    dispatcher = WebhookDispatcher(
        post_office,
        hooks,
        consumer=f"webhook@{definition.agency.node_id}",
        on_attempt=metrics.webhook_attempt if metrics is not None else None,
        on_failing=on_failing,
    )
    for agent in hooks:  # every webhook starts healthy
        await on_failing(agent, False)
    await dispatcher.start()
    return dispatcher
