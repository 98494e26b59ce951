"""Every Redis store as the gateway builds it, with a few calls of each (reads and writes): what
the outage test (test_store_outages.py) and the Sentinel tour (test_store_tour.py) drive."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime

from redis.exceptions import RedisClusterException, RedisError

from middleware.catalog import CatalogQuery
from middleware.contracts import CapabilityContract
from middleware.errors import AgencyError, Unavailable
from middleware.messaging.directory import AgentRecord
from middleware.messaging.limits import Bucket
from middleware.messaging.moderation import Quarantined
from middleware.people.model import Escalation
from middleware.redis.agent_directory import RedisDirectory
from middleware.redis.catalog import RedisCatalog
from middleware.redis.connection import redis_client
from middleware.redis.escalation_store import RedisEscalationStore
from middleware.redis.mailbox import RedisMailbox
from middleware.redis.quarantine_board import RedisBoard
from middleware.redis.rate_limits import RedisBuckets
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.redis.session_store import RedisSessionStore
from middleware.redis.sign_ins import RedisSignIns
from middleware.redis.subscriptions import RedisSubscriptions
from middleware.redis.task_events import RedisTaskEventLog
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.redis.usage_meter import RedisUsageMeter
from middleware.sessions import ConversationState
from middleware.task_leases import Holder
from middleware.task_store import TaskQuery
from middleware.usage_meter import Counter

Call = Callable[[], Awaitable[object]]


async def store_calls(url: str, prefix: str, stack: AsyncExitStack) -> dict[str, list[tuple[str, Call]]]:
    """Store name -> its calls (reads and writes), each store on its own client to ``url``."""

    def owned(store: object) -> object:
        stack.push_async_callback(store.close)  # type: ignore[attr-defined]
        return store

    def client() -> object:
        c = redis_client(url)
        stack.push_async_callback(c.aclose)
        return c

    tasks = owned(RedisTaskStore.from_url(url, prefix=prefix))
    sessions = owned(RedisSessionStore.from_url(url, prefix=prefix))
    leases = owned(RedisTaskLeases.from_url(url, prefix=prefix, lease_seconds=30))
    events = owned(RedisTaskEventLog.from_url(url, prefix=prefix))
    catalog = owned(RedisCatalog.from_url(url, prefix=prefix + "catalog:"))
    # max_age 0: every snapshot reads Redis (the default answers from numbers up to 1 s old)
    stats = RedisRoutingStats(client(), prefix=prefix + "stats:", max_age_seconds=0)
    mailbox = owned(RedisMailbox.from_url(url, prefix=prefix))
    buckets = owned(RedisBuckets.from_url(url, prefix=prefix))
    directory = RedisDirectory(client(), prefix=prefix)
    subscriptions = RedisSubscriptions(client(), prefix=prefix)
    escalations = owned(RedisEscalationStore.from_url(url, prefix=prefix))
    board = RedisBoard(client(), prefix=prefix)
    sign_ins = owned(RedisSignIns.from_url(url, prefix=prefix))
    usage = owned(RedisUsageMeter.from_url(url, prefix=prefix))

    holder = Holder(node="g1", token=uuid.uuid4().hex)
    counter = Counter("agent", "a", "total")
    record = AgentRecord(name="agent-a", public_key="k", token_sha256="0" * 64, registered_at=1.0)
    quarantined = Quarantined(message_id="m1", sender="s", reason="r", rule="x", at=1.0)
    escalation = Escalation.model_validate(
        {
            "id": "e1",
            "task_id": "t1",
            "kind": "approval",
            "created_at": datetime(2026, 12, 1, tzinfo=UTC),
        }
    )

    @asynccontextmanager
    async def locked_session() -> AsyncIterator[None]:
        async with sessions.lock("s1", wait_s=1):  # type: ignore[attr-defined]
            yield

    return {
        "task store": [
            ("get", lambda: tasks.get("t1")),  # type: ignore[attr-defined]
            ("list", lambda: tasks.list(TaskQuery())),  # type: ignore[attr-defined]
            ("lock", lambda: _enter(tasks.lock("t1", wait_s=1))),  # type: ignore[attr-defined]
        ],
        "sessions": [
            ("get", lambda: sessions.get("s1")),  # type: ignore[attr-defined]
            ("save", lambda: sessions.save(ConversationState(session_id="s1"))),  # type: ignore[attr-defined]
            ("lock", lambda: _enter(locked_session())),
        ],
        "task leases": [
            ("hold", lambda: leases.hold("t1", holder)),  # type: ignore[attr-defined]
            ("renew", lambda: leases.renew(["t1"], holder)),  # type: ignore[attr-defined]
            ("expired", lambda: leases.expired()),  # type: ignore[attr-defined]
            ("release", lambda: leases.release("t1", holder)),  # type: ignore[attr-defined]
        ],
        "task events": [
            ("read", lambda: events.read("t1")),  # type: ignore[attr-defined]
            ("last", lambda: events.last("t1")),  # type: ignore[attr-defined]
        ],
        "catalog": [
            ("register", lambda: catalog.register(CapabilityContract(name="a", can_do=["x"]), replace=True)),  # type: ignore[attr-defined]
            ("query", lambda: catalog.query(CatalogQuery(action="x"))),  # type: ignore[attr-defined]
            ("sweep", lambda: catalog.sweep()),  # type: ignore[attr-defined]
        ],
        "routing stats": [
            ("started", lambda: _started(stats, "a")),  # counted here; sent by the flush
            ("finished", lambda: stats.finished("a", success=True)),
            ("snapshots", lambda: stats.snapshots(["a"])),
        ],
        "mailbox": [
            ("enqueue", lambda: mailbox.enqueue_many("box", [b"hi"], max_len=10)),  # type: ignore[attr-defined]
            ("receive", lambda: mailbox.receive("box", "c1", count=1, visibility_timeout=5)),  # type: ignore[attr-defined]
            ("size", lambda: mailbox.size("box")),  # type: ignore[attr-defined]
        ],
        "rate limits": [
            ("take", lambda: buckets.take([Bucket("sender", "a", rate=10.0, burst=10)])),  # type: ignore[attr-defined]
        ],
        "agent directory": [
            ("put", lambda: directory.put(record)),
            ("get", lambda: directory.get("agent-a")),
            ("all", lambda: directory.all()),
        ],
        "subscriptions": [
            ("add", lambda: subscriptions.add("news", "agent-a")),
            ("members", lambda: subscriptions.members("news")),
        ],
        "escalations": [
            ("put", lambda: escalations.put(escalation)),  # type: ignore[attr-defined]
            ("list_open", lambda: escalations.list_open()),  # type: ignore[attr-defined]
            ("claim", lambda: escalations.claim("e1")),  # type: ignore[attr-defined]
            ("recent_tasks", lambda: escalations.recent_tasks()),  # type: ignore[attr-defined]
        ],
        "quarantine board": [
            ("hold", lambda: board.hold(quarantined)),
            ("items", lambda: board.items()),
            ("report", lambda: board.report("m1", "agent-a")),
        ],
        "sign-ins": [
            ("start", lambda: sign_ins.start("ann", seconds=60)),  # type: ignore[attr-defined]
            ("holder", lambda: sign_ins.holder("nobody")),  # type: ignore[attr-defined]
        ],
        "usage meter": [
            ("add", lambda: usage.add([counter], input_tokens=1, output_tokens=1, cost_micros=1)),  # type: ignore[attr-defined]
            ("get", lambda: usage.get([counter])),  # type: ignore[attr-defined]
            ("first_time", lambda: usage.first_time(counter, "m")),  # type: ignore[attr-defined]
        ],
    }


async def _enter(manager: object) -> None:
    async with manager:  # type: ignore[attr-defined]
        pass


async def _enter(manager: object) -> None:
    async with manager:  # type: ignore[attr-defined]
        pass


async def outcome(call: Call) -> BaseException | None:
    """None when the call worked (an answer such as NotFound counts: Redis answered)."""
    try:
        await call()
    except Unavailable as exc:
        return exc
    except AgencyError:
        return None
    except (RedisError, RedisClusterException) as exc:  # a raw Redis error: INTERNAL on the wire
        return exc
    return None


async def _started(stats: RedisRoutingStats, agent: str) -> None:
    await stats.started(agent)
    await stats.flush()
