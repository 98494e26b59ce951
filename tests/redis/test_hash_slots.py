"""Every Redis script, transaction and multi-key command keeps its keys in one hash slot.

Redis Cluster refuses (``CROSSSLOT``) a script, a MULTI/EXEC or a multi-key command whose keys
are in different slots. Three proofs, so that a new store, script or transaction cannot regress:

- **Recorded** (standalone Redis): every store in ``middleware/redis`` runs a tour that calls
  each of its public methods, through a recorder on redis-py's connections that sees every
  command sent. Each EVAL/EVALSHA's KEYS, each WATCH…MULTI…EXEC group's keys (PUBLISH's channel
  included: the cluster client hashes it inside a transaction) and each other command with
  several keys (asked of the server with ``COMMAND GETKEYS``) must share ``key_slot``. The tours
  must call every public method and run every Lua script of the package.
- **Static**: every key argument of every ``redis.call`` in the package's Lua is a ``KEYS[i]``
  (or a name bound to one): no script builds a key name it was not passed.
- **On a real 3-master cluster** started here (``redis-server --cluster-enabled yes``): the same
  tours through ``redis.asyncio.cluster.RedisCluster``, and a scan that finds keys on every
  primary.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import os
import pkgutil
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, ResponseError

import middleware.redis as redis_package
from middleware.catalog import CatalogQuery
from middleware.contracts import CapabilityContract
from middleware.messaging.directory import AgentRecord
from middleware.messaging.limits import Bucket
from middleware.messaging.moderation import Quarantined
from middleware.people.model import Escalation
from middleware.redis import keys as key_names
from middleware.redis.agent_directory import RedisDirectory
from middleware.redis.batch import Batch
from middleware.redis.catalog import RedisCatalog
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
from middleware.task_events import progress_event
from middleware.task_leases import Holder
from middleware.task_store import TaskQuery
from middleware.tasks import TaskRecord, TaskRequest, TaskState
from middleware.testing import ManualClock
from middleware.usage_meter import Counter

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
pytestmark = pytest.mark.timeout(60)

# ------------------------------------------------------------------------- the tours
# Each tour calls every public method of one store (checked: see _Spy) with data that takes
# every path that sends multi-key work: conflicts, refusals, expiries, dangling index members.


def contract(name: str, **kw: Any) -> CapabilityContract:
    kw.setdefault("can_do", ["act"])
    return CapabilityContract(name=name, version="1.0.0", **kw)


async def tour_catalog(store: Any) -> None:
    await store.register(contract("a", tags=["t"]))
    await store.register(contract("b", cannot_do=["nope"]))
    await store.update(contract("a", can_do=["act", "other"], tags=["t", "u"]))
    await store.register_many([contract("c", tags=["t"]), contract("d")])
    await store.register_many([contract("d")], replace=True)
    await store.heartbeat("a@1.0.0")
    assert [e.key for e in await store.candidates("act")] == ["a@1.0.0", "b@1.0.0", "c@1.0.0", "d@1.0.0"]
    assert (await store.get("a@1.0.0")).revision == 2
    assert [e.key for e in await store.query(CatalogQuery(action="act", tags=["t", "u"]))] == ["a@1.0.0"]
    assert len(await store.all()) == 4
    async with store.watch() as events:
        await store.deregister("b@1.0.0")
        assert (await asyncio.wait_for(events.__anext__(), 5)).key == "b@1.0.0"
    # an entry whose key expired leaves a dangling index member: the lookups drop it
    await store.redis.delete(key_names.catalog.entry(store.prefix, "c@1.0.0"))
    assert "c@1.0.0" not in [e.key for e in await store.candidates("act")]
    assert [e.key for e in await store.query(CatalogQuery(tags=["t"]))] == ["a@1.0.0"]
    store.clock.advance(31)
    await store.heartbeat("d@1.0.0")
    assert [e.key for e in await store.sweep()] == ["a@1.0.0"]  # stale (c's entry is gone)
    store.clock.advance(301)
    await store.heartbeat("d@1.0.0")  # was stale: announced alive
    assert sorted(e.key for e in await store.sweep()) == ["a@1.0.0", "c@1.0.0"]  # expired
    assert await store.clear() > 0


async def tour_snapshot(store: Any) -> None:
    catalog = store._catalog
    await catalog.register(contract("a"))
    store.start()
    await store.wait_refreshed(0)  # subscribed, then the heartbeats and entries read
    assert store.ready
    now = catalog.clock()
    assert [e.key for e in store.candidates("act", now)] == ["a@1.0.0"]
    await catalog.redis.set(key_names.catalog.entry(catalog.prefix, "b@1.0.0"), b"{}")  # not read yet
    await store.refresh()  # the known entries with the heartbeats, then the new ones
    raw = await catalog.redis.get(key_names.catalog.entry(catalog.prefix, "a@1.0.0"))
    store.put([("b@1.0.0", raw.replace(b'"a"', b'"b"'), 1.0)])
    store.beat("b@1.0.0", 2.0)
    assert store.get("b@1.0.0", now) is not None
    store.discard("b@1.0.0")
    await store.drop_subscription()
    await store.aclose()
    assert not store.ready


async def tour_stats(store: Any) -> None:
    await store.started("a@1")
    await store.finished("a@1", success=True)
    for _ in range(3):  # past the window: the script pops the oldest outcome
        await store.started("a@1")
        await store.finished("a@1", success=False)
    await store.started("a@1")
    await store.released("a@1")
    assert (await store.snapshot("a@1")).samples == 3  # the window
    assert set(await store.snapshots(["a@1", "b@1"])) == {"a@1", "b@1"}
    flushes = store.flushes
    await store.started("b@1")
    await store.flush()  # the unsent starts of several agents: one pipeline, one slot each
    await store.wait_flushed(flushes)
    await store.started("b@1")
    await store.aclose()


async def tour_mailbox(store: Any) -> None:
    assert store.client is not None
    await store.enqueue("bob", b"1", max_len=10)
    named = await store.enqueue("bob", b"2", max_len=10, key="k", ttl=5)
    assert await store.enqueue("bob", b"2 again", max_len=10, key="k", ttl=5) == named
    await store.enqueue_many("bob", [b"3", b"4"], max_len=10)
    batch = await store.receive("bob", "c1", count=2, visibility_timeout=30)
    await store.release("bob", batch.deliveries[:1])
    assert len(await store.browse("bob")) == 4
    again = await store.receive("bob", "c1", count=10, visibility_timeout=30)
    ids = [d.entry_id for d in again.deliveries]
    await store.ack("bob", ids[:1], processed=["m1"], processed_ttl=60)
    assert await store.seen("bob", ["m1", "m2"]) == {"m1"}
    await store.dead_letter("bob", again.deliveries[1], "bad")
    assert [d.reason for d in await store.dead_letters("bob")] == ["bad"]
    assert await store.size("bob") == 2
    assert await store.trim("bob", 1) == 1
    assert (await store.receive("empty", "c1", count=1, visibility_timeout=1, block=0.05)).deliveries == []
    await store.delete("bob")
    await store.purge()


async def tour_buckets(store: Any) -> None:
    buckets = [Bucket("sender", "a", 1.0, 2), Bucket("recipient", "b", 1.0, 1), Bucket("topic", "t", 5.0, 9)]
    assert await store.take(buckets) is None
    refused = await store.take(buckets)
    assert refused is not None and refused[0].scope == "recipient"


async def tour_directory(store: Any) -> None:
    def record(name: str, token: str) -> AgentRecord:
        return AgentRecord(
            name=name,
            public_key="pk",
            token_sha256=token,
            registered_at=1.0,
            registered_by="client-1",
            name_keys=[name],
        )

    assert await store.add(record("a", "t1"), max_per_client=5) is None
    assert (await store.add(record("a", "t9"), max_per_client=5)) is not None  # the name is taken
    await store.put(record("b", "t2"))
    assert (await store.get("a")) is not None
    assert (await store.by_token("t2")) is not None
    await store.touch("a", 5.0)
    assert await store.last_seen(["a", "b"]) == {"a": 5.0}
    assert [r.name for r in await store.all()] == ["a", "b"]
    assert (await store.remove("a")) is not None


async def tour_subscriptions(store: Any) -> None:
    await store.add("news", "a")
    await store.add("alerts", "b")
    assert await store.members("news") == {"a"}
    await store.remove("alerts", "b")
    assert await store.all() == {"news": {"a"}}


async def tour_escalations(store: Any) -> None:
    esc = Escalation(task_id="t1", kind="approval")
    await store.put(esc)
    assert (await store.get(esc.id)) is not None
    assert (await store.open_for_task("t1")) is not None
    assert [e.id for e in await store.list_open()] == [esc.id]
    assert await store.claim(esc.id)
    await store.release(esc.id)
    await store.put(esc.model_copy(update={"status": "closed"}))
    assert await store.list_open() == []
    await store.note_task({"task_id": "t1", "state": "done"})
    assert [t["task_id"] for t in await store.recent_tasks()] == ["t1"]


async def tour_board(store: Any) -> None:
    await store.hold(Quarantined(message_id="m1", sender="a", reason="r", rule="x", at=1.0))
    assert (await store.get("m1")) is not None
    assert await store.is_held(["m1", "m2"]) == {"m1"}
    assert len(await store.items()) == 1
    assert await store.report("m1", "bob", "spam") == 1
    assert await store.reports("m1") == {"bob": "spam"}
    assert (await store.take("m1")) is not None


async def tour_sign_ins(store: Any) -> None:
    sign_in = await store.start("alice", seconds=60)
    assert await store.holder(sign_in) == "alice"
    await store.end(sign_in)


async def tour_sessions(store: Any) -> None:
    await store.save(ConversationState(session_id="s1"))
    assert (await store.get("s1")) is not None
    async with store.lock("s1"):
        pass
    assert store.key("s1")


async def tour_tasks(store: Any) -> None:
    record = TaskRecord.start(TaskRequest(task_id="t1", text="hi"), None, "trace")
    record.client = "alice"
    await store.create(record)
    record = await store.get("t1")
    await store.save(record)
    async with store.lock("t1"):
        pass
    assert [t.task_id for t in (await store.list(TaskQuery())).tasks] == ["t1"]
    assert [t.task_id for t in (await store.list(TaskQuery(client="alice"))).tasks] == ["t1"]
    # the batched writes: a new task with its lease (one pipeline), a save with its events (one script)
    leases = RedisTaskLeases(store.client, prefix=store.prefix)
    log = RedisTaskEventLog(store.client, prefix=store.prefix)
    assert store.batches_with(log, leases)
    assert store.key("t1") and store.lock_key("t1") and store.events_key("t1")
    second = TaskRecord.start(TaskRequest(task_id="t2", text="hi"), None, "trace", client="alice")
    assert await store.create_leased(second, leases, Holder(node="gw", token="t"))
    second.state = TaskState.COMPLETED
    assert await store.save_told(second, [_event("t2", "done")]) == 1
    assert await store.prune_listed(key_names.tasks(store.prefix), now=second.created_at) == 0


def _event(task_id: str, text: str) -> Any:
    return progress_event(
        task_id=task_id, trace_id="tr", state="dispatched", step="s", agent="a", kind="token",
        data={"text": text}, node="n",
    )  # fmt: skip


async def tour_leases(store: Any) -> None:
    a, b = Holder(node="gw-a", token="aaaa"), Holder(node="gw-b", token="bbbb")
    assert await store.hold("t1", a)
    assert await store.hold("t2", a)
    assert await store.renew(["t1"], a, release=["t2"]) == []
    await store.expired()
    assert await store.take("t1") is None  # not expired: nothing taken
    assert not await store.hold("t1", b)
    await store.release("t1", a)
    batch = Batch()  # a new task's lease queued with its record (RedisTaskStore.create_leased)
    at = store.hold_into(batch, "t3", a)
    assert (await batch.run(store.client))[at] == 1


async def tour_events(store: Any) -> None:
    def event(text: str) -> Any:
        data = {"text": text}
        return progress_event(
            task_id="t1",
            trace_id="tr",
            state="dispatched",
            step="s",
            agent="a",
            kind="token",
            data=data,
            node="n",
        )

    assert await store.append("t1", [event("a"), event("b")]) == 2
    assert len(await store.read("t1")) == 2
    assert (await store.last("t1")) is not None
    assert store.key("t1")


async def tour_usage(store: Any) -> None:
    counters = [
        Counter("tenant", "acme", "2026-02"),
        Counter("tenant", "acme", "total"),
        Counter("user", "u", "total"),
    ]
    assert len(await store.add(counters, input_tokens=1, output_tokens=2, cost_micros=3)) == 3
    assert [s.cost_micros for s in await store.get(counters)] == [3, 3, 3]
    assert await store.first_time(counters[0], "50%")
    assert store.key(counters[0])


@dataclass
class Store:
    make: Callable[[Any, str], Any]
    tour: Callable[[Any], Awaitable[None]]


STORES: dict[str, Store] = {
    "catalog": Store(
        # the direct reads (the snapshot, toured below, would serve some of them)
        lambda c, p: RedisCatalog(
            c, prefix=p + "catalog:", lease_seconds=30, clock=ManualClock(), snapshot_seconds=None
        ),
        tour_catalog,
    ),
    "catalog_snapshot": Store(
        lambda c, p: (
            RedisCatalog(
                c, prefix=p + "catalog:", lease_seconds=30, clock=ManualClock(), snapshot_seconds=1.0
            ).snapshot
        ),
        tour_snapshot,
    ),
    "routing_stats": Store(lambda c, p: RedisRoutingStats(c, prefix=p + "stats:", window=3), tour_stats),
    "mailbox": Store(lambda c, p: RedisMailbox(c, prefix=p), tour_mailbox),
    "rate_limits": Store(lambda c, p: RedisBuckets(c, prefix=p), tour_buckets),
    "agent_directory": Store(lambda c, p: RedisDirectory(c, prefix=p), tour_directory),
    "subscriptions": Store(lambda c, p: RedisSubscriptions(c, prefix=p), tour_subscriptions),
    "escalation_store": Store(lambda c, p: RedisEscalationStore(c, prefix=p), tour_escalations),
    "quarantine_board": Store(lambda c, p: RedisBoard(c, prefix=p), tour_board),
    "sign_ins": Store(lambda c, p: RedisSignIns(c, prefix=p), tour_sign_ins),
    "session_store": Store(lambda c, p: RedisSessionStore(c, prefix=p), tour_sessions),
    "task_store": Store(lambda c, p: RedisTaskStore(c, prefix=p, ttl_s=60, lock_ttl_s=5), tour_tasks),
    "task_leases": Store(lambda c, p: RedisTaskLeases(c, prefix=p), tour_leases),
    "task_events": Store(lambda c, p: RedisTaskEventLog(c, prefix=p), tour_events),
    "usage_meter": Store(lambda c, p: RedisUsageMeter(c, prefix=p), tour_usage),
}
#: Not Redis stores: the key names, the error mapping, the health monitor.
#: (connection: a URL -> a client; batch: the stores' pipelines, toured with them.)
NOT_STORES = {"keys", "errors", "health", "connection", "batch"}
#: Public methods a tour need not call (closing the shared client).
NOT_TOURED = {"close"}


class _Spy:
    """The store, remembering which of its methods were called."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        self.called.add(name)
        return value


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, value in vars(cls).items()
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))
    } - NOT_TOURED


async def run_tour(name: str, client: Any, prefix: str) -> None:
    store = STORES[name].make(client, prefix)
    spy = _Spy(store)
    await STORES[name].tour(spy)
    missing = public_methods(type(store)) - spy.called
    assert not missing, f"the {name} tour does not call {sorted(missing)}: add them to it"


# ------------------------------------------------------------------------- the recorder
@dataclass
class Group:
    """Keys that must share a slot: one script, one transaction or one multi-key command."""

    what: str
    keys: list[bytes] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def slots(self) -> set[int]:
        return {key_slot(k) for k in self.keys}


_NO_KEYS = {
    "MULTI",
    "EXEC",
    "DISCARD",
    "UNWATCH",
    "PING",
    "SCRIPT",
    "CLIENT",
    "HELLO",
    "SELECT",
    "INFO",
    "COMMAND",
    "TIME",
    "AUTH",
    "READONLY",
    "CLUSTER",
    "ECHO",
    "PUBLISH",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
}


def _b(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


class Recorder:
    """Every command sent by any asyncio redis-py connection, in order, per connection."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, tuple[bytes, ...]]] = []

    @contextmanager
    def recording(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
        original = AbstractConnection.pack_command
        sent = self.sent

        def pack_command(conn: AbstractConnection, *args: Any) -> Any:
            words = [_b(a) for a in args]
            words[:1] = words[0].split()  # "SCRIPT LOAD" is one argument here
            sent.append((id(conn), tuple(words)))
            return original(conn, *args)

        monkeypatch.setattr(AbstractConnection, "pack_command", pack_command)
        try:
            yield self
        finally:
            monkeypatch.setattr(AbstractConnection, "pack_command", original)

    def groups(self, server: redis.Redis) -> list[Group]:
        """The recorded commands as groups (keys asked of the server: COMMAND GETKEYS)."""
        cache: dict[tuple[bytes, ...], list[bytes]] = {}

        def keys_of(words: tuple[bytes, ...]) -> list[bytes]:
            if words[0].upper().decode() in _NO_KEYS:
                return []
            if words not in cache:
                try:
                    cache[words] = [_b(k) for k in server.command_getkeys(*words)]
                except ResponseError:  # a command without keys
                    cache[words] = []
            return cache[words]

        out: list[Group] = []
        open_: dict[int, Group] = {}
        for conn, words in self.sent:
            name = words[0].upper().decode()
            group = open_.get(conn)
            if name in ("WATCH", "MULTI"):
                group = open_.setdefault(conn, Group("transaction"))
                group.keys += keys_of(words)
                group.commands.append(name)
            elif name in ("EXEC", "DISCARD", "UNWATCH"):
                if group is not None:
                    out.append(open_.pop(conn))
            elif group is not None:
                group.keys += [words[1]] if name == "PUBLISH" else keys_of(words)
                group.commands.append(name)
            elif name in ("EVAL", "EVALSHA"):
                sha = hashlib.sha1(words[1]).hexdigest() if name == "EVAL" else words[1].decode()
                out.append(Group(f"script {sha}", keys_of(words), [name]))
            elif len(found := keys_of(words)) > 1:
                out.append(Group(name.lower(), found, [name]))
        return out

    def scripts_run(self) -> set[str]:
        shas = set()
        for _, words in self.sent:
            name = words[0].upper()
            if name == b"EVALSHA":
                shas.add(words[1].decode())
            elif name == b"EVAL":
                shas.add(hashlib.sha1(words[1]).hexdigest())
        return shas


@pytest.fixture
async def client() -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(REDIS_URL)
    yield c
    await c.aclose()


@pytest.fixture
def server() -> Iterator[redis.Redis]:
    s = redis.Redis.from_url(REDIS_URL)
    yield s
    s.close()


async def _cleanup(client: Any, prefix: str) -> None:
    found = [k async for k in key_names.scan(client, prefix + "*")]
    await key_names.delete(client, found)


def _crossing(groups: list[Group]) -> list[str]:
    return [
        f"{g.what} {g.commands}: keys in {len(g.slots())} slots: {sorted(set(g.keys))}"
        for g in groups
        if len(g.slots()) > 1
    ]


# --------------------------------------------------------------------------- the tests
def test_every_store_module_has_a_tour() -> None:
    modules = {m.name for m in pkgutil.iter_modules(redis_package.__path__)} - NOT_STORES
    assert modules == set(STORES), "a new Redis store needs a tour in STORES"


@pytest.mark.parametrize("name", sorted(STORES))
async def test_a_stores_scripts_transactions_and_multi_key_commands_stay_in_one_slot(
    name: str, client: aioredis.Redis, server: redis.Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    try:
        with recorder.recording(monkeypatch):
            await run_tour(name, client, redis_prefix)
    finally:
        await _cleanup(client, redis_prefix)
    assert _crossing(recorder.groups(server)) == []


async def test_the_recorder_sees_a_cross_slot_transaction_and_script(
    client: aioredis.Redis, server: redis.Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof above can fail: untagged keys in one MULTI, one script and one MGET are caught."""
    a, b = redis_prefix + "a", redis_prefix + "b"
    assert key_slot(a.encode()) != key_slot(b.encode())
    recorder = Recorder()
    with recorder.recording(monkeypatch):
        pipe = client.pipeline(transaction=True)
        pipe.set(a, 1)
        pipe.set(b, 2)
        await pipe.execute()
        await client.register_script("return redis.call('GET', KEYS[1])")(keys=[a, b])
        await client.mget([a, b])
        await client.mget(
            [key_names.tagged(redis_prefix, "x", "1"), key_names.tagged(redis_prefix, "x", "2")]
        )
    await client.delete(a)
    await client.delete(b)
    crossing = _crossing(recorder.groups(server))
    assert {c.split()[0] for c in crossing} == {"transaction", "script", "mget"}  # not the tagged MGET
    assert len([c for c in crossing if c.startswith("mget")]) == 1


async def test_every_lua_script_of_the_package_is_run_by_a_tour(
    client: aioredis.Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    try:
        with recorder.recording(monkeypatch):
            for name in sorted(STORES):
                await run_tour(name, client, redis_prefix + name + ":")
    finally:
        await _cleanup(client, redis_prefix)
    missing = {where for where, source in lua_scripts() if _sha(source) not in recorder.scripts_run()}
    assert not missing, f"scripts no tour runs: {sorted(missing)}"


# ---------------------------------------------------------------- static: KEYS[] only
def _sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def lua_scripts() -> list[tuple[str, str]]:
    """(module.NAME, source) of every module-level Lua script in middleware.redis."""
    found = []
    for info in pkgutil.iter_modules(redis_package.__path__):
        module = importlib.import_module(f"middleware.redis.{info.name}")
        for attr, value in vars(module).items():
            if isinstance(value, str) and "redis.call" in value:
                found.append((f"{info.name}.{attr}", value))
    # a fragment other scripts are built from (task_leases._NOW) is checked inside them
    return [(w, s) for w, s in found if not any(s != other and s in other for _, other in found)]


#: Which arguments of each command a script uses are keys ("all", "first", or after STREAMS).
_KEY_ARGS = {
    "TIME": "none",
    "SUNION": "all",
    "SINTER": "all",
    "DEL": "all",
    "UNLINK": "all",
    "MGET": "all",
    "EXISTS": "all",
    "XREADGROUP": "streams",
}
_SINGLE_KEY = {
    *("GET", "SET", "INCR", "INCRBY", "PEXPIRE", "EXPIRE", "PTTL"),
    *("HGET", "HSET", "HDEL", "HEXISTS", "HMGET", "HINCRBY", "HLEN"),
    *("SADD", "SREM", "SCARD", "SMEMBERS", "SISMEMBER"),
    *("ZADD", "ZREM", "ZSCORE", "ZRANGEBYSCORE", "ZRANGE"),
    *("LLEN", "LPUSH", "RPOP", "LRANGE"),
    *("XADD", "XLEN", "XRANGE", "XAUTOCLAIM", "XPENDING", "XACK", "XDEL"),
}


def _split_args(text: str) -> list[str]:
    """The top-level comma-separated arguments of a Lua call's argument list."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return out


def _calls(source: str) -> Iterator[list[str]]:
    for match in re.finditer(r"redis\.p?call\(", source):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        yield _split_args(source[match.end() : i - 1])


def _bound_to_keys(source: str) -> set[str]:
    """Lua names that hold a KEYS entry: ``for _, k in ipairs(KEYS)``, ``local k, g = KEYS[1], …``."""
    names = set(re.findall(r"for\s+\w+\s*,\s*(\w+)\s+in\s+ipairs\(KEYS\)", source))
    for lhs, rhs in re.findall(r"local\s+([\w\s,]+?)\s*=\s*([^\n]+)", source):
        for name, value in zip(_split_args(lhs), _split_args(rhs), strict=False):
            if re.fullmatch(r"KEYS\[[^\]]+\]", value):
                names.add(name)
    return names


def key_arguments(source: str) -> Iterator[tuple[str, str]]:
    """(command, argument) for every key argument of every redis.call in ``source``."""
    for args in _calls(source):
        command = args[0].strip("'\"").upper()
        kind = _KEY_ARGS.get(command, "first" if command in _SINGLE_KEY else "unknown")
        if kind == "unknown":
            raise AssertionError(f"add {command} to _KEY_ARGS or _SINGLE_KEY (which arguments are keys?)")
        rest = args[1:]
        if kind == "first":
            yield from ((command, a) for a in rest[:1])
        elif kind == "all":
            yield from ((command, a) for a in rest)
        elif kind == "streams":
            after = [a.strip("'\"").upper() for a in rest].index("STREAMS") + 1
            streams = rest[after:]
            yield from ((command, a) for a in streams[: len(streams) // 2])


def _is_keys_reference(argument: str, bound: set[str]) -> bool:
    return bool(re.fullmatch(r"KEYS\[[^\]]+\]", argument)) or argument in bound


@pytest.mark.parametrize(("where", "source"), lua_scripts(), ids=[w for w, _ in lua_scripts()])
def test_every_key_a_script_touches_is_one_it_was_passed(where: str, source: str) -> None:
    bound = _bound_to_keys(source)
    built = [(c, a) for c, a in key_arguments(source) if not _is_keys_reference(a, bound)]
    assert not built, f"{where} uses keys it was not passed in KEYS[]: {built}"


def test_the_static_check_catches_a_built_key_name() -> None:
    source = (
        "for _, k in ipairs(KEYS) do redis.call('GET', ARGV[1] .. k) end\nredis.call('DEL', KEYS[1], 'x')"
    )
    assert [a for _, a in key_arguments(source) if not _is_keys_reference(a, _bound_to_keys(source))] == [
        "ARGV[1] .. k",
        "'x'",
    ]


# ------------------------------------------------------------------ a real cluster
def _free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return int(port)


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pings(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1) as r:
            return bool(r.ping())
    except redis.RedisError:
        return False


def _cluster_ok(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=1) as r:
        return bool(r.cluster("INFO").get("cluster_state") == "ok")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """Three masters (no replicas) of a real Redis Cluster on free ports; stopped by PID."""
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    assert server and cli, "redis-server and redis-cli are needed (Debian: apt-get install redis-server)"
    procs: list[subprocess.Popen[bytes]] = []
    ports = []
    try:
        for _ in range(3):
            port = _free_port()
            workdir: Path = tmp_path_factory.mktemp(f"cluster-{port}")
            procs.append(
                subprocess.Popen(
                    [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                     "--cluster-config-file", str(workdir / "nodes.conf"), "--dir", str(workdir),
                     "--save", "", "--appendonly", "no", "--cluster-node-timeout", "5000"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
            ports.append(port)
        for port in ports:
            _until(lambda p=port: _pings(p), f"redis-server on {port}")  # type: ignore[misc]
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in ports:
            _until(lambda p=port: _cluster_ok(p), f"cluster state on {port}")  # type: ignore[misc]
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
async def cluster_client(cluster: list[int]) -> AsyncIterator[RedisCluster]:
    c = RedisCluster(host="127.0.0.1", port=cluster[0])
    await c.initialize()
    assert len(c.get_primaries()) == 3
    yield c
    await c.aclose()


@pytest.mark.parametrize("name", sorted(STORES))
async def test_a_stores_tour_runs_on_a_real_three_master_cluster(
    name: str, cluster_client: RedisCluster, redis_prefix: str
) -> None:
    try:
        await run_tour(name, cluster_client, redis_prefix)
    finally:
        await _cleanup(cluster_client, redis_prefix)


async def test_scan_and_delete_cover_every_primary_of_a_cluster(
    cluster_client: RedisCluster, redis_prefix: str
) -> None:
    names = [key_names.mailbox.stream(redis_prefix, f"m{i}") for i in range(60)]
    for name in names:
        await cluster_client.set(name, 1)
    owners = {cluster_client.get_node_from_key(n).name for n in names}
    assert len(owners) == 3  # the keys are spread: a scan of one node would miss some
    found = {k.decode() async for k in key_names.scan(cluster_client, redis_prefix + "*")}
    assert found == set(names)
    assert await key_names.delete(cluster_client, found) == 60
    assert [k async for k in key_names.scan(cluster_client, redis_prefix + "*")] == []


async def test_a_cluster_refuses_what_the_proof_forbids(
    cluster_client: RedisCluster, redis_prefix: str
) -> None:
    """The cluster tour can fail: untagged keys in one transaction are refused."""
    a, b = redis_prefix + "a", redis_prefix + "b"
    assert key_slot(a.encode()) != key_slot(b.encode())
    with pytest.raises(RedisClusterException, match="same slot"):
        pipe = cluster_client.pipeline(transaction=True)
        pipe.set(a, 1)
        pipe.set(b, 2)
        await pipe.execute()
