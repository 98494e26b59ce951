"""Every backend of the server chosen in one place, from the definition's ``storage`` section.

:func:`choose_backends` decides, for the agency (catalog, routing statistics, task store,
sessions) or for the post office (mailboxes, rate-limit buckets, subscriptions, agent directory,
quarantine board), between the embedded memory versions and the Redis layer
(:mod:`middleware.redis`), so that replicas under the same ``storage.key_prefix`` share state.
:func:`open_backends` is the catalog and routing statistics from a URL alone (``""`` in memory,
a Redis URL in Redis).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from ..catalog import Catalog
from ..errors import InvalidInput
from ..memory_catalog import MemoryCatalog
from ..messaging.directory import Directory, MemoryDirectory
from ..messaging.limits import BucketStore, MemoryBuckets
from ..messaging.mailbox import MailboxTransport
from ..messaging.memory_mailbox import MemoryMailbox
from ..messaging.moderation import MemoryBoard, QuarantineBoard
from ..messaging.subscriptions import MemorySubscriptions, SubscriptionStore
from ..redis.errors import RedisErrorHook
from ..routing_stats import MemoryRoutingStats, RoutingStats
from ..sessions import SessionStore
from ..task_events import TaskEventLog
from ..task_leases import TaskLeases
from ..task_store import TaskStore
from ..usage_meter import UsageMeter

if TYPE_CHECKING:
    from .definition import AgencyDefinition

__all__ = ["AgencyBackends", "MessagingBackends", "choose_backends", "open_backends"]


@dataclass(frozen=True)
class AgencyBackends:
    """The agency's stores; ``tasks``, ``sessions`` and ``events`` None keep the agency's memory
    defaults; ``leases`` None: no takeover (one process)."""

    catalog: Catalog
    stats: RoutingStats
    tasks: TaskStore | None = None
    sessions: SessionStore | None = None
    leases: TaskLeases | None = None
    events: TaskEventLog | None = None
    usage: UsageMeter | None = None
    """Spending sums for budgets (None: the agency's memory default)."""


@dataclass(frozen=True)
class MessagingBackends:
    """The post office's stores (the caller closes ``mailboxes``)."""

    mailboxes: MailboxTransport
    buckets: BucketStore
    subscriptions: SubscriptionStore
    directory: Directory
    board: QuarantineBoard


@overload
def choose_backends(
    definition: AgencyDefinition, part: Literal["agency"], *, on_redis_error: RedisErrorHook | None = None
) -> AgencyBackends: ...


@overload
def choose_backends(
    definition: AgencyDefinition,
    part: Literal["messaging"],
    *,
    on_redis_error: RedisErrorHook | None = None,
) -> MessagingBackends: ...


def choose_backends(
    definition: AgencyDefinition,
    part: Literal["agency", "messaging"],
    *,
    on_redis_error: RedisErrorHook | None = None,
) -> AgencyBackends | MessagingBackends:
    """The backends of ``part`` for ``definition``: memory, or Redis when ``storage.backend`` is
    redis (for messaging: and ``messaging.mailboxes`` is ``storage``, see
    :attr:`AgencyDefinition.mailbox_backend`).

    Args:
        definition: The agency definition (its ``storage`` section decides).
        part: ``"agency"`` (catalog, routing stats, task store, sessions, task leases, task events)
            or ``"messaging"``
            (mailboxes, rate-limit buckets, subscriptions, agent directory, quarantine board).
        on_redis_error: Told the operation of every Redis error (see :mod:`middleware.redis.errors`).
    """
    storage = definition.storage
    if part == "messaging":
        if definition.mailbox_backend != "redis":
            return MessagingBackends(
                MemoryMailbox(), MemoryBuckets(), MemorySubscriptions(), MemoryDirectory(), MemoryBoard()
            )
        from ..redis.agent_directory import RedisDirectory
        from ..redis.mailbox import RedisMailbox
        from ..redis.quarantine_board import RedisBoard
        from ..redis.rate_limits import RedisBuckets
        from ..redis.subscriptions import RedisSubscriptions

        prefix = storage.key_prefix
        mailboxes = RedisMailbox.from_url(storage.redis_url, prefix=prefix, on_redis_error=on_redis_error)
        client = mailboxes.client  # every messaging store shares the mailboxes' connection
        return MessagingBackends(
            mailboxes,
            # rate-limit buckets next to the mailboxes: every replica draws from the same ones
            RedisBuckets(client, prefix=prefix, on_redis_error=on_redis_error),
            # subscriptions made through one replica, known to all, kept across restarts
            RedisSubscriptions(client, prefix=prefix, on_redis_error=on_redis_error),
            # the agents registered through the RPC: their tokens work on every replica
            RedisDirectory(client, prefix=prefix, on_redis_error=on_redis_error),
            RedisBoard(client, prefix=prefix, on_redis_error=on_redis_error),
        )
    # catalog and routing stats shared by replicas too (under key_prefix)
    catalog, stats = open_backends(
        storage.redis_url if storage.backend == "redis" else "",
        prefix=storage.key_prefix,
        lease_seconds=storage.lease_seconds,
        on_redis_error=on_redis_error,
        stats_ttl_s=storage.retention.routing_stats_seconds,
    )
    if storage.backend != "redis":
        return AgencyBackends(catalog, stats)
    from ..redis.session_store import RedisSessionStore
    from ..redis.task_events import RedisTaskEventLog
    from ..redis.task_leases import RedisTaskLeases
    from ..redis.task_store import RedisTaskStore

    retention = storage.retention
    # task state shared by replicas: resume on any of them; kept as long as storage.retention says
    return AgencyBackends(
        catalog,
        stats,
        tasks=RedisTaskStore.from_url(
            storage.redis_url,
            prefix=storage.key_prefix,
            ttl_s=retention.held_task_seconds,
            finished_ttl_s=retention.finished_task_seconds,
            events_ttl_s=retention.task_event_seconds,
            on_redis_error=on_redis_error,
            replica_acks=storage.replica_acks,
            replica_ack_timeout_ms=storage.replica_ack_timeout_ms,
        ),
        sessions=RedisSessionStore.from_url(
            storage.redis_url,
            prefix=storage.key_prefix,
            ttl_s=retention.session_seconds or definition.agency.session_ttl_seconds,
            on_redis_error=on_redis_error,
        ),
        # a lease on every running task: a replica takes over the tasks of a gateway that died
        leases=RedisTaskLeases.from_url(
            storage.redis_url,
            prefix=storage.key_prefix,
            lease_seconds=storage.lease_seconds or 30.0,
            on_redis_error=on_redis_error,
        ),
        # every task's events: a follower reconnecting to any replica misses nothing
        events=RedisTaskEventLog.from_url(
            storage.redis_url,
            prefix=storage.key_prefix,
            ttl_s=retention.held_task_seconds,  # a finished task's: task_event_seconds (the store)
            on_redis_error=on_redis_error,
        ),
        # spending sums shared by replicas: a budget spent through one gateway stops the others
        usage=_usage_meter(definition, on_redis_error),
    )


def _usage_meter(definition: AgencyDefinition, on_redis_error: RedisErrorHook | None) -> UsageMeter | None:
    if not definition.agency.usage.enabled:
        return None
    from ..redis.usage_meter import RedisUsageMeter

    storage = definition.storage
    return RedisUsageMeter.from_url(
        storage.redis_url, prefix=storage.key_prefix, on_redis_error=on_redis_error
    )


def open_backends(
    url: str = "",
    *,
    prefix: str = "agency:",
    lease_seconds: float | None = None,
    on_redis_error: RedisErrorHook | None = None,
    stats_ttl_s: float = 86_400.0,
) -> tuple[Catalog, RoutingStats]:
    """The catalog and routing stats for ``url``.

    Args:
        url: ``""`` (in memory) or a Redis URL: ``redis://host:port/db`` (``rediss://`` for TLS),
            ``redis+sentinel://host:port,.../service``, ``redis+cluster://host:port,...`` (see
            :mod:`middleware.redis.connection`).
        prefix: Key namespace in Redis; replicas sharing a catalog use the same one.
        lease_seconds: Heartbeat lease (Redis default 30 s; in memory default none).
        on_redis_error: Told the operation of every Redis error (see :mod:`.redis.errors`).
        stats_ttl_s: Redis: an agent's routing stats go after this long without a dispatch
            (``storage.retention.routing_stats_seconds``).

    Raises:
        InvalidInput: an unsupported URL scheme.
    """
    if not url:
        return MemoryCatalog(lease_seconds=lease_seconds), MemoryRoutingStats()
    from ..redis.connection import REDIS_URL_FORMS

    if url.startswith(REDIS_URL_FORMS):
        from ..redis.catalog import RedisCatalog
        from ..redis.connection import redis_client
        from ..redis.routing_stats import RedisRoutingStats

        client = redis_client(url)
        lease = lease_seconds or 30.0
        catalog = RedisCatalog(
            client,
            prefix=prefix + "catalog:",
            lease_seconds=lease,
            on_redis_error=on_redis_error,
            snapshot_seconds=RedisCatalog.gateway_snapshot_seconds(lease),
        )
        stats = RedisRoutingStats(
            client, prefix=prefix + "stats:", ttl_seconds=stats_ttl_s, on_redis_error=on_redis_error
        )
        return catalog, stats
    raise InvalidInput.single(
        "catalog_url", f"use {', '.join(REDIS_URL_FORMS)} (see docs/operations.md), or nothing for in memory"
    )
